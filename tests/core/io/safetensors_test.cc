// Safetensors reader and writer on valid files: bit-exact round trips of every Kelvin dtype, dtype
// conversions on read (checked against independent formulas), slices, and the errors of reads and
// writes. Malformed headers are in safetensors_header_test.cc.
#include "core/io/safetensors.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <limits>
#include <string>
#include <vector>

#include "core/bf16.h"
#include "tests/core/io/test_files.h"
#include "tests/testing/tensors.h"

namespace kelvin::io {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

using NamedTensors = std::vector<std::pair<std::string, Tensor>>;

std::string Bytes(const Tensor& t) {
  return std::string(static_cast<const char*>(t.raw_data()), t.nbytes());
}

void ExpectBitIdentical(const Tensor& got, const Tensor& want) {
  EXPECT_EQ(got.dtype(), want.dtype()) << got.ToString() << " vs " << want.ToString();
  EXPECT_EQ(got.shape(), want.shape()) << got.ToString() << " vs " << want.ToString();
  EXPECT_TRUE(got.is_cpu());
  EXPECT_EQ(Bytes(got), Bytes(want)) << got.ToString();
}

template <typename T>
Tensor FromValues(const Shape& shape, const std::vector<T>& values) {
  Tensor t = Tensor::Empty(shape, DTypeOf<T>());
  EXPECT_EQ(static_cast<size_t>(t.numel()), values.size());
  std::memcpy(t.raw_data(), values.data(), t.nbytes());
  return t;
}

template <typename T>
std::vector<T> Values(const Tensor& t) {
  const T* data = t.data<T>();
  return std::vector<T>(data, data + t.numel());
}

uint32_t FloatBits(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof(bits));
  return bits;
}

SafetensorsFile OpenOrDie(const std::string& path) {
  absl::StatusOr<SafetensorsFile> file = SafetensorsFile::Open(path);
  EXPECT_TRUE(file.ok()) << file.status();
  return std::move(file).value();
}

// A tensor of every Kelvin dtype and of the edge shapes (scalar, empty, zero in the middle).
NamedTensors EveryDTypeAndShape() {
  return {
      {"f32", testing::Random({3, 5}, DType::kF32, 1)},
      {"bf16", testing::Random({4, 2, 3}, DType::kBF16, 2)},
      {"f64", testing::Random({7}, DType::kF64, 3)},
      {"i32", testing::RandomInts({2, 3}, DType::kI32, 4, -1000000, 1000000)},
      {"i64", testing::RandomInts({5}, DType::kI64, 5, -(int64_t{1} << 60), int64_t{1} << 60)},
      {"scalar_f32", testing::Random({}, DType::kF32, 6)},
      {"scalar_i64", testing::RandomInts({}, DType::kI64, 7, -5, 5)},
      {"empty_bf16", Tensor::Empty({0}, DType::kBF16)},
      {"empty_middle_f64", Tensor::Empty({3, 0, 2}, DType::kF64)},
      {"model.layers.0.self_attn.q_proj.weight", testing::Random({8, 4}, DType::kBF16, 8)},
  };
}

TEST(SafetensorsTest, RoundTripIsBitIdenticalForEveryDTypeAndShape) {
  testing::ScratchDir dir;
  const std::string path = dir.Path("model.safetensors");
  const NamedTensors tensors = EveryDTypeAndShape();
  const std::map<std::string, std::string> metadata = {{"format", "pt"}, {"step", "12"}};
  ASSERT_TRUE(WriteSafetensors(path, tensors, metadata).ok());

  const SafetensorsFile file = OpenOrDie(path);
  EXPECT_EQ(file.path(), path);
  EXPECT_EQ(file.metadata(), metadata);
  ASSERT_EQ(file.entries().size(), tensors.size());
  for (size_t i = 1; i < file.entries().size(); ++i) {
    EXPECT_LT(file.entries()[i - 1].name, file.entries()[i].name);  // sorted by name
  }
  for (const auto& [name, tensor] : tensors) {
    SCOPED_TRACE(name);
    const SafetensorsEntry* entry = file.Find(name);
    ASSERT_NE(entry, nullptr);
    EXPECT_EQ(entry->shape, tensor.shape());
    EXPECT_EQ(entry->end - entry->begin, tensor.nbytes());
    absl::StatusOr<Tensor> read = file.Read(name);
    ASSERT_TRUE(read.ok()) << read.status();
    ExpectBitIdentical(*read, tensor);
  }
  EXPECT_EQ(file.Find("f3"), nullptr);
  EXPECT_EQ(file.Find("f32")->dtype_name, "F32");
  EXPECT_EQ(file.Find("bf16")->dtype_name, "BF16");
  EXPECT_EQ(file.Find("f64")->dtype_name, "F64");
  EXPECT_EQ(file.Find("i32")->dtype_name, "I32");
  EXPECT_EQ(file.Find("i64")->dtype_name, "I64");
}

