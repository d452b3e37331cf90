// Safetensors: header validation, dtype conversion on read, the writer, and the "no such tensor"
// error shared with hf_checkpoint.cc.
// File layout: u64 little-endian N | N bytes of JSON header | data section (byte ranges of
// tensors).
#include "core/io/safetensors.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/bf16.h"
#include "core/io/atomic_file.h"
#include "core/io/strict_json.h"
#include "core/status.h"
#include "core/strings/did_you_mean.h"

namespace kelvin::io {

static_assert(std::endian::native == std::endian::little,
              "safetensors data is little-endian; Kelvin reads it in place");

namespace {

using Json = nlohmann::json;

constexpr uint64_t kMaxHeaderBytes = 100'000'000;  // the limit of the reference implementation
constexpr absl::string_view kRedo =
    "; the file is damaged or was not written as safetensors: download or export it again";

// ---------------------------------------------------------------------------------------------
// The dtypes a safetensors file may declare.

enum class ValueKind { kFloat, kSigned, kUnsigned, kBool, kOther };

struct FileDType {
  std::string_view name;
  int bits;  // per element; sub-byte types only tile whole bytes
  ValueKind kind;
  std::optional<DType> kelvin;  // the Kelvin dtype with the same bytes, if any
};

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

// ---------------------------------------------------------------------------------------------
// Header validation.

// `value` as compact JSON, cut to 80 characters, for messages.
std::string Excerpt(const Json& value) {
  std::string text = value.dump(-1, ' ', false, Json::error_handler_t::replace);
  if (text.size() > 80) text = text.substr(0, 77) + "...";
  return text;
}

class HeaderValidator {
 public:
  HeaderValidator(const std::string& path, size_t data_size) : path_(path), data_size_(data_size) {}

  absl::Status Corrupt(absl::StatusCode code, absl::string_view detail) const {
    return absl::Status(code, absl::StrCat(path_, ": ", detail, kRedo));
  }
  absl::Status Invalid(absl::string_view detail) const {
    return Corrupt(absl::StatusCode::kInvalidArgument, detail);
  }
  absl::Status InvalidEntry(absl::string_view name, absl::string_view detail) const {
    return Invalid(absl::StrCat("tensor \"", name, "\": ", detail));
  }

  absl::Status Metadata(const Json& value, std::map<std::string, std::string>* metadata) const {
    if (value.is_null()) return absl::OkStatus();
    if (!value.is_object()) {
      return Invalid(
          absl::StrCat("\"__metadata__\" must be an object of strings, found ", Excerpt(value)));
    }
    for (const auto& [key, text] : value.items()) {
      if (!text.is_string()) {
        return Invalid(absl::StrCat("\"__metadata__\" value of \"", key,
                                    "\" must be a string, found ", Excerpt(text)));
      }
      (*metadata)[key] = text.get<std::string>();
    }
    return absl::OkStatus();
  }

  absl::StatusOr<SafetensorsEntry> Entry(const std::string& name, const Json& value) const {
    if (!value.is_object()) {
      return InvalidEntry(name, absl::StrCat("entry must be an object with \"dtype\", \"shape\" "
                                             "and \"data_offsets\", found ",
                                             Excerpt(value)));
    }
    SafetensorsEntry entry;
    entry.name = name;
    KELVIN_ASSIGN_OR_RETURN(const Json* dtype, Field(name, value, "dtype"));
    if (!dtype->is_string()) {
      return InvalidEntry(name,
                          absl::StrCat("\"dtype\" must be a string, found ", Excerpt(*dtype)));
    }
    entry.dtype_name = dtype->get<std::string>();
    const FileDType* type = FindFileDType(entry.dtype_name);
    if (type == nullptr) {
      return InvalidEntry(name, absl::StrCat("unknown dtype \"", entry.dtype_name,
                                             "\" (safetensors dtypes: ", KnownDTypeNames(), ")"));
    }

    KELVIN_ASSIGN_OR_RETURN(const Json* shape, Field(name, value, "shape"));
    if (!shape->is_array()) {
      return InvalidEntry(name, absl::StrCat("\"shape\" must be an array of non-negative integers, "
                                             "found ",
                                             Excerpt(*shape)));
    }
    int64_t nonzero_product = 1;  // bounds every sub-product of the dims (sizes of slices)
    bool has_zero = false;
    for (const Json& dim : *shape) {
      if (!dim.is_number_integer()) {
        return InvalidEntry(name, absl::StrCat("shape ", Excerpt(*shape), " has dimension ",
                                               Excerpt(dim), ", which is not an integer"));
      }
      if (!dim.is_number_unsigned()) {
        return InvalidEntry(name, absl::StrCat("shape ", Excerpt(*shape),
                                               " has negative dimension ", Excerpt(dim)));
      }
      const uint64_t size = dim.get<uint64_t>();
      if (size > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) ||
          (size > 0 &&
           __builtin_mul_overflow(nonzero_product, static_cast<int64_t>(size), &nonzero_product))) {
        return InvalidEntry(name, absl::StrCat("shape ", Excerpt(*shape), " is too large"));
      }
      has_zero = has_zero || size == 0;
      entry.shape.push_back(static_cast<int64_t>(size));
    }
    const uint64_t numel = has_zero ? 0 : static_cast<uint64_t>(nonzero_product);

