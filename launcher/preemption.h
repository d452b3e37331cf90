// Preemption signals: a cluster stops a job with SIGTERM (SLURM, before its kill grace time) or,
// when asked (`#SBATCH --signal=B:USR1@120`), SIGUSR1. The handlers only record the signal; the
// trainer checks after every step, saves a checkpoint and stops cleanly.
#pragma once

namespace kelvin::launcher {

// Installs the handlers for SIGTERM and SIGUSR1 (idempotent). `kelvin train` does so first thing,
// so that a warning during start-up (MPI, the model, the restore) stops the run after its first
// step instead of killing it.
void InstallPreemptionHandlers();
// Puts back the handlers that were there before (a job without checkpoints cannot stop cleanly:
// the signals then end it), and re-raises a signal that came meanwhile.
void UninstallPreemptionHandlers();
// The signal received since the last ClearPreemption (0 when none).
int PreemptionSignal();
void ClearPreemption();

}  // namespace kelvin::launcher
