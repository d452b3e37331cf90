// The failure report of a command on several ranks (rank_failures.h): held messages, compared by
// one non-blocking reduction of their hashes with a deadline.
#include "launcher/commands/rank_failures.h"

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <optional>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace kelvin::launcher {
namespace {

// How long a failing rank waits for the others to report theirs. Ranks that read the same bad
// file fail within milliseconds of each other; a rank whose failure is its own waits this long
// before it ends the job.
constexpr double kSecondsToCompareFailures = 5.0;

std::optional<std::string> held;  // the messages held since HoldFailures; none while printing

}  // namespace

void ReportFailure(const std::string& text) {
  if (held.has_value()) {
    *held += text;
  } else {
    std::fputs(text.c_str(), stderr);
  }
}

void HoldFailures() { held.emplace(); }

std::string TakeHeldFailures() {
  std::string messages = held.value_or("");
  held.reset();
  return messages;
}

FailureAgreement CompareFailures(MPI_Comm group, const std::string& message, int exit_code,
                                 double wait_seconds) {
  // 62 bits of the failure's hash and their negation: one MIN reduction gives the least and the
  // greatest over the ranks (equal when every rank's is the same).
  const auto hash =
      static_cast<int64_t>(std::hash<std::string>{}(absl::StrCat(exit_code, ":", message)) >> 2);
  int64_t mine[2] = {hash, -hash};
  int64_t least[2] = {0, 0};
  MPI_Request request = MPI_REQUEST_NULL;
  MPI_Iallreduce(mine, least, 2, MPI_INT64_T, MPI_MIN, group, &request);
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::duration<double>(wait_seconds);
  for (int done = 0;;) {
    MPI_Test(&request, &done, MPI_STATUS_IGNORE);
    if (done != 0) break;
    if (std::chrono::steady_clock::now() >= deadline) return FailureAgreement::kNotEveryRank;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return least[0] == -least[1] ? FailureAgreement::kEveryRankAlike
                               : FailureAgreement::kEveryRankDifferently;
}

int SettleFailures(MPI_Comm group, int world_rank, int exit_code) {
  const std::string messages = TakeHeldFailures();
  if (exit_code == 0) {  // whatever it printed on the way (a failure it recovered from)
    std::fputs(messages.c_str(), stderr);
    return 0;
  }
  switch (CompareFailures(group, messages, exit_code, kSecondsToCompareFailures)) {
    case FailureAgreement::kEveryRankAlike:
      if (world_rank == 0) std::fputs(messages.c_str(), stderr);
      break;
    case FailureAgreement::kEveryRankDifferently:
      for (const absl::string_view line : absl::StrSplit(messages, '\n', absl::SkipEmpty())) {
        std::fprintf(stderr, "rank %d: %.*s\n", world_rank, static_cast<int>(line.size()),
                     line.data());
      }
      break;
    case FailureAgreement::kNotEveryRank:
      std::fputs(messages.c_str(), stderr);
      std::fflush(stderr);
      MPI_Abort(MPI_COMM_WORLD, exit_code);
      break;
  }
  return exit_code;
}

}  // namespace kelvin::launcher