    KELVIN_ASSIGN_OR_RETURN(const Json* offsets, Field(name, value, "data_offsets"));
    if (!offsets->is_array() || offsets->size() != 2 || !(*offsets)[0].is_number_unsigned() ||
        !(*offsets)[1].is_number_unsigned()) {
      return InvalidEntry(name, absl::StrCat("\"data_offsets\" must be two non-negative integers "
                                             "[begin, end], found ",
                                             Excerpt(*offsets)));
    }
    const uint64_t begin = (*offsets)[0].get<uint64_t>();
    const uint64_t end = (*offsets)[1].get<uint64_t>();
    if (begin > end) {
      return InvalidEntry(name,
                          absl::StrCat("data_offsets [", begin, ", ", end, "] begin after end"));
    }
    if (end > data_size_) {
      return Corrupt(absl::StatusCode::kDataLoss,
                     absl::StrCat("tensor \"", name, "\": data_offsets [", begin, ", ", end,
                                  "] end past the data section (", data_size_,
                                  " bytes); the file may be truncated"));
    }
    uint64_t bits = 0;
    if (__builtin_mul_overflow(numel, static_cast<uint64_t>(type->bits), &bits) || bits % 8 != 0 ||
        bits / 8 != end - begin) {
      return InvalidEntry(
          name, absl::StrCat("data_offsets [", begin, ", ", end, "] hold ", end - begin,
                             " bytes, but ", entry.dtype_name, " ", ShapeToString(entry.shape),
                             " needs ", numel, " x ", type->bits, " bits"));
    }
    entry.begin = static_cast<size_t>(begin);
    entry.end = static_cast<size_t>(end);
    return entry;
  }

  // The byte ranges must tile the data section exactly, in order of offsets (as the reference
  // implementation requires): no overlap, no gap, nothing after the last tensor.
  absl::Status Tiling(const std::vector<SafetensorsEntry>& entries) const {
    std::vector<const SafetensorsEntry*> by_offset;
    for (const SafetensorsEntry& entry : entries) by_offset.push_back(&entry);
    std::sort(by_offset.begin(), by_offset.end(), [](const auto* a, const auto* b) {
      return std::tie(a->begin, a->end, a->name) < std::tie(b->begin, b->end, b->name);
    });
    size_t covered = 0;  // bytes [0, covered) belong to tensors seen so far
    const SafetensorsEntry* previous = nullptr;
    for (const SafetensorsEntry* entry : by_offset) {
      if (entry->begin > covered) {
        return Invalid(
            absl::StrCat("bytes [", covered, ", ", entry->begin,
                         ") of the data section belong to no tensor (a gap ",
                         previous ? absl::StrCat("after \"", previous->name, "\" and ") : "",
                         "before \"", entry->name, "\")"));
      }
      if (entry->begin < covered) {
        return Invalid(absl::StrCat("tensor \"", entry->name, "\": data_offsets [", entry->begin,
                                    ", ", entry->end, "] overlap \"", previous->name, "\" [",
                                    previous->begin, ", ", previous->end, "]"));
      }
      covered = entry->end;
      previous = entry;
    }
    if (covered != data_size_) {
      return Invalid(absl::StrCat("bytes [", covered, ", ", data_size_,
                                  ") at the end of the data section belong to no tensor"));
    }
    return absl::OkStatus();
  }

 private:
  absl::StatusOr<const Json*> Field(const std::string& name, const Json& entry,
                                    const char* key) const {
    const auto it = entry.find(key);
    if (it == entry.end()) {
      return InvalidEntry(name, absl::StrCat("missing \"", key, "\" in ", Excerpt(entry)));
    }
    return &*it;
  }