TEST(SafetensorsTest, WrittenFileFollowsTheLayoutInGivenOrder) {
  testing::ScratchDir dir;
  const std::string path = dir.Path("a.safetensors");
  const Tensor b = FromValues<float>({2}, {1.0f, 2.0f});
  const Tensor a = FromValues<int32_t>({1}, {7});
  ASSERT_TRUE(WriteSafetensors(path, {{"b", b}, {"a", a}}).ok());
  const std::string bytes = testing::ReadFile(path);
  uint64_t header_bytes = 0;
  std::memcpy(&header_bytes, bytes.data(), 8);
  EXPECT_EQ((8 + header_bytes) % 8, 0u) << "data section not 8-byte aligned";
  ASSERT_EQ(bytes.size(), 8 + header_bytes + 12);
  const std::string header = bytes.substr(8, header_bytes);
  EXPECT_EQ(header.substr(0, header.find_last_not_of(' ') + 1),
            R"({"b":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
            R"("a":{"dtype":"I32","shape":[1],"data_offsets":[8,12]}})");
  EXPECT_EQ(bytes.substr(8 + header_bytes), Bytes(b) + Bytes(a));
}

TEST(SafetensorsTest, NoTensorsAndNoMetadata) {
  testing::ScratchDir dir;
  const std::string path = dir.Path("empty.safetensors");
  ASSERT_TRUE(WriteSafetensors(path, {}).ok());
  const SafetensorsFile file = OpenOrDie(path);
  EXPECT_TRUE(file.entries().empty());
  EXPECT_TRUE(file.metadata().empty());
}

TEST(SafetensorsTest, MovedFileKeepsItsMapping) {
  testing::ScratchDir dir;
  const std::string path = dir.Path("a.safetensors");
  const Tensor t = testing::Random({16}, DType::kF32, 9);
  ASSERT_TRUE(WriteSafetensors(path, {{"t", t}}).ok());
  std::vector<SafetensorsFile> files;
  files.push_back(OpenOrDie(path));
  files.push_back(OpenOrDie(path));  // reallocates: moves the first
  absl::StatusOr<Tensor> read = files[0].Read("t");
  ASSERT_TRUE(read.ok()) << read.status();
  ExpectBitIdentical(*read, t);
}

// --- conversions ------------------------------------------------------------------------------

TEST(SafetensorsTest, Bf16ToF32AndF64IsExactForEveryBitPattern) {
  testing::ScratchDir dir;
  const std::string path = dir.Path("all_bf16.safetensors");
  Tensor all = Tensor::Empty({65536}, DType::kBF16);
  for (uint32_t bits = 0; bits < 65536; ++bits) {
    all.data<bf16>()[bits] = bf16::FromBits(static_cast<uint16_t>(bits));
  }
  ASSERT_TRUE(WriteSafetensors(path, {{"all", all}}).ok());
  const SafetensorsFile file = OpenOrDie(path);
  absl::StatusOr<Tensor> as_f32 = file.Read("all", DType::kF32);
  absl::StatusOr<Tensor> as_f64 = file.Read("all", DType::kF64);
  ASSERT_TRUE(as_f32.ok()) << as_f32.status();
  ASSERT_TRUE(as_f64.ok()) << as_f64.status();
  for (uint32_t bits = 0; bits < 65536; ++bits) {
    const float value = as_f32->data<float>()[bits];
    ASSERT_EQ(FloatBits(value), bits << 16) << "bf16 bits " << bits;  // bf16 is f32's top half
    const double wide = as_f64->data<double>()[bits];
    if (std::isnan(value)) {
      ASSERT_TRUE(std::isnan(wide));
    } else {
      ASSERT_EQ(wide, static_cast<double>(value));
    }
  }
}

