// Preemption signal handlers: async-signal-safe, they store the signal number only.
#include "launcher/preemption.h"

#include <atomic>
#include <csignal>

#include "parallel/stop_deadline.h"

namespace kelvin::launcher {
namespace {

std::atomic<int> received_signal{0};

extern "C" void RecordSignal(int signal) {
  received_signal.store(signal);
  parallel::ArmStopDeadline();  // a collective waiting past the grace then means a rank is gone
}

struct sigaction previous_term, previous_usr1;  // before InstallPreemptionHandlers
bool installed = false;

}  // namespace

void InstallPreemptionHandlers() {
  if (installed) return;
  struct sigaction action = {};
  action.sa_handler = RecordSignal;
  sigemptyset(&action.sa_mask);
  sigaction(SIGTERM, &action, &previous_term);
  sigaction(SIGUSR1, &action, &previous_usr1);
  installed = true;
}

void UninstallPreemptionHandlers() {
  if (!installed) return;
  sigaction(SIGTERM, &previous_term, nullptr);
  sigaction(SIGUSR1, &previous_usr1, nullptr);
  installed = false;
  if (const int signal = received_signal.exchange(0); signal != 0) std::raise(signal);
}

int PreemptionSignal() { return received_signal.load(); }

void ClearPreemption() {
  received_signal.store(0);
  parallel::DisarmStopDeadline();
}

}  // namespace kelvin::launcher
