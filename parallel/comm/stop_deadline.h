// After a stop signal the job is ending: srun sends SIGTERM to the surviving ranks when one
// fails (--kill-on-bad-exit), a cluster before it preempts. A collective that is still waiting a
// grace period after the signal means a rank is gone, and ends the job then instead of at the
// collective timeout. The signal handler arms the deadline; the trainer sets the grace and
// disarms it once every rank agreed to stop (its checkpoint save then waits as usual).
#pragma once

namespace kelvin::parallel {

void ArmStopDeadline();  // async-signal-safe: records the time of the signal
void DisarmStopDeadline();
// No grace is set until the trainer knows how long its steps take: until then the collective
// timeout alone applies.
void SetStopGraceSeconds(double seconds);
// Whether a stop signal came more than the grace ago; `seconds` gets the time since it.
bool StopDeadlinePassed(double* seconds);
double StopGraceSeconds();

}  // namespace kelvin::parallel
