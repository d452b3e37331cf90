// Durable files, with one policy for every file Kelvin keeps (checkpoint parts and indexes,
// exported weights, datasets, metrics, batch jobs): written to a temporary beside the target,
// fsynced, renamed over it, the directory fsynced. A crash, a kill or a full disk leaves the old
// file or the new one, never a torn one; failures and SIGINT/SIGTERM/SIGHUP remove the temporary.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace kelvin::io {

// A file being written; it appears under its name only on Commit. Destroyed uncommitted, it
// removes its temporary.
class AtomicFile {
 public:
  // Creates the temporary "<path>.tmp.<pid>.<n>" (the directory must exist).
  static absl::StatusOr<AtomicFile> Create(const std::string& path);

  AtomicFile(AtomicFile&& other) noexcept;
  AtomicFile& operator=(AtomicFile&& other) noexcept;
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;
  ~AtomicFile();

  // Buffered (1 MiB): many small writes cost few system calls.
  absl::Status Write(std::string_view bytes);
  // fsync and close the temporary; then Commit renames it (CommitTogether renames several).
  absl::Status Finish();
  // Finish (when not done yet), rename over the target, fsync the directory.
  absl::Status Commit();
  // Removes the temporary (nothing happens to the target).
  void Abandon();

  const std::string& path() const { return path_; }
  const std::string& temporary() const { return temporary_; }

 private:
  AtomicFile(std::string path, std::string temporary, int fd, int slot)
      : path_(std::move(path)), temporary_(std::move(temporary)), fd_(fd), slot_(slot) {}
  absl::Status Fail(std::string_view step, int error);
  absl::Status Flush();

  std::string path_, temporary_;
  std::string buffer_;  // written bytes not yet handed to the file
  int fd_ = -1;         // open while writing
  int slot_ = -1;       // in the signal handler's list of temporaries
  bool finished_ = false;
};

// Writes `parts`, one after another, as `path`, atomically and durably.
absl::Status WriteFileAtomically(const std::string& path,
                                 const std::vector<std::string_view>& parts);

// Commits files that belong together (a dataset's .bin and .idx, its loss mask's pair) all or
// none: the existing targets are first moved aside, and if any rename fails the new files are
// removed and the old ones put back. Every file is abandoned on failure.
absl::Status CommitTogether(const std::vector<AtomicFile*>& files);

// fsync of a directory, so that the renames and creations in it survive a crash. Best effort
// where the filesystem cannot (EINVAL); other errors are returned.
absl::Status SyncDirectory(const std::string& directory);
// rename(2) of a file or directory, then fsync of the target's directory.
absl::Status RenameDurably(const std::string& from, const std::string& to);

// An error for a failed file operation `step` on `path` with errno `error`: NotFound (create the
// directory), PermissionDenied, ResourceExhausted (a full disk or quota, or a file size limit),
// else Unavailable; the message names the path, the step and the reason.
absl::Status FileError(const std::string& path, std::string_view step, int error);

// SIGINT, SIGTERM and SIGHUP remove the temporaries of the AtomicFiles being written, then end
// the process as the signal would have; SIGXFSZ (a file size limit) is ignored so that writes
// fail with EFBIG and are reported. Called first thing by `kelvin` (a handler installed later for
// one of these signals, e.g. the trainer's preemption handlers, takes its place).
void InstallTemporaryFileCleanup();
// The same for `signal` too (a command that writes without a handler of its own for it, e.g.
// prepare-data and SLURM's SIGUSR1 warning; the trainer keeps SIGUSR1 for its preemption stop).
void RemoveTemporariesOn(int signal);

}  // namespace kelvin::io
