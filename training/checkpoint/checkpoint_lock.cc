// The checkpoint directory's lock: flock on kelvin.lock, the holder written into it.
#include "training/checkpoint/checkpoint_lock.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <string>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "core/logging.h"

namespace kelvin::training {
namespace {

constexpr char kLockFile[] = "kelvin.lock";

// "pid 123 on host node01 since 2026-12-02T01:02:03Z".
std::string ThisHolder() {
  char host[256] = {};
  if (::gethostname(host, sizeof(host) - 1) != 0) std::strcpy(host, "?");
  char since[32] = {};
  const std::time_t now = std::time(nullptr);
  std::tm utc = {};
  gmtime_r(&now, &utc);
  std::strftime(since, sizeof(since), "%Y-%m-%dT%H:%M:%SZ", &utc);
  return absl::StrCat("pid ", ::getpid(), " on host ", host, " since ", since);
}

std::string HolderRecordedIn(int fd) {
  char text[512] = {};
  const ssize_t n = ::pread(fd, text, sizeof(text) - 1, 0);
  if (n <= 0) return "a process that has not written its name yet";
  return std::string(absl::StripTrailingAsciiWhitespace(absl::string_view(text, n)));
}

}  // namespace

absl::StatusOr<CheckpointDirectoryLock> CheckpointDirectoryLock::Acquire(const std::string& dir) {
  namespace fs = std::filesystem;
  std::error_code error;
  fs::create_directories(dir, error);
  if (error) {
    std::error_code ignored;
    const bool dangling =
        fs::is_symlink(fs::symlink_status(dir, ignored)) && !fs::exists(dir, ignored);
    return absl::PermissionDeniedError(absl::StrCat(
        "checkpoint.dir=\"", dir, "\": cannot create it (", error.message(), ")",
        dangling
            ? absl::StrCat(": it is a symbolic link to ", fs::read_symlink(dir, ignored).string(),
                           ", which does not exist; create that directory or point the link "
                           "elsewhere")
            : std::string("; give a directory this run can create and write")));
  }
  const std::string path = (std::filesystem::path(dir) / kLockFile).string();
  // The holder removes the file as it lets go; a file locked after its removal is not the lock:
  // then again with the new one.
  for (;;) {
    const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0644);
    if (fd < 0) {
      return absl::PermissionDeniedError(absl::StrCat("checkpoint.dir=\"", dir, "\": cannot open ",
                                                      path, ": ", std::strerror(errno)));
    }
    if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
      const int failure = errno;
      if (failure == EWOULDBLOCK) {
        const std::string holder = HolderRecordedIn(fd);
        ::close(fd);
        return absl::FailedPreconditionError(absl::StrCat(
            "checkpoint.dir=\"", dir, "\" is in use by another training (", holder, "; ", path,
            "): wait for it to end or stop it, or give this run its own checkpoint.dir"));
      }
      ::close(fd);
      KLOG(WARNING) << "checkpoint.dir=\"" << dir
                    << "\": its filesystem has no file locks (flock: " << std::strerror(failure)
                    << "): nothing stops a second training into it at the same time";
      return CheckpointDirectoryLock(-1, "");
    }
    struct stat locked = {}, named = {};
    if (::fstat(fd, &locked) != 0 || ::stat(path.c_str(), &named) != 0 ||
        locked.st_dev != named.st_dev || locked.st_ino != named.st_ino) {
      ::close(fd);
      continue;
    }
    const std::string holder = ThisHolder() + "\n";
    if (::ftruncate(fd, 0) != 0 ||
        ::pwrite(fd, holder.data(), holder.size(), 0) != static_cast<ssize_t>(holder.size())) {
      KLOG(WARNING) << path << ": cannot record this run as the holder: " << std::strerror(errno);
    }
    return CheckpointDirectoryLock(fd, path);
  }
}

void CheckpointDirectoryLock::Release() {
  if (fd_ < 0) return;
  ::unlink(path_.c_str());  // while still locked: nobody holds the next file yet
  ::close(fd_);             // closing the last descriptor releases the flock
  fd_ = -1;
}

CheckpointDirectoryLock::CheckpointDirectoryLock(CheckpointDirectoryLock&& other) noexcept
    : fd_(other.fd_), path_(std::move(other.path_)) {
  other.fd_ = -1;
}

CheckpointDirectoryLock& CheckpointDirectoryLock::operator=(
    CheckpointDirectoryLock&& other) noexcept {
  if (this != &other) {
    Release();
    fd_ = other.fd_;
    path_ = std::move(other.path_);
    other.fd_ = -1;
  }
  return *this;
}

CheckpointDirectoryLock::~CheckpointDirectoryLock() { Release(); }

}  // namespace kelvin::training
