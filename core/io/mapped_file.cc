// MappedFile: a regular file opened (core/io/regular_file.h) and mapped, one clear error per
// failure; munmap on destruction.
#include "core/io/mapped_file.h"

#include <sys/mman.h>

#include <cerrno>
#include <cstring>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "core/io/regular_file.h"

namespace kelvin::io {

absl::StatusOr<MappedFile> MappedFile::Open(const std::string& path,
                                            absl::string_view description) {
  absl::StatusOr<RegularFile> file = OpenRegularFile(path, description);
  if (!file.ok()) return file.status();
  const size_t size = static_cast<size_t>(file->size);
  if (size == 0) return MappedFile(path, nullptr, 0);
  // The mapping keeps its own reference to the file; the descriptor closes on return.
  void* data = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, file->fd.get(), 0);
  if (data == MAP_FAILED) {
    return absl::ResourceExhaustedError(
        absl::StrCat(description.empty() ? path : absl::StrCat(description, " ", path),
                     ": mmap of ", size, " bytes failed (", std::strerror(errno), ")"));
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