  const std::string& path_;
  size_t data_size_;
};

// ---------------------------------------------------------------------------------------------
// Element conversion. Source bytes come from the mapping and may be unaligned: loads use memcpy.

template <typename T>
T LoadUnaligned(const char* p) {
  T value;
  std::memcpy(&value, p, sizeof(T));
  return value;
}

// IEEE half -> float, exact (subnormals, infinities, NaN payloads included).
float HalfToFloat(uint16_t half) {
  const uint32_t sign = static_cast<uint32_t>(half & 0x8000u) << 16;
  const uint32_t exponent = (half >> 10) & 0x1fu;
  const uint32_t mantissa = half & 0x3ffu;
  if (exponent == 0) {  // zero or subnormal: mantissa * 2^-24
    const float magnitude = static_cast<float>(mantissa) * 0x1p-24f;
    return sign ? -magnitude : magnitude;
  }
  const uint32_t bits = exponent == 0x1f ? sign | 0x7f800000u | (mantissa << 13)
                                         : sign | ((exponent + 112) << 23) | (mantissa << 13);
  return std::bit_cast<float>(bits);
}

// double -> bf16 with a single rounding to nearest-even: first to f32 with round-to-odd (inexact
// results keep a sticky last bit), which f32's 16 extra mantissa bits make exact for the second
// rounding. (double -> float -> bf16 by nearest twice would round some ties wrongly.)
uint16_t DoubleToBf16Bits(double value) {
  float nearest = static_cast<float>(value);
  if (std::isfinite(value) && static_cast<double>(nearest) != value) {
    float truncated = std::fabs(static_cast<double>(nearest)) > std::fabs(value)
                          ? std::nextafter(nearest, 0.0f)
                          : nearest;
    nearest = std::bit_cast<float>(std::bit_cast<uint32_t>(truncated) | 1u);
  }
  return bf16::FromFloatBits(nearest);
}

inline void Store(float value, float* out) { *out = value; }
inline void Store(float value, bf16* out) { out->bits = bf16::FromFloatBits(value); }
inline void Store(float value, double* out) { *out = value; }
inline void Store(double value, float* out) { *out = static_cast<float>(value); }
inline void Store(double value, bf16* out) { out->bits = DoubleToBf16Bits(value); }
inline void Store(double value, double* out) { *out = value; }

template <typename Out, typename Load>
void ConvertFloats(const char* src, size_t stride, size_t count, Out* out, Load load) {
  for (size_t i = 0; i < count; ++i) Store(load(src + i * stride), out + i);
}

template <typename Load>
void ConvertFloats(const char* src, size_t stride, size_t count, DType to, void* out, Load load) {
  switch (to) {
    case DType::kF32:
      return ConvertFloats(src, stride, count, static_cast<float*>(out), load);
    case DType::kBF16:
      return ConvertFloats(src, stride, count, static_cast<bf16*>(out), load);
    case DType::kF64:
      return ConvertFloats(src, stride, count, static_cast<double*>(out), load);
    default:
      KELVIN_FATAL() << "float conversion to " << DTypeName(to);
  }
}

void ConvertFloats(const char* src, const FileDType& from, size_t count, DType to, void* out) {
  const size_t stride = static_cast<size_t>(from.bits / 8);
  if (from.name == "F16") {
    ConvertFloats(src, stride, count, to, out,
                  [](const char* p) { return HalfToFloat(LoadUnaligned<uint16_t>(p)); });
  } else if (from.name == "BF16") {
    ConvertFloats(src, stride, count, to, out,
                  [](const char* p) { return bf16::ToFloat(LoadUnaligned<uint16_t>(p)); });
  } else if (from.name == "F32") {
    ConvertFloats(src, stride, count, to, out, LoadUnaligned<float>);
  } else {
    KELVIN_CHECK(from.name == "F64") << from.name;
    ConvertFloats(src, stride, count, to, out, LoadUnaligned<double>);
  }
}

// The integer at `p`, or nullopt for a U64 beyond int64's range.
std::optional<int64_t> LoadInteger(const char* p, const FileDType& from) {
  const bool is_signed = from.kind == ValueKind::kSigned;
  switch (from.bits) {
    case 8:
      return is_signed ? LoadUnaligned<int8_t>(p) : LoadUnaligned<uint8_t>(p);
    case 16:
      return is_signed ? LoadUnaligned<int16_t>(p) : LoadUnaligned<uint16_t>(p);
    case 32:
      return is_signed ? int64_t{LoadUnaligned<int32_t>(p)} : int64_t{LoadUnaligned<uint32_t>(p)};
    default: {
      if (is_signed) return LoadUnaligned<int64_t>(p);
      const uint64_t value = LoadUnaligned<uint64_t>(p);
      if (value > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) return std::nullopt;
      return static_cast<int64_t>(value);
    }
  }
}

// Integers (BOOL, I*, U*) -> i32 / i64; a value out of the target's range is an error.
absl::Status ConvertIntegers(const std::string& path, const SafetensorsEntry& entry,
                             const char* src, const FileDType& from, size_t count, DType to,
                             void* out) {
  const size_t stride = static_cast<size_t>(from.bits / 8);
  for (size_t i = 0; i < count; ++i) {
    const std::optional<int64_t> value = LoadInteger(src + i * stride, from);
    const bool fits =
        value.has_value() && (to == DType::kI64 || (*value >= INT32_MIN && *value <= INT32_MAX));
    if (!fits) {
      return absl::InvalidArgumentError(absl::StrCat(
          path, ": tensor \"", entry.name, "\" (", entry.dtype_name, ") holds ",
          value ? absl::StrCat(*value) : absl::StrCat(LoadUnaligned<uint64_t>(src + i * stride)),
          ", which does not fit in ", std::string(DTypeName(to)), "; read it as i64"));
    }
    if (to == DType::kI64) {
      static_cast<int64_t*>(out)[i] = *value;
    } else {
      static_cast<int32_t*>(out)[i] = static_cast<int32_t>(*value);
    }
  }
  return absl::OkStatus();
}

// The dtype a read of `entry` produces, given the caller's `as`.
absl::StatusOr<DType> TargetDType(const std::string& path, const SafetensorsEntry& entry,
                                  const FileDType& from, std::optional<DType> as) {
  const std::string prefix =
      absl::StrCat(path, ": tensor \"", entry.name, "\" has dtype ", entry.dtype_name, ", which ");
  constexpr absl::string_view kConversions =
      "floats F16, BF16, F32, F64 convert to f32, bf16, f64; integers and BOOL to i32, i64";
  if (from.kind == ValueKind::kOther) {
    return absl::InvalidArgumentError(
        absl::StrCat(prefix, "Kelvin cannot read (", kConversions, ")"));
  }
  if (!as.has_value()) {
    if (from.kelvin.has_value()) return *from.kelvin;
    return absl::InvalidArgumentError(absl::StrCat(
        prefix, "Kelvin has no tensor type for; pass `as` to convert it on read (",
        from.kind == ValueKind::kFloat ? "e.g. DType::kF32" : "DType::kI32 or DType::kI64", ")"));
  }
  if ((from.kind == ValueKind::kFloat) == IsFloating(*as)) return *as;
  return absl::InvalidArgumentError(absl::StrCat(
      prefix, "Kelvin cannot convert to ", std::string(DTypeName(*as)), " (", kConversions, ")"));
}

// Rows [begin, end) of `entry` seen as [outer, rows, inner] (the data at `data`), converted to
// `to`, as a new host tensor of `out_shape`.
absl::StatusOr<Tensor> ReadRows(const std::string& path, const char* data,
                                const SafetensorsEntry& entry, const FileDType& from, DType to,
                                int64_t outer, int64_t rows, int64_t inner, int64_t begin,
                                int64_t end, const Shape& out_shape) {
  Tensor out = Tensor::Empty(out_shape, to);
  const size_t from_bytes = static_cast<size_t>(from.bits / 8);
  const size_t block = static_cast<size_t>((end - begin) * inner);  // elements per outer index
  char* out_bytes = static_cast<char*>(out.raw_data());
  for (int64_t o = 0; o < outer && block > 0; ++o) {
    const char* src = data + static_cast<size_t>((o * rows + begin) * inner) * from_bytes;
    void* dst = out_bytes + static_cast<size_t>(o) * block * DTypeSize(to);
    if (from.kelvin == to) {
      std::memcpy(dst, src, block * from_bytes);
    } else if (from.kind == ValueKind::kFloat) {
      ConvertFloats(src, from, block, to, dst);
    } else {
      KELVIN_RETURN_IF_ERROR(ConvertIntegers(path, entry, src, from, block, to, dst));
    }
  }
  return out;
}

int64_t Product(const Shape& shape, size_t first, size_t last) {
  int64_t product = 1;
  for (size_t i = first; i < last; ++i) product *= shape[i];
  return product;
}

std::string Quoted(std::string_view text) {
  return absl::StrCat("\"", absl::string_view(text.data(), text.size()), "\"");
}

}  // namespace

