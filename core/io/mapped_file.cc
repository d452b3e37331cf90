// MappedFile: open, fstat and mmap with one clear error per failure; munmap on destruction.
#include "core/io/mapped_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace kelvin::io {
namespace {

// How errors name the file: "<description> <path>", or the bare path without a description.
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
    default:
      return absl::UnavailableError(absl::StrCat(name, ": cannot open (", reason, ")"));
  }
}

}  // namespace

absl::StatusOr<MappedFile> MappedFile::Open(const std::string& path,
                                            absl::string_view description) {
  const std::string name = Named(description, path);
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return OpenError(name, errno);
  struct stat info;
  if (::fstat(fd, &info) != 0) {
    const int error = errno;
    ::close(fd);
    return absl::UnavailableError(
        absl::StrCat(name, ": fstat failed (", std::strerror(error), ")"));
  }
  if (!S_ISREG(info.st_mode)) {
    ::close(fd);
    return absl::InvalidArgumentError(
        absl::StrCat(name, S_ISDIR(info.st_mode) ? ": is a directory" : ": is not a regular file",
                     "; pass the path of a file"));
  }
  const size_t size = static_cast<size_t>(info.st_size);
  if (size == 0) {
    ::close(fd);
    return MappedFile(path, nullptr, 0);
  }
  void* data = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
  const int error = errno;
  ::close(fd);  // the mapping keeps its own reference to the file
  if (data == MAP_FAILED) {
    return absl::ResourceExhaustedError(
        absl::StrCat(name, ": mmap of ", size, " bytes failed (", std::strerror(error), ")"));
  }
  return MappedFile(path, static_cast<const char*>(data), size);
}

MappedFile::MappedFile(MappedFile&& other) noexcept
    : path_(std::move(other.path_)),
      data_(std::exchange(other.data_, nullptr)),
      size_(std::exchange(other.size_, 0)) {}

MappedFile& MappedFile::operator=(MappedFile&& other) noexcept {
  if (this != &other) {
    Unmap();
    path_ = std::move(other.path_);
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
  }
  return *this;
}

MappedFile::~MappedFile() { Unmap(); }

void MappedFile::Unmap() {
  if (data_ != nullptr) ::munmap(const_cast<char*>(data_), size_);
  data_ = nullptr;
  size_ = 0;
}

}  // namespace kelvin::io
