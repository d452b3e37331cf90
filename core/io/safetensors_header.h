// Internal to core/io/safetensors*.cc: a safetensors header validated whole against the format
// before any tensor is read.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "core/io/mapped_file.h"
#include "core/io/safetensors.h"

namespace kelvin::io::internal {

struct SafetensorsHeader {
  size_t data_offset = 0;                 // 8 + header length
  std::vector<SafetensorsEntry> entries;  // sorted by name
  std::map<std::string, std::string> metadata;
};

// The header of the mapped `file`: its length in range, JSON well-formed with unique keys, every
// entry's dtype, shape and data_offsets well-typed and consistent, the byte ranges exactly tiling
// the data section, metadata values strings. Errors name the path, the tensor and the value.
absl::StatusOr<SafetensorsHeader> ParseSafetensorsHeader(const MappedFile& file);

}  // namespace kelvin::io::internal