TEST(SafetensorsTest, F16ToF32IsExactIncludingSubnormalsAndInfinities) {
  // Every half bit pattern, in a hand-made F16 file (Kelvin writes no F16).
  std::string data(2 * 65536, '\0');
  for (uint32_t bits = 0; bits < 65536; ++bits) {
    data[2 * bits] = static_cast<char>(bits & 0xff);
    data[2 * bits + 1] = static_cast<char>(bits >> 8);
  }
  testing::ScratchDir dir;
  const std::string path = dir.Path("all_f16.safetensors");
  testing::WriteFile(
      path, testing::SafetensorsBytes(
                R"({"h":{"dtype":"F16","shape":[65536],"data_offsets":[0,131072]}})", data));
  const SafetensorsFile file = OpenOrDie(path);
  absl::StatusOr<Tensor> read = file.Read("h", DType::kF32);
  ASSERT_TRUE(read.ok()) << read.status();
  for (uint32_t bits = 0; bits < 65536; ++bits) {
    const int exponent = static_cast<int>((bits >> 10) & 0x1f);
    const int mantissa = static_cast<int>(bits & 0x3ff);
    const double sign = (bits & 0x8000) ? -1.0 : 1.0;
    const float value = read->data<float>()[bits];
    if (exponent == 31 && mantissa != 0) {
      ASSERT_TRUE(std::isnan(value)) << "half bits " << bits;
      continue;
    }
    const double expected = exponent == 31  ? sign * std::numeric_limits<double>::infinity()
                            : exponent == 0 ? sign * std::ldexp(mantissa, -24)
                                            : sign * std::ldexp(1024 + mantissa, exponent - 25);
    ASSERT_EQ(static_cast<double>(value), expected) << "half bits " << bits;
    ASSERT_EQ(std::signbit(value), (bits & 0x8000) != 0) << "half bits " << bits;
  }
  EXPECT_EQ(read->data<float>()[0x0001], std::ldexp(1.0f, -24));  // smallest subnormal
  EXPECT_EQ(read->data<float>()[0x7c00], std::numeric_limits<float>::infinity());
  EXPECT_EQ(read->data<float>()[0x7bff], 65504.0f);

  absl::StatusOr<Tensor> as_bf16 = file.ReadSlice("h", 0, 0x3c00, 0x3c02, DType::kBF16);
  ASSERT_TRUE(as_bf16.ok()) << as_bf16.status();
  EXPECT_EQ(static_cast<float>(as_bf16->data<bf16>()[0]), 1.0f);
  EXPECT_EQ(static_cast<float>(as_bf16->data<bf16>()[1]), 1.0f);  // 1 + 2^-10 rounds to 1 in bf16
}

TEST(SafetensorsTest, F32ToBf16RoundsToNearestEven) {
  testing::ScratchDir dir;
  const std::string path = dir.Path("f32.safetensors");
  const float one = 1.0f;
  const std::vector<float> values = {
      one + std::ldexp(1.0f, -8),                          // tie -> even: 1
      one + 3 * std::ldexp(1.0f, -8),                      // tie -> even: 1 + 2^-6
      one + std::ldexp(1.0f, -8) + std::ldexp(1.0f, -20),  // above the tie: 1 + 2^-7
      -(one + std::ldexp(1.0f, -8)),                       // -1
      std::numeric_limits<float>::max(),                   // overflows to inf
      std::numeric_limits<float>::infinity(),
      -0.0f,
  };
  ASSERT_TRUE(WriteSafetensors(path, {{"x", FromValues<float>({7}, values)}}).ok());
  absl::StatusOr<Tensor> read = OpenOrDie(path).Read("x", DType::kBF16);
  ASSERT_TRUE(read.ok()) << read.status();
  std::vector<uint16_t> bits;
  for (const bf16 value : Values<bf16>(*read)) bits.push_back(value.bits);
  EXPECT_THAT(bits, ElementsAre(0x3f80, 0x3f82, 0x3f81, 0xbf80, 0x7f80, 0x7f80, 0x8000));
}

