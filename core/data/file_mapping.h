// A whole file mapped read-only into memory (private to core/data: the dataset readers map their
// .idx/.bin and flat token files through it). Move-only; unmapped when destroyed.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "core/status.h"

namespace kelvin::data {

class FileMapping {
 public:
  // `what` names the file's role in error messages, e.g. "Megatron index file".
  static absl::StatusOr<FileMapping> Open(const std::string& path, const std::string& what);

  FileMapping(FileMapping&& other) noexcept;
  FileMapping& operator=(FileMapping&& other) noexcept;
  FileMapping(const FileMapping&) = delete;
  FileMapping& operator=(const FileMapping&) = delete;
  ~FileMapping();

  const std::string& path() const { return path_; }
  const uint8_t* data() const { return data_; }  // nullptr for an empty file
  size_t size() const { return size_; }

 private:
  FileMapping(std::string path, const uint8_t* data, size_t size)
      : path_(std::move(path)), data_(data), size_(size) {}
  void Unmap();

  std::string path_;
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
};

}  // namespace kelvin::data
