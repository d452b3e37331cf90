// Stop signals: a cluster stops a job with SIGTERM (SLURM, before its kill grace time) or, when
// asked (`#SBATCH --signal=B:USR1@120`), SIGUSR1; a user at a terminal with Ctrl-C (SIGINT, whose
// second press ends the run at once). The handlers only record the signal; the trainer checks
// after every step, saves a checkpoint and stops cleanly.
#pragma once

#include <signal.h>

#include <string>

namespace kelvin::training {

// Installs the handlers for SIGTERM, SIGUSR1 and SIGINT (idempotent). `kelvin train` does so first
// thing, so that a warning during start-up (MPI, the model, the restore) stops the run after its
// first step instead of killing it.
void InstallPreemptionHandlers();
// Puts back the handlers that were there before (a job without checkpoints cannot stop cleanly:
// the signals then end it), and re-raises a signal that came meanwhile.
void UninstallPreemptionHandlers();
// The signal received since the last ClearPreemption (0 when none).
int PreemptionSignal();
void ClearPreemption();
// Blocks the stop signals in the calling thread (so that a thread it starts leaves them to the
// training thread); `before` receives the previous mask.
void BlockStopSignals(sigset_t* before);
// "SIGTERM (preemption, a time limit or scancel)", for the stop message.
std::string StopSignalDescription(int signal);

}  // namespace kelvin::training