TEST(SafetensorsTest, F64ToBf16AndF32RoundOnce) {
  testing::ScratchDir dir;
  const std::string path = dir.Path("f64.safetensors");
  // 1 + 2^-8 + 2^-40 lies above the bf16 tie 1 + 2^-8: the nearest bf16 is 1 + 2^-7. Rounding to
  // f32 first would lose the 2^-40 and round the tie to even (1).
  const std::vector<double> values = {1.0 + std::ldexp(1.0, -8) + std::ldexp(1.0, -40),
                                      1.0 + std::ldexp(1.0, -24) + std::ldexp(1.0, -40), 1e300,
                                      1e-300, -2.5};
  ASSERT_TRUE(WriteSafetensors(path, {{"x", FromValues<double>({5}, values)}}).ok());
  const SafetensorsFile file = OpenOrDie(path);
  absl::StatusOr<Tensor> as_bf16 = file.Read("x", DType::kBF16);
  ASSERT_TRUE(as_bf16.ok()) << as_bf16.status();
  std::vector<uint16_t> bits;
  for (const bf16 value : Values<bf16>(*as_bf16)) bits.push_back(value.bits);
  EXPECT_THAT(bits, ElementsAre(0x3f81, 0x3f80, 0x7f80, 0x0000, 0xc020));
  absl::StatusOr<Tensor> as_f32 = file.Read("x", DType::kF32);
  ASSERT_TRUE(as_f32.ok()) << as_f32.status();
  EXPECT_THAT(Values<float>(*as_f32),
              ElementsAre(1.0f + std::ldexp(1.0f, -8), 1.0f + std::ldexp(1.0f, -23),
                          std::numeric_limits<float>::infinity(), 0.0f, -2.5f));
}

TEST(SafetensorsTest, IntegersConvertWithARangeCheck) {
  testing::ScratchDir dir;
  const std::string path = dir.Path("ints.safetensors");
  const Tensor small = FromValues<int32_t>({3}, {-7, 0, 2147483647});
  const Tensor large = FromValues<int64_t>({2}, {5, int64_t{1} << 40});
  ASSERT_TRUE(WriteSafetensors(path, {{"small", small}, {"large", large}}).ok());
  const SafetensorsFile file = OpenOrDie(path);

  absl::StatusOr<Tensor> widened = file.Read("small", DType::kI64);
  ASSERT_TRUE(widened.ok()) << widened.status();
  EXPECT_THAT(Values<int64_t>(*widened), ElementsAre(-7, 0, 2147483647));
  absl::StatusOr<Tensor> fits = file.ReadSlice("large", 0, 0, 1, DType::kI32);
  ASSERT_TRUE(fits.ok()) << fits.status();
  EXPECT_THAT(Values<int32_t>(*fits), ElementsAre(5));

  const absl::StatusOr<Tensor> overflow = file.Read("large", DType::kI32);
  EXPECT_EQ(overflow.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(overflow.status().message()), HasSubstr(path));
  EXPECT_THAT(std::string(overflow.status().message()),
              HasSubstr("tensor \"large\" (I64) holds 1099511627776, which does not fit in i32"));
}

