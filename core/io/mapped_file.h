// MappedFile: a whole file mapped read-only into memory (RAII: unmapped when the last owner goes
// away), opened with errors that name the path and say what to do.
#pragma once

#include <cstddef>
#include <string>
#include <utility>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace kelvin::io {

class MappedFile {
 public:
  // NotFound for a missing file, PermissionDenied when unreadable, InvalidArgument for a directory
  // or another non-regular file; an empty file maps to data() == nullptr and size() == 0.
  // `description` names the file's role at the front of error messages, e.g. "Megatron index
  // file" gives "Megatron index file /data/c.idx: no such file (...)"; empty names just the path.
  static absl::StatusOr<MappedFile> Open(const std::string& path,
                                         absl::string_view description = "");

  MappedFile(MappedFile&& other) noexcept;
  MappedFile& operator=(MappedFile&& other) noexcept;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  ~MappedFile();

  const std::string& path() const { return path_; }
  const char* data() const { return data_; }
  size_t size() const { return size_; }

 private:
  MappedFile(std::string path, const char* data, size_t size)
      : path_(std::move(path)), data_(data), size_(size) {}
  void Unmap();

  std::string path_;
  const char* data_ = nullptr;
  size_t size_ = 0;
};

}  // namespace kelvin::io
