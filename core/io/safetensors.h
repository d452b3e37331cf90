// Safetensors checkpoint files (https://github.com/huggingface/safetensors): a memory-mapped reader
// that validates the whole header before anything is read and converts dtypes on read, and an
// atomic writer. Every error names the file path, the tensor and the offending value.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/dtype.h"
#include "core/io/mapped_file.h"
#include "core/tensor.h"

namespace kelvin::io {

struct SafetensorsEntry {
  std::string name;
  std::string dtype_name;     // as in the file: "F32", "BF16", "F16", "F64", "I32", "I64", ...
  Shape shape;                // [] for a scalar
  size_t begin = 0, end = 0;  // byte range in the data section (the bytes after the header)
};

class SafetensorsFile {  // movable, not copyable; keeps the mapping alive
 public:
  // Maps the file and validates the header against the safetensors format: JSON well-formed with
  // unique keys, every entry's dtype/shape/data_offsets well-typed and consistent, the byte ranges
  // exactly tiling the data section (no overlap, no gap), metadata values strings.
  static absl::StatusOr<SafetensorsFile> Open(const std::string& path);

  const std::string& path() const { return file_.path(); }
  const std::vector<SafetensorsEntry>& entries() const { return entries_; }  // sorted by name
  const std::map<std::string, std::string>& metadata() const { return metadata_; }  // __metadata__
  const SafetensorsEntry* Find(std::string_view name) const;  // nullptr if absent
  // The stored bytes of `entry` (one of entries()), as mapped.
  std::string_view Bytes(const SafetensorsEntry& entry) const;

  // A new host tensor with the values of `name`, converted to `as` when given: floats (F16, BF16,
  // F32, F64) to f32/bf16/f64 rounding to nearest-even, integers (BOOL, I8..I64, U8..U64) to
  // i32/i64 with a range check. Without `as`, the file's dtype, which must be one Kelvin has.
  absl::StatusOr<Tensor> Read(std::string_view name, std::optional<DType> as = std::nullopt) const;
  // Only rows [begin, end) along `axis` (negative counts from the end): what one tensor-parallel
  // rank loads of a sharded weight.
  absl::StatusOr<Tensor> ReadSlice(std::string_view name, int axis, int64_t begin, int64_t end,
                                   std::optional<DType> as = std::nullopt) const;

 private:
  SafetensorsFile(MappedFile file, size_t data_offset, std::vector<SafetensorsEntry> entries,
                  std::map<std::string, std::string> metadata)
      : file_(std::move(file)),
        data_offset_(data_offset),
        entries_(std::move(entries)),
        metadata_(std::move(metadata)) {}

  MappedFile file_;
  size_t data_offset_;  // 8 + header length
  std::vector<SafetensorsEntry> entries_;
  std::map<std::string, std::string> metadata_;
};

// Writes `tensors` (host tensors, unique non-empty names) in this order, atomically: a temporary
// file in the same directory, fsync, rename. The header is padded with spaces so that the data
// section starts 8-byte aligned, as the format allows.
absl::Status WriteSafetensors(const std::string& path,
                              const std::vector<std::pair<std::string, Tensor>>& tensors,
                              const std::map<std::string, std::string>& metadata = {});

namespace internal {  // shared with hf_checkpoint.cc

// NotFound: `where` has no tensor `name`; lists the (up to 5) closest of `known` names.
absl::Status TensorNotFound(std::string_view where, std::string_view name,
                            const std::vector<std::string>& known);

}  // namespace internal
}  // namespace kelvin::io