TEST(SafetensorsTest, SmallAndUnsignedIntegersAndBoolReadAsKelvinIntegers) {
  testing::ScratchDir dir;
  const std::string path = dir.Path("ints.safetensors");
  const std::string header = R"({"b":{"dtype":"BOOL","shape":[2],"data_offsets":[0,2]},)"
                             R"("u8":{"dtype":"U8","shape":[2],"data_offsets":[2,4]},)"
                             R"("i16":{"dtype":"I16","shape":[1],"data_offsets":[4,6]},)"
                             R"("u64":{"dtype":"U64","shape":[2],"data_offsets":[6,22]}})";
  std::string data = {1, 0, '\xff', 3, '\xfe', '\xff'};                   // true false | 255 3 | -2
  data += std::string("\x09\0\0\0\0\0\0\0", 8) + std::string(8, '\xff');  // 9 | 2^64 - 1
  testing::WriteFile(path, testing::SafetensorsBytes(header, data));
  const SafetensorsFile file = OpenOrDie(path);

  absl::StatusOr<Tensor> b = file.Read("b", DType::kI32);
  absl::StatusOr<Tensor> u8 = file.Read("u8", DType::kI64);
  absl::StatusOr<Tensor> i16 = file.Read("i16", DType::kI32);
  absl::StatusOr<Tensor> u64 = file.ReadSlice("u64", 0, 0, 1, DType::kI64);
  ASSERT_TRUE(b.ok() && u8.ok() && i16.ok() && u64.ok());
  EXPECT_THAT(Values<int32_t>(*b), ElementsAre(1, 0));
  EXPECT_THAT(Values<int64_t>(*u8), ElementsAre(255, 3));
  EXPECT_THAT(Values<int32_t>(*i16), ElementsAre(-2));
  EXPECT_THAT(Values<int64_t>(*u64), ElementsAre(9));

  const absl::StatusOr<Tensor> too_big = file.Read("u64", DType::kI64);
  EXPECT_THAT(std::string(too_big.status().message()),
              HasSubstr("tensor \"u64\" (U64) holds 18446744073709551615, which does not fit in "
                        "i64"));
  const absl::StatusOr<Tensor> no_as = file.Read("u8");
  EXPECT_THAT(std::string(no_as.status().message()),
              HasSubstr("tensor \"u8\" has dtype U8, which Kelvin has no tensor type for; pass "
                        "`as` to convert it on read (DType::kI32 or DType::kI64)"));
}

TEST(SafetensorsTest, UnsupportedConversionsNameTheTensorAndWhatWorks) {
  testing::ScratchDir dir;
  const std::string path = dir.Path("mixed.safetensors");
  const std::string header = R"({"h":{"dtype":"F16","shape":[1],"data_offsets":[0,2]},)"
                             R"("q":{"dtype":"F8_E4M3","shape":[2],"data_offsets":[2,4]},)"
                             R"("x":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})";
  testing::WriteFile(path, testing::SafetensorsBytes(header, std::string(8, '\0')));
  const SafetensorsFile file = OpenOrDie(path);

  const absl::StatusOr<Tensor> half = file.Read("h");
  EXPECT_EQ(half.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(half.status().message()),
              HasSubstr(path + ": tensor \"h\" has dtype F16, which Kelvin has no tensor type "
                               "for; pass `as` to convert it on read (e.g. DType::kF32)"));
  const absl::StatusOr<Tensor> fp8 = file.Read("q", DType::kF32);
  EXPECT_THAT(std::string(fp8.status().message()),
              HasSubstr("tensor \"q\" has dtype F8_E4M3, which Kelvin cannot read"));
  const absl::StatusOr<Tensor> to_int = file.Read("x", DType::kI32);
  EXPECT_THAT(std::string(to_int.status().message()),
              HasSubstr("tensor \"x\" has dtype F32, which Kelvin cannot convert to i32"));
  const absl::StatusOr<Tensor> slice_to_int = file.ReadSlice("x", 0, 0, 1, DType::kI64);
  EXPECT_THAT(std::string(slice_to_int.status().message()), HasSubstr("cannot convert to i64"));
}

// --- slices -----------------------------------------------------------------------------------

