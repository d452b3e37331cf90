// The stop deadline's state: lock-free atomics the signal handler can write.
#include "parallel/comm/stop_deadline.h"

#include <time.h>

#include <atomic>
#include <cstdint>
#include <limits>

namespace kelvin::parallel {
namespace {

std::atomic<int64_t> signal_nanoseconds{0};  // CLOCK_MONOTONIC; 0: not armed
std::atomic<int64_t> grace_nanoseconds{std::numeric_limits<int64_t>::max()};  // none yet

int64_t Now() {
  timespec now;
  clock_gettime(CLOCK_MONOTONIC, &now);  // async-signal-safe
  return int64_t{now.tv_sec} * 1000000000 + now.tv_nsec;
}

}  // namespace

void ArmStopDeadline() {
  if (signal_nanoseconds.load() == 0) signal_nanoseconds.store(Now());
}

void DisarmStopDeadline() { signal_nanoseconds.store(0); }

void SetStopGraceSeconds(double seconds) {
  grace_nanoseconds.store(seconds >= 9e9 ? std::numeric_limits<int64_t>::max()
                                         : static_cast<int64_t>(seconds * 1e9));
}

double StopGraceSeconds() { return static_cast<double>(grace_nanoseconds.load()) / 1e9; }

bool StopDeadlinePassed(double* seconds) {
  const int64_t armed = signal_nanoseconds.load();
  if (armed == 0) return false;
  const int64_t since = Now() - armed;
  if (seconds != nullptr) *seconds = static_cast<double>(since) / 1e9;
  return since > grace_nanoseconds.load();
}

}  // namespace kelvin::parallel
