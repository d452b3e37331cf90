// Opening regular files without blocking on anything else (see regular_file.h).
#include "core/io/regular_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace kelvin::io {
namespace {

std::string Named(absl::string_view description, const std::string& path) {
  return description.empty() ? path : absl::StrCat(description, " ", path);
}

absl::Status OpenError(const std::string& name, int error) {
  const std::string reason = std::strerror(error);
  switch (error) {
    case ENOENT:
    case ENOTDIR:
      return absl::NotFoundError(absl::StrCat(name, ": no such file (", reason,
                                              "); check the path, or download the file first"));
    case EACCES:
    case EPERM:
      return absl::PermissionDeniedError(
          absl::StrCat(name, ": cannot open (", reason, "); check the file's permissions"));
    case EISDIR:
      return absl::InvalidArgumentError(
          absl::StrCat(name, ": is a directory; pass the path of a file"));
    default:
      return absl::UnavailableError(absl::StrCat(name, ": cannot open (", reason, ")"));
  }
}

const char* KindOf(mode_t mode) {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a FIFO (named pipe)";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISSOCK(mode)) return "a socket";
  return "not a regular file";
}

}  // namespace

FileDescriptor& FileDescriptor::operator=(FileDescriptor&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = other.release();
  }
  return *this;
}

FileDescriptor::~FileDescriptor() {
  if (fd_ >= 0) ::close(fd_);
}

int FileDescriptor::release() {
  const int fd = fd_;
  fd_ = -1;
  return fd;
}

absl::StatusOr<RegularFile> OpenRegularFile(const std::string& path,
                                            absl::string_view description) {
  const std::string name = Named(description, path);
  // O_NONBLOCK: opening a FIFO for reading would otherwise wait for a writer. It is cleared below
  // once the file is known to be regular (where it changes nothing anyway).
  FileDescriptor fd(::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC));
  if (fd.get() < 0) return OpenError(name, errno);
  struct stat info;
  if (::fstat(fd.get(), &info) != 0) {
    return absl::UnavailableError(
        absl::StrCat(name, ": fstat failed (", std::strerror(errno), ")"));
  }
  if (!S_ISREG(info.st_mode)) {
    return absl::InvalidArgumentError(
        absl::StrCat(name, ": is ", KindOf(info.st_mode), ", not a regular file; pass the path of ",
                     description.empty() ? "a file" : absl::StrCat("the ", description)));
  }
  const int flags = ::fcntl(fd.get(), F_GETFL);
  if (flags < 0 || ::fcntl(fd.get(), F_SETFL, flags & ~O_NONBLOCK) != 0) {
    return absl::UnavailableError(
        absl::StrCat(name, ": fcntl failed (", std::strerror(errno), ")"));
  }
  return RegularFile{std::move(fd), static_cast<uint64_t>(info.st_size)};
}

absl::StatusOr<std::string> ReadRegularFile(const std::string& path, absl::string_view description,
                                            uint64_t max_bytes) {
  absl::StatusOr<RegularFile> file = OpenRegularFile(path, description);
  if (!file.ok()) return file.status();
  const std::string name = Named(description, path);
  if (file->size > max_bytes) {
    return absl::InvalidArgumentError(absl::StrCat(name, ": is ", file->size,
                                                   " bytes, more than the ", max_bytes,
                                                   " such a file can be: is it the right file?"));
  }
  std::string text(static_cast<size_t>(file->size), '\0');
  size_t read = 0;
  while (read < text.size()) {
    const ssize_t n = ::read(file->fd.get(), text.data() + read, text.size() - read);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      return absl::UnavailableError(
          absl::StrCat(name, ": read failed (", std::strerror(errno), ")"));
    }
    if (n == 0) break;  // shrank while read
    read += static_cast<size_t>(n);
  }
  text.resize(read);
  return text;
}

}  // namespace kelvin::io
