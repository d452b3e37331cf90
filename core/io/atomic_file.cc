// Atomic, durable file writes and the signal-time removal of their temporaries (see
// atomic_file.h).
#include "core/io/atomic_file.h"

#include <fcntl.h>
#include <limits.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstring>
#include <filesystem>
#include <mutex>

#include "absl/strings/str_cat.h"

namespace kelvin::io {
namespace {

namespace fs = std::filesystem;

// The temporaries being written, for the signal handler: fixed storage (a handler may not
// allocate), a slot in use while its flag is set.
struct TemporarySlot {
  std::atomic<bool> used{false};
  char path[PATH_MAX];
};
std::array<TemporarySlot, 64> temporaries;
std::mutex temporaries_mutex;  // between registering threads; the handler only reads

int RegisterTemporary(const std::string& path) {
  if (path.size() >= PATH_MAX) return -1;
  const std::lock_guard<std::mutex> lock(temporaries_mutex);
  for (size_t i = 0; i < temporaries.size(); ++i) {
    if (temporaries[i].used.load()) continue;
    std::memcpy(temporaries[i].path, path.c_str(), path.size() + 1);
    temporaries[i].used.store(true);
    return static_cast<int>(i);
  }
  return -1;  // more than 64 at once: this one is not removed on a signal
}

void UnregisterTemporary(int slot) {
  if (slot >= 0) temporaries[static_cast<size_t>(slot)].used.store(false);
}

extern "C" void RemoveTemporariesAndDie(int signal) {
  for (TemporarySlot& slot : temporaries) {
    if (slot.used.load()) ::unlink(slot.path);
  }
  std::signal(signal, SIG_DFL);
  std::raise(signal);
}

std::string ParentOf(const std::string& path) {
  const fs::path parent = fs::path(path).parent_path();
  return parent.empty() ? "." : parent.string();
}

// The file that stands where `path` needs a directory (what ENOTDIR means), or "a part of its
// path".
std::string FileInThePath(const std::string& path) {
  std::error_code error;
  for (fs::path p = fs::path(path).parent_path(); !p.empty(); p = p.parent_path()) {
    const fs::file_status status = fs::status(p, error);
    if (!error && fs::exists(status) && !fs::is_directory(status)) return p.string();
    if (p == p.parent_path()) break;
  }
  return "a part of its path";
}

}  // namespace

absl::Status FileError(const std::string& path, std::string_view step, int error) {
  const std::string message = absl::StrCat("cannot write ", path, ": ", std::string(step),
                                           " failed (", std::strerror(error), ")");
  switch (error) {
    case ENOENT:
      return absl::NotFoundError(absl::StrCat(message, "; create its directory first"));
    case ENOTDIR:
      return absl::NotFoundError(absl::StrCat(message, "; ", FileInThePath(path),
                                              " is a file, not a directory: choose another path"));
    case EACCES:
    case EPERM:
    case EROFS:
      return absl::PermissionDeniedError(
          absl::StrCat(message, "; choose a directory you can write to"));
    case ENOSPC:
    case EDQUOT:
      return absl::ResourceExhaustedError(absl::StrCat(message, "; free some disk space"));
    case EFBIG:
      return absl::ResourceExhaustedError(
          absl::StrCat(message, "; the file size limit (ulimit -f) or the filesystem's is hit"));
    default:
      return absl::UnavailableError(message);
  }
}

absl::StatusOr<AtomicFile> AtomicFile::Create(const std::string& path) {
  static std::atomic<uint64_t> counter{0};
  std::string temporary = absl::StrCat(path, ".tmp.", ::getpid(), ".", counter++);
  const int slot = RegisterTemporary(temporary);
  const int fd = ::open(temporary.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
  if (fd < 0) {
    const int error = errno;
    UnregisterTemporary(slot);
    return FileError(path, absl::StrCat("creating ", temporary), error);
  }
  return AtomicFile(path, std::move(temporary), fd, slot);
}

AtomicFile::AtomicFile(AtomicFile&& other) noexcept
    : path_(std::move(other.path_)),
      temporary_(std::move(other.temporary_)),
      buffer_(std::move(other.buffer_)),
      fd_(std::exchange(other.fd_, -1)),
      slot_(std::exchange(other.slot_, -1)),
      finished_(other.finished_) {}

AtomicFile& AtomicFile::operator=(AtomicFile&& other) noexcept {
  if (this != &other) {
    Abandon();
    path_ = std::move(other.path_);
    temporary_ = std::move(other.temporary_);
    buffer_ = std::move(other.buffer_);
    fd_ = std::exchange(other.fd_, -1);
    slot_ = std::exchange(other.slot_, -1);
    finished_ = other.finished_;
  }
  return *this;
}

AtomicFile::~AtomicFile() { Abandon(); }

void AtomicFile::Abandon() {
  buffer_.clear();
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
  if (slot_ >= 0 || !temporary_.empty()) {
    if (!temporary_.empty()) ::unlink(temporary_.c_str());
    UnregisterTemporary(slot_);
  }
  slot_ = -1;
  temporary_.clear();
}

absl::Status AtomicFile::Fail(std::string_view step, int error) {
  Abandon();
  return FileError(path_, step, error);
}

constexpr size_t kWriteBufferBytes = size_t{1} << 20;

absl::Status AtomicFile::Write(std::string_view bytes) {
  if (fd_ < 0) return absl::FailedPreconditionError(absl::StrCat(path_, ": written after Finish"));
  if (buffer_.size() + bytes.size() > kWriteBufferBytes) {
    if (absl::Status flushed = Flush(); !flushed.ok()) return flushed;
  }
  if (bytes.size() >= kWriteBufferBytes) {  // large: straight to the file
    buffer_.assign(bytes.data(), bytes.size());
    return Flush();
  }
  buffer_.append(bytes.data(), bytes.size());
  return absl::OkStatus();
}

absl::Status AtomicFile::Flush() {
  std::string_view pending = buffer_;
  while (!pending.empty()) {
    const ssize_t written = ::write(fd_, pending.data(), pending.size());
    if (written < 0 && errno == EINTR) continue;
    if (written < 0) return Fail(absl::StrCat("writing ", temporary_), errno);
    if (written == 0) return Fail(absl::StrCat("writing ", temporary_), ENOSPC);
    pending.remove_prefix(static_cast<size_t>(written));
  }
  buffer_.clear();
  return absl::OkStatus();
}

absl::Status AtomicFile::Finish() {
  if (finished_) return absl::OkStatus();
  if (fd_ < 0) return absl::FailedPreconditionError(absl::StrCat(path_, ": already abandoned"));
  if (absl::Status flushed = Flush(); !flushed.ok()) return flushed;
  if (::fsync(fd_) != 0) return Fail(absl::StrCat("fsync of ", temporary_), errno);
  const int fd = std::exchange(fd_, -1);
  if (::close(fd) != 0) return Fail(absl::StrCat("closing ", temporary_), errno);
  finished_ = true;
  return absl::OkStatus();
}

absl::Status AtomicFile::Commit() {
  if (absl::Status finished = Finish(); !finished.ok()) return finished;
  if (::rename(temporary_.c_str(), path_.c_str()) != 0) {
    return Fail(absl::StrCat("renaming ", temporary_), errno);
  }
  UnregisterTemporary(std::exchange(slot_, -1));
  temporary_.clear();
  return SyncDirectory(ParentOf(path_));
}

absl::Status WriteFileAtomically(const std::string& path,
                                 const std::vector<std::string_view>& parts) {
  absl::StatusOr<AtomicFile> file = AtomicFile::Create(path);
  if (!file.ok()) return file.status();
  for (std::string_view part : parts) {
    if (absl::Status written = file->Write(part); !written.ok()) return written;
  }
  return file->Commit();
}

absl::Status CommitTogether(const std::vector<AtomicFile*>& files) {
  const auto abandon_all = [&files] {
    for (AtomicFile* file : files) file->Abandon();
  };
  for (AtomicFile* file : files) {
    if (absl::Status finished = file->Finish(); !finished.ok()) {
      abandon_all();
      return finished;
    }
  }
  // Move the old targets aside, rename the new files in; undo everything on the first failure.
  std::vector<std::pair<std::string, std::string>> moved_aside;  // (target, aside)
  std::vector<std::string> renamed;                              // new targets in place
  const auto undo = [&](const absl::Status& failure) {
    for (const std::string& target : renamed) ::unlink(target.c_str());
    for (const auto& [target, aside] : moved_aside) ::rename(aside.c_str(), target.c_str());
    abandon_all();
    return failure;
  };
  for (AtomicFile* file : files) {
    std::error_code error;
    if (std::filesystem::is_directory(file->path(), error)) {
      abandon_all();
      return absl::FailedPreconditionError(
          absl::StrCat("cannot write ", file->path(),
                       ": a directory is in its place; remove it or write the "
                       "files elsewhere"));
    }
  }
  for (AtomicFile* file : files) {
    const std::string aside = file->temporary() + ".old";
    if (::rename(file->path().c_str(), aside.c_str()) == 0) {
      moved_aside.emplace_back(file->path(), aside);
    } else if (errno != ENOENT) {
      return undo(FileError(file->path(), "moving the old file aside", errno));
    }
  }
  for (AtomicFile* file : files) {
    if (::rename(file->temporary().c_str(), file->path().c_str()) != 0) {
      return undo(FileError(file->path(), absl::StrCat("renaming ", file->temporary()), errno));
    }
    renamed.push_back(file->path());
  }
  for (const auto& [target, aside] : moved_aside) ::unlink(aside.c_str());
  for (AtomicFile* file : files) {
    const std::string directory = ParentOf(file->path());
    file->Abandon();  // the temporary is the target now: nothing to remove
    if (absl::Status synced = SyncDirectory(directory); !synced.ok()) return synced;
  }
  return absl::OkStatus();
}

absl::Status SyncDirectory(const std::string& directory) {
  const int fd = ::open(directory.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return FileError(directory, "opening the directory to fsync it", errno);
  const int synced = ::fsync(fd);
  const int error = errno;
  ::close(fd);
  if (synced != 0 && error != EINVAL) return FileError(directory, "fsync of the directory", error);
  return absl::OkStatus();
}

absl::Status RenameDurably(const std::string& from, const std::string& to) {
  if (::rename(from.c_str(), to.c_str()) != 0) {
    return FileError(to, absl::StrCat("renaming ", from), errno);
  }
  return SyncDirectory(ParentOf(to));
}

void RemoveTemporariesOn(int signal) {
  struct sigaction action = {};
  action.sa_handler = RemoveTemporariesAndDie;
  sigemptyset(&action.sa_mask);
  sigaction(signal, &action, nullptr);
}

void InstallTemporaryFileCleanup() {
  for (const int signal : {SIGINT, SIGTERM, SIGHUP}) RemoveTemporariesOn(signal);
  std::signal(SIGXFSZ, SIG_IGN);
}

}  // namespace kelvin::io
