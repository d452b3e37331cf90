// Internal to core/io/safetensors*.cc: the dtypes a safetensors file may declare, and unaligned
// loads from the mapping.
#pragma once

#include <cstring>
#include <optional>
#include <string>
#include <string_view>

#include "absl/strings/str_cat.h"
#include "core/dtype.h"

namespace kelvin::io::internal {

enum class ValueKind { kFloat, kSigned, kUnsigned, kBool, kOther };

struct FileDType {
  std::string_view name;
  int bits;  // per element; sub-byte types only tile whole bytes
  ValueKind kind;
  std::optional<DType> kelvin;  // the Kelvin dtype with the same bytes, if any
};

const FileDType* FindFileDType(std::string_view name);  // nullptr: not a safetensors dtype
const FileDType& FileDTypeOf(DType dtype);              // a Kelvin dtype's (it must have one)
std::string KnownDTypeNames();                          // "BOOL, U8, ...", for messages

// Mapped bytes may be unaligned: loads go through memcpy.
template <typename T>
T LoadUnaligned(const char* p) {
  T value;
  std::memcpy(&value, p, sizeof(T));
  return value;
}

inline std::string Quoted(std::string_view text) {
  return absl::StrCat("\"", absl::string_view(text.data(), text.size()), "\"");
}

// What every format error adds: what the user can do.
inline constexpr absl::string_view kRedo =
    "; the file is damaged or was not written as safetensors: download or export it again";

}  // namespace kelvin::io::internal