// -----------------------------------------------------------------------------------------------

absl::StatusOr<SafetensorsFile> SafetensorsFile::Open(const std::string& path) {
  KELVIN_ASSIGN_OR_RETURN(MappedFile file, MappedFile::Open(path));
  if (file.size() < 8) {
    return absl::DataLossError(absl::StrCat(path, ": file is ", file.size(),
                                            " bytes, shorter than the 8-byte header length that "
                                            "starts a safetensors file",
                                            kRedo));
  }
  const uint64_t header_bytes = LoadUnaligned<uint64_t>(file.data());
  if (header_bytes > kMaxHeaderBytes) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": header length ", header_bytes,
                                                   " bytes is absurd (the limit is ",
                                                   kMaxHeaderBytes, ")", kRedo));
  }
  if (header_bytes > file.size() - 8) {
    return absl::DataLossError(absl::StrCat(path, ": header length ", header_bytes,
                                            " bytes runs past the end of the file (", file.size(),
                                            " bytes); the file is truncated", kRedo));
  }
  const size_t data_offset = 8 + static_cast<size_t>(header_bytes);
  const std::string_view header_text(file.data() + 8, static_cast<size_t>(header_bytes));
  absl::StatusOr<Json> header = ParseStrictJson(header_text, path, "tensor name");
  if (!header.ok()) {
    return absl::Status(header.status().code(), absl::StrCat(header.status().message(), kRedo));
  }
  HeaderValidator validator(path, file.size() - data_offset);
  if (!header->is_object()) {
    return validator.Invalid(
        absl::StrCat("the JSON header must be an object {\"tensor name\": "
                     "{\"dtype\", \"shape\", \"data_offsets\"}}, found ",
                     header->type_name()));
  }
  std::vector<SafetensorsEntry> entries;  // in key order, i.e. sorted by name (std::map)
  std::map<std::string, std::string> metadata;
  for (const auto& [name, value] : header->items()) {
    if (name == "__metadata__") {
      KELVIN_RETURN_IF_ERROR(validator.Metadata(value, &metadata));
      continue;
    }
    KELVIN_ASSIGN_OR_RETURN(SafetensorsEntry entry, validator.Entry(name, value));
    entries.push_back(std::move(entry));
  }
  KELVIN_RETURN_IF_ERROR(validator.Tiling(entries));
  return SafetensorsFile(std::move(file), data_offset, std::move(entries), std::move(metadata));
}

