// Element conversion on read: F16, BF16, F32, F64 to f32, bf16, f64; BOOL and integers to i32,
// i64.
#include "core/io/safetensors_convert.h"

#include <bit>
#include <climits>
#include <cmath>
#include <cstring>
#include <limits>

#include "absl/strings/str_cat.h"
#include "core/bf16.h"
#include "core/check.h"
#include "core/status.h"

namespace kelvin::io::internal {
namespace {

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

}  // namespace

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

}  // namespace kelvin::io::internal
