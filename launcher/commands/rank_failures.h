// A command's failure on several ranks, reported once: while the ranks run, Fail's messages are
// held; a failure every rank meets alike (a bad job file, a missing data file: each rank reads the
// same) is then printed by rank 0 alone and every process exits without MPI_Abort; ranks that
// failed differently print theirs, each named; a failure the other ranks do not share within a few
// seconds (they are still running, or waiting in a collective) is printed and ends the job with
// MPI_Abort, as one rank's failure must.
#pragma once

#include <mpi.h>

#include <string>

namespace kelvin::launcher {

// Prints `text` (a message of Fail, with its newline) on stderr, or keeps it while held.
void ReportFailure(const std::string& text);
// From now on ReportFailure keeps its messages until TakeHeldFailures.
void HoldFailures();
// The messages kept since HoldFailures, in order; ReportFailure prints at once again.
std::string TakeHeldFailures();

// How the ranks' failures compare.
enum class FailureAgreement {
  kEveryRankAlike,        // every rank failed with the same message and exit code
  kEveryRankDifferently,  // every rank failed, not all alike
  kNotEveryRank,          // some rank did not report a failure within the wait
};

// Compares this rank's failure (`message`, `exit_code`) with every other rank's over `group` (a
// communicator no other call uses: a rank that never compares leaves a request pending there, which
// only MPI_Abort may follow), waiting at most `wait_seconds` for all of them.
FailureAgreement CompareFailures(MPI_Comm group, const std::string& message, int exit_code,
                                 double wait_seconds);

// The end of a command run by every rank of `group`'s world: prints what this rank held (the
// whole of a failure shared by every rank from `world_rank` 0 only, each rank's own with its rank
// when they differ), and aborts the job when the failure is not every rank's. Returns `exit_code`.
int SettleFailures(MPI_Comm group, int world_rank, int exit_code);

}  // namespace kelvin::launcher
