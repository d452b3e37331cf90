// The safetensors dtype table.
#include "core/io/safetensors_dtypes.h"

#include <vector>

#include "absl/strings/str_join.h"
#include "core/check.h"

namespace kelvin::io::internal {
namespace {

constexpr FileDType kFileDTypes[] = {
    {"BOOL", 8, ValueKind::kBool, std::nullopt},
    {"U8", 8, ValueKind::kUnsigned, std::nullopt},
    {"I8", 8, ValueKind::kSigned, std::nullopt},
    {"U16", 16, ValueKind::kUnsigned, std::nullopt},
    {"I16", 16, ValueKind::kSigned, std::nullopt},
    {"U32", 32, ValueKind::kUnsigned, std::nullopt},
    {"I32", 32, ValueKind::kSigned, DType::kI32},
    {"U64", 64, ValueKind::kUnsigned, std::nullopt},
    {"I64", 64, ValueKind::kSigned, DType::kI64},
    {"F16", 16, ValueKind::kFloat, std::nullopt},
    {"BF16", 16, ValueKind::kFloat, DType::kBF16},
    {"F32", 32, ValueKind::kFloat, DType::kF32},
    {"F64", 64, ValueKind::kFloat, DType::kF64},
    {"C64", 64, ValueKind::kOther, std::nullopt},
    {"F8_E4M3", 8, ValueKind::kOther, std::nullopt},
    {"F8_E5M2", 8, ValueKind::kOther, std::nullopt},
    {"F8_E4M3FNUZ", 8, ValueKind::kOther, std::nullopt},
    {"F8_E5M2FNUZ", 8, ValueKind::kOther, std::nullopt},
    {"F8_E8M0", 8, ValueKind::kOther, std::nullopt},
    {"F6_E2M3", 6, ValueKind::kOther, std::nullopt},
    {"F6_E3M2", 6, ValueKind::kOther, std::nullopt},
    {"F4", 4, ValueKind::kOther, std::nullopt},
};

}  // namespace

const FileDType* FindFileDType(std::string_view name) {
  for (const FileDType& type : kFileDTypes) {
    if (type.name == name) return &type;
  }
  return nullptr;
}

const FileDType& FileDTypeOf(DType dtype) {
  const FileDType* found = nullptr;
  for (const FileDType& type : kFileDTypes) {
    if (type.kelvin == dtype) found = &type;
  }
  KELVIN_CHECK(found != nullptr) << "no safetensors dtype for " << DTypeName(dtype);
  return *found;
}

std::string KnownDTypeNames() {
  std::vector<std::string> names;
  for (const FileDType& type : kFileDTypes) names.emplace_back(type.name);
  return absl::StrJoin(names, ", ");
}

}  // namespace kelvin::io::internal