TEST(SafetensorsTest, ReadSliceAlongEachAxisMatchesTheFullTensor) {
  testing::ScratchDir dir;
  const std::string path = dir.Path("w.safetensors");
  const Tensor w = testing::Random({4, 6}, DType::kF32, 10);         // [rows 4, cols 6]
  const Tensor cube = testing::Random({3, 4, 5}, DType::kBF16, 11);  // [3, 4, 5]
  ASSERT_TRUE(WriteSafetensors(path, {{"w", w}, {"cube", cube}}).ok());
  const SafetensorsFile file = OpenOrDie(path);
  const float* full = w.data<float>();

  absl::StatusOr<Tensor> rows = file.ReadSlice("w", 0, 1, 3);
  ASSERT_TRUE(rows.ok()) << rows.status();
  EXPECT_EQ(rows->shape(), (Shape{2, 6}));
  EXPECT_EQ(Bytes(*rows), Bytes(w.Slice(1, 3)));

  absl::StatusOr<Tensor> cols = file.ReadSlice("w", 1, 2, 5);
  ASSERT_TRUE(cols.ok()) << cols.status();
  ASSERT_EQ(cols->shape(), (Shape{4, 3}));
  for (int r = 0; r < 4; ++r) {
    for (int c = 0; c < 3; ++c) EXPECT_EQ(cols->data<float>()[r * 3 + c], full[r * 6 + 2 + c]);
  }
  absl::StatusOr<Tensor> last_axis = file.ReadSlice("w", -1, 2, 5);
  ASSERT_TRUE(last_axis.ok()) << last_axis.status();
  EXPECT_EQ(Bytes(*last_axis), Bytes(*cols));

  // The middle axis of a 3-d tensor, converted on the way: [3, 4, 5] -> [3, 2, 5] as f32.
  absl::StatusOr<Tensor> middle = file.ReadSlice("cube", 1, 1, 3, DType::kF32);
  ASSERT_TRUE(middle.ok()) << middle.status();
  ASSERT_EQ(middle->shape(), (Shape{3, 2, 5}));
  for (int a = 0; a < 3; ++a) {
    for (int b = 0; b < 2; ++b) {
      for (int c = 0; c < 5; ++c) {
        EXPECT_EQ(middle->data<float>()[(a * 2 + b) * 5 + c],
                  static_cast<float>(cube.data<bf16>()[(a * 4 + 1 + b) * 5 + c]));
      }
    }
  }
  absl::StatusOr<Tensor> nothing = file.ReadSlice("w", 0, 2, 2);
  ASSERT_TRUE(nothing.ok()) << nothing.status();
  EXPECT_EQ(nothing->shape(), (Shape{0, 6}));
}

TEST(SafetensorsTest, ReadSliceOutOfRangeNamesTensorAxisAndRange) {
  testing::ScratchDir dir;
  const std::string path = dir.Path("w.safetensors");
  ASSERT_TRUE(WriteSafetensors(path, {{"w", testing::Random({4, 6}, DType::kF32, 12)},
                                      {"s", testing::Random({}, DType::kF32, 13)}})
                  .ok());
  const SafetensorsFile file = OpenOrDie(path);
  const auto message = [&](int axis, int64_t begin, int64_t end, const char* name = "w") {
    const absl::StatusOr<Tensor> read = file.ReadSlice(name, axis, begin, end);
    EXPECT_EQ(read.status().code(), absl::StatusCode::kInvalidArgument);
    return std::string(read.status().message());
  };
  EXPECT_THAT(message(0, 3, 5), HasSubstr(path + ": rows [3, 5) along axis 0 are out of range for "
                                                 "tensor \"w\" of shape [4, 6] (valid: 0 <= "
                                                 "begin <= end <= 4)"));
  EXPECT_THAT(message(1, 4, 2), HasSubstr("rows [4, 2) along axis 1 are out of range"));
  EXPECT_THAT(message(1, -1, 2), HasSubstr("rows [-1, 2) along axis 1"));
  EXPECT_THAT(message(2, 0, 1),
              HasSubstr("axis 2 is out of range for tensor \"w\" of shape [4, 6]"));
  EXPECT_THAT(message(-3, 0, 1), HasSubstr("axis -3 is out of range"));
  EXPECT_THAT(message(0, 0, 1, "s"), HasSubstr("axis 0 is out of range for tensor \"s\" of "
                                               "shape []"));
}

