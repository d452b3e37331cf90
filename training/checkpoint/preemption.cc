// Stop-signal handlers: async-signal-safe, they store the signal number (and for Ctrl-C write one
// line).
#include "training/checkpoint/preemption.h"

#include <unistd.h>

#include <atomic>
#include <csignal>
#include <string>

#include "parallel/comm/stop_deadline.h"

namespace kelvin::training {
namespace {

std::atomic<int> received_signal{0};

extern "C" void RecordSignal(int signal) {
  received_signal.store(signal);
  parallel::ArmStopDeadline();  // a collective waiting past the grace then means a rank is gone
  if (signal == SIGINT) {       // someone at a terminal: say what happens now
    constexpr char kLine[] =
        "\nkelvin: interrupted (Ctrl-C): stopping after this step with a checkpoint; Ctrl-C again "
        "stops at once without one\n";
    const ssize_t ignored = ::write(STDERR_FILENO, kLine, sizeof(kLine) - 1);
    (void)ignored;
  }
}

// Before InstallPreemptionHandlers.
struct sigaction previous_term, previous_usr1, previous_int;
bool installed = false;

}  // namespace

void InstallPreemptionHandlers() {
  if (installed) return;
  struct sigaction action = {};
  action.sa_handler = RecordSignal;
  sigemptyset(&action.sa_mask);
  sigaction(SIGTERM, &action, &previous_term);
  sigaction(SIGUSR1, &action, &previous_usr1);
  action.sa_flags = SA_RESETHAND;  // a second Ctrl-C has the default effect: it ends the run
  sigaction(SIGINT, &action, &previous_int);
  installed = true;
}

void UninstallPreemptionHandlers() {
  if (!installed) return;
  sigaction(SIGTERM, &previous_term, nullptr);
  sigaction(SIGUSR1, &previous_usr1, nullptr);
  sigaction(SIGINT, &previous_int, nullptr);
  installed = false;
  if (const int signal = received_signal.exchange(0); signal != 0) std::raise(signal);
}

int PreemptionSignal() { return received_signal.load(); }

void BlockStopSignals(sigset_t* before) {
  sigset_t stop;
  sigemptyset(&stop);
  for (const int signal : {SIGTERM, SIGUSR1, SIGINT}) sigaddset(&stop, signal);
  pthread_sigmask(SIG_BLOCK, &stop, before);
}

std::string StopSignalDescription(int signal) {
  switch (signal) {
    case SIGTERM:
      return "SIGTERM (preemption, a time limit or scancel)";
    case SIGUSR1:
      return "SIGUSR1 (a preemption warning)";
    case SIGINT:
      return "SIGINT (Ctrl-C)";
    default:
      return "signal " + std::to_string(signal);
  }
}

void ClearPreemption() {
  received_signal.store(0);
  parallel::DisarmStopDeadline();
}

}  // namespace kelvin::training