const SafetensorsEntry* SafetensorsFile::Find(std::string_view name) const {
  const auto it = std::lower_bound(
      entries_.begin(), entries_.end(), name,
      [](const SafetensorsEntry& entry, std::string_view key) { return entry.name < key; });
  return it != entries_.end() && it->name == name ? &*it : nullptr;
}

absl::StatusOr<Tensor> SafetensorsFile::Read(std::string_view name, std::optional<DType> as) const {
  const SafetensorsEntry* entry = Find(name);
  if (entry == nullptr) {
    std::vector<std::string> known;
    for (const SafetensorsEntry& e : entries_) known.push_back(e.name);
    return internal::TensorNotFound(path(), name, known);
  }
  const FileDType& from = *FindFileDType(entry->dtype_name);
  KELVIN_ASSIGN_OR_RETURN(const DType to, TargetDType(path(), *entry, from, as));
  return ReadRows(path(), file_.data() + data_offset_ + entry->begin, *entry, from, to,
                  /*outer=*/1, /*rows=*/1, /*inner=*/NumElements(entry->shape), /*begin=*/0,
                  /*end=*/1, entry->shape);
}

std::string_view SafetensorsFile::Bytes(const SafetensorsEntry& entry) const {
  return {file_.data() + data_offset_ + entry.begin, entry.end - entry.begin};
}

