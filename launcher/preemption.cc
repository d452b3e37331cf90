// Preemption signal handlers: async-signal-safe, they store the signal number only.
#include "launcher/preemption.h"

#include <atomic>
#include <csignal>

namespace kelvin::launcher {
namespace {

std::atomic<int> received_signal{0};

extern "C" void RecordSignal(int signal) { received_signal.store(signal); }

}  // namespace

void InstallPreemptionHandlers() {
  struct sigaction action = {};
  action.sa_handler = RecordSignal;
  sigemptyset(&action.sa_mask);
  sigaction(SIGTERM, &action, nullptr);
  sigaction(SIGUSR1, &action, nullptr);
}

int PreemptionSignal() { return received_signal.load(); }

void ClearPreemption() { received_signal.store(0); }

}  // namespace kelvin::launcher