TEST(SafetensorsTest, MissingTensorListsTheClosestNames) {
  testing::ScratchDir dir;
  const std::string path = dir.Path("m.safetensors");
  NamedTensors tensors;
  for (int layer = 0; layer < 3; ++layer) {
    for (const char* part : {"q_proj", "k_proj", "v_proj", "o_proj"}) {
      tensors.emplace_back(
          "model.layers." + std::to_string(layer) + ".self_attn." + part + ".weight",
          Tensor::ZerosCpu({2}, DType::kF32));
    }
  }
  ASSERT_TRUE(WriteSafetensors(path, tensors).ok());
  const SafetensorsFile file = OpenOrDie(path);
  const absl::StatusOr<Tensor> read = file.Read("model.layers.1.self_attn.q_proj.weights");
  EXPECT_EQ(read.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(read.status().message()),
              HasSubstr(path + ": no tensor \"model.layers.1.self_attn.q_proj.weights\" among "
                               "its 12 tensors; the closest names are "
                               "\"model.layers.1.self_attn.q_proj.weight\""));
  const absl::StatusOr<Tensor> slice = file.ReadSlice("nope", 0, 0, 1);
  EXPECT_EQ(slice.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(slice.status().message()), HasSubstr("no tensor \"nope\""));
}

// --- writer -----------------------------------------------------------------------------------

TEST(SafetensorsTest, WriteRejectsBadNamesAndTensors) {
  testing::ScratchDir dir;
  const std::string path = dir.Path("bad.safetensors");
  const Tensor t = Tensor::ZerosCpu({2}, DType::kF32);
  const auto message = [&](const NamedTensors& tensors) {
    const absl::Status status = WriteSafetensors(path, tensors);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
    return std::string(status.message());
  };
  EXPECT_THAT(message({{"w", t}, {"v", t}, {"w", t}}),
              HasSubstr("cannot write " + path + ": tensor name \"w\" appears twice"));
  EXPECT_THAT(message({{"", t}}), HasSubstr("tensor name \"\" is reserved or empty"));
  EXPECT_THAT(message({{"__metadata__", t}}),
              HasSubstr("tensor name \"__metadata__\" is reserved or empty"));
  EXPECT_THAT(message({{"u", Tensor()}}), HasSubstr("tensor \"u\" is undefined"));
  EXPECT_THAT(message({{std::string("bad\xff", 4), t}}), HasSubstr("must be valid UTF-8"));
  EXPECT_FALSE(std::filesystem::exists(path));
}

TEST(SafetensorsTest, WriteIntoMissingDirectorySaysToCreateIt) {
  testing::ScratchDir dir;
  const std::string path = dir.Path("no/such/dir/a.safetensors");
  const absl::Status status = WriteSafetensors(path, {{"t", Tensor::ZerosCpu({1}, DType::kF32)}});
  EXPECT_EQ(status.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(status.message()), HasSubstr("cannot write " + path));
  EXPECT_THAT(std::string(status.message()), HasSubstr("create its directory first"));
}

TEST(SafetensorsTest, WriteReplacesAnExistingFileAndLeavesNoTemporaryFile) {
  testing::ScratchDir dir;
  const std::string path = dir.Path("a.safetensors");
  testing::WriteFile(path, "old contents");
  const Tensor t = testing::Random({3}, DType::kF64, 14);
  ASSERT_TRUE(WriteSafetensors(path, {{"t", t}}).ok());
  std::vector<std::string> names;
  for (const auto& entry : std::filesystem::directory_iterator(dir.path())) {
    names.push_back(entry.path().filename().string());
  }
  EXPECT_THAT(names, ElementsAre("a.safetensors"));
  absl::StatusOr<Tensor> read = OpenOrDie(path).Read("t");
  ASSERT_TRUE(read.ok()) << read.status();
  ExpectBitIdentical(*read, t);
}

TEST(SafetensorsTest, ViewsAreWrittenWithTheirOwnBytesOnly) {
  testing::ScratchDir dir;
  const std::string path = dir.Path("view.safetensors");
  const Tensor full = testing::Random({6, 2}, DType::kF32, 15);
  const Tensor rows = full.Slice(2, 5);  // [3, 2] at an offset into full's storage
  ASSERT_TRUE(WriteSafetensors(path, {{"rows", rows}}).ok());
  absl::StatusOr<Tensor> read = OpenOrDie(path).Read("rows");
  ASSERT_TRUE(read.ok()) << read.status();
  ExpectBitIdentical(*read, rows);
}

}  // namespace
}  // namespace kelvin::io
