// Opening input files: only regular files are opened (a FIFO, device or socket in place of a
// model, dataset, checkpoint or config would block the open or the read for ever), and every
// failure is one error naming the file and what to do.
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace kelvin::io {

// An open file descriptor, closed when destroyed (move-only).
class FileDescriptor {
 public:
  explicit FileDescriptor(int fd = -1) : fd_(fd) {}
  FileDescriptor(FileDescriptor&& other) noexcept : fd_(other.release()) {}
  FileDescriptor& operator=(FileDescriptor&& other) noexcept;
  FileDescriptor(const FileDescriptor&) = delete;
  FileDescriptor& operator=(const FileDescriptor&) = delete;
  ~FileDescriptor();

  int get() const { return fd_; }
  int release();

 private:
  int fd_;
};

struct RegularFile {
  FileDescriptor fd;  // open for reading, blocking
  uint64_t size = 0;  // bytes
};

// Opens `path` for reading after checking, without blocking, that it is a regular file.
// NotFound for a missing file, PermissionDenied when unreadable, InvalidArgument for a directory,
// FIFO, device or socket. `description` names the file's role at the front of errors ("job file"
// gives "job file /a/b.textproto: is a FIFO (named pipe) ..."); empty names just the path.
absl::StatusOr<RegularFile> OpenRegularFile(const std::string& path,
                                            absl::string_view description = "");

// The whole of the regular file `path`. A file larger than `max_bytes` is an error (it is not the
// kind of file expected: a dataset where a config belongs).
absl::StatusOr<std::string> ReadRegularFile(const std::string& path, absl::string_view description,
                                            uint64_t max_bytes);

}  // namespace kelvin::io