absl::StatusOr<Tensor> SafetensorsFile::ReadSlice(std::string_view name, int axis, int64_t begin,
                                                  int64_t end, std::optional<DType> as) const {
  const SafetensorsEntry* entry = Find(name);
  if (entry == nullptr) return Read(name, as);  // the NotFound error
  const Shape& shape = entry->shape;
  const int ndim = static_cast<int>(shape.size());
  const int resolved_axis = axis < 0 ? axis + ndim : axis;
  if (resolved_axis < 0 || resolved_axis >= ndim) {
    return absl::InvalidArgumentError(absl::StrCat(path(), ": axis ", axis,
                                                   " is out of range for tensor ", Quoted(name),
                                                   " of shape ", ShapeToString(shape)));
  }
  const size_t axis_index = static_cast<size_t>(resolved_axis);
  const int64_t rows = shape[axis_index];
  if (begin < 0 || begin > end || end > rows) {
    return absl::InvalidArgumentError(
        absl::StrCat(path(), ": rows [", begin, ", ", end, ") along axis ", axis,
                     " are out of range for tensor ", Quoted(name), " of shape ",
                     ShapeToString(shape), " (valid: 0 <= begin <= end <= ", rows, ")"));
  }
  const FileDType& from = *FindFileDType(entry->dtype_name);
  KELVIN_ASSIGN_OR_RETURN(const DType to, TargetDType(path(), *entry, from, as));
  Shape out_shape = shape;  // [..., end - begin, ...]
  out_shape[axis_index] = end - begin;
  return ReadRows(path(), file_.data() + data_offset_ + entry->begin, *entry, from, to,
                  Product(shape, 0, axis_index), rows, Product(shape, axis_index + 1, shape.size()),
                  begin, end, out_shape);
}

// -----------------------------------------------------------------------------------------------

absl::Status WriteSafetensors(const std::string& path,
                              const std::vector<std::pair<std::string, Tensor>>& tensors,
                              const std::map<std::string, std::string>& metadata) {
  const auto invalid = [&path](absl::string_view detail) {
    return absl::InvalidArgumentError(absl::StrCat("cannot write ", path, ": ", detail));
  };
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  std::set<std::string_view> names;
  std::vector<std::string_view> parts = {"", ""};  // the header length and the header, set below
  size_t offset = 0;
  for (const auto& [name, tensor] : tensors) {
    if (name.empty() || name == "__metadata__") {
      return invalid(absl::StrCat("tensor name ", Quoted(name), " is reserved or empty"));
    }
    if (!names.insert(name).second) {
      return invalid(absl::StrCat("tensor name ", Quoted(name), " appears twice"));
    }
    if (!tensor.defined()) return invalid(absl::StrCat("tensor ", Quoted(name), " is undefined"));
    if (!tensor.is_cpu()) {
      return invalid(absl::StrCat("tensor ", Quoted(name), " is ", tensor.ToString(),
                                  "; copy it to the host first"));
    }
    header[name] = {{"dtype", FileDTypeOf(tensor.dtype()).name},
                    {"shape", tensor.shape()},
                    {"data_offsets", {offset, offset + tensor.nbytes()}}};
    offset += tensor.nbytes();
    parts.emplace_back(static_cast<const char*>(tensor.raw_data()), tensor.nbytes());
  }
  std::string header_text;
  try {
    header_text = header.dump();
  } catch (const nlohmann::json::type_error& error) {
    return invalid(
        absl::StrCat("tensor names and metadata must be valid UTF-8 (", error.what(), ")"));
  }
  header_text.append((8 - header_text.size() % 8) % 8, ' ');  // data starts 8-byte aligned
  const uint64_t header_bytes = header_text.size();
  char length[8];
  std::memcpy(length, &header_bytes, sizeof(length));
  parts[0] = std::string_view(length, sizeof(length));
  parts[1] = header_text;
  return WriteFileAtomically(path, parts);
}

// -----------------------------------------------------------------------------------------------

namespace internal {

absl::Status TensorNotFound(std::string_view where, std::string_view name,
                            const std::vector<std::string>& known) {
  if (known.empty()) {
    return absl::NotFoundError(absl::StrCat(std::string(where), ": no tensor ", Quoted(name),
                                            "; it holds no tensors at all"));
  }
  std::vector<std::string> closest;
  for (const std::string& candidate : strings::NearestNames(name, known, 5)) {
    closest.push_back(Quoted(candidate));
  }
  return absl::NotFoundError(
      absl::StrCat(std::string(where), ": no tensor ", Quoted(name), " among its ", known.size(),
                   " tensors; the closest names are ", absl::StrJoin(closest, ", ")));
}

}  // namespace internal
}  // namespace kelvin::io
