// Malformed safetensors files, one case per rule of the format: each must fail to open with one
// message naming the file, the tensor and the offending value. The corrupt bytes are built here.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/io/safetensors.h"
#include "tests/core/io/test_files.h"

namespace kelvin::io {
namespace {

using ::testing::HasSubstr;

struct BadFile {
  std::string case_name;
  std::string bytes;  // the whole file
  absl::StatusCode code;
  std::vector<std::string> expected;  // substrings of the message (besides the path)
};

// A file with `header` and `data_bytes` zero bytes of data.
std::string File(const std::string& header, size_t data_bytes = 0) {
  return testing::SafetensorsBytes(header, std::string(data_bytes, '\0'));
}

// One F32 entry named `name` with the given JSON fields.
std::string Entry(const std::string& name, const std::string& fields) {
  return "\"" + name + "\":{" + fields + "}";
}

constexpr auto kInvalid = absl::StatusCode::kInvalidArgument;
constexpr auto kDataLoss = absl::StatusCode::kDataLoss;

std::vector<BadFile> BadFiles() {
  const std::string f32x2 = R"("dtype":"F32","shape":[2],)";
  return {
      {"ShorterThanEightBytes",
       std::string("\x10\0\0\0\0", 5),
       kDataLoss,
       {"file is 5 bytes, shorter than the 8-byte header length"}},
      {"HeaderLengthPastEndOfFile",
       std::string("\xe8\x03\0\0\0\0\0\0{}", 10),
       kDataLoss,
       {"header length 1000 bytes runs past the end of the file (10 bytes)"}},
      {"AbsurdHeaderLength",
       std::string("\0\0\0\0\0\x01\0\0{}", 10),
       kInvalid,
       {"header length 1099511627776 bytes is absurd (the limit is 100000000)"}},
      {"EmptyHeader", File(""), kInvalid, {"not well-formed JSON at line 1, column 1"}},
      {"TruncatedJson",
       File(R"({"w":{"dtype":"F32",)"),
       kInvalid,
       {"not well-formed JSON at line 1, column 21", "unexpected end of input"}},
      {"InvalidUtf8",
       File("{\"w\xff\":{}}"),
       kInvalid,
       {"not well-formed JSON at line 1, column", "ill-formed UTF-8"}},
      {"TopLevelArray",
       File("[1, 2]"),
       kInvalid,
       {"the JSON header must be an object", "found array"}},
      {"EntryNotAnObject",
       File(R"({"w":3})"),
       kInvalid,
       {"tensor \"w\": entry must be an object with \"dtype\", \"shape\" and \"data_offsets\", "
        "found 3"}},
      {"MissingDtype",
       File("{" + Entry("w", R"("shape":[2],"data_offsets":[0,8])") + "}", 8),
       kInvalid,
       {"tensor \"w\": missing \"dtype\""}},
      {"MissingShape",
       File("{" + Entry("w", R"("dtype":"F32","data_offsets":[0,8])") + "}", 8),
       kInvalid,
       {"tensor \"w\": missing \"shape\""}},
      {"MissingDataOffsets",
       File("{" + Entry("w", R"("dtype":"F32","shape":[2])") + "}", 8),
       kInvalid,
       {"tensor \"w\": missing \"data_offsets\""}},
      {"DtypeNotAString",
       File("{" + Entry("w", R"("dtype":4,"shape":[2],"data_offsets":[0,8])") + "}", 8),
       kInvalid,
       {"tensor \"w\": \"dtype\" must be a string, found 4"}},
      {"UnknownDtype",
       File("{" + Entry("w", R"("dtype":"F17","shape":[2],"data_offsets":[0,8])") + "}", 8),
       kInvalid,
       {"tensor \"w\": unknown dtype \"F17\" (safetensors dtypes: BOOL, U8"}},
      {"ShapeNotAnArray",
       File("{" + Entry("w", R"("dtype":"F32","shape":2,"data_offsets":[0,8])") + "}", 8),
       kInvalid,
       {"tensor \"w\": \"shape\" must be an array of non-negative integers, found 2"}},
      {"NegativeDimension",
       File("{" + Entry("w", R"("dtype":"F32","shape":[2,-1],"data_offsets":[0,8])") + "}", 8),
       kInvalid,
       {"tensor \"w\": shape [2,-1] has negative dimension -1"}},
      {"FractionalDimension",
       File("{" + Entry("w", R"("dtype":"F32","shape":[1.5],"data_offsets":[0,8])") + "}", 8),
       kInvalid,
       {"tensor \"w\": shape [1.5] has dimension 1.5, which is not an integer"}},
      {"StringDimension",
       File("{" + Entry("w", R"("dtype":"F32","shape":["2"],"data_offsets":[0,8])") + "}", 8),
       kInvalid,
       {"tensor \"w\": shape [\"2\"] has dimension \"2\", which is not an integer"}},
      {"ShapeTooLarge",
       File("{" +
                Entry("w", R"("dtype":"F32","shape":[4294967296,4294967296],)"
                           R"("data_offsets":[0,8])") +
                "}",
            8),
       kInvalid,
       {"tensor \"w\": shape [4294967296,4294967296] is too large"}},
      {"OneOffset",
       File("{" + Entry("w", f32x2 + R"("data_offsets":[0])") + "}", 8),
       kInvalid,
       {"tensor \"w\": \"data_offsets\" must be two non-negative integers [begin, end], found "
        "[0]"}},
      {"StringOffset",
       File("{" + Entry("w", f32x2 + R"("data_offsets":[0,"8"])") + "}", 8),
       kInvalid,
       {"tensor \"w\": \"data_offsets\" must be two", "found [0,\"8\"]"}},
      {"NegativeOffset",
       File("{" + Entry("w", f32x2 + R"("data_offsets":[-8,0])") + "}", 8),
       kInvalid,
       {"tensor \"w\": \"data_offsets\" must be two", "found [-8,0]"}},
      {"BeginAfterEnd",
       File("{" + Entry("w", f32x2 + R"("data_offsets":[8,0])") + "}", 8),
       kInvalid,
       {"tensor \"w\": data_offsets [8, 0] begin after end"}},
      {"EndPastDataSection",
       File("{" + Entry("w", f32x2 + R"("data_offsets":[0,8])") + "}", 6),
       kDataLoss,
       {"tensor \"w\": data_offsets [0, 8] end past the data section (6 bytes)", "truncated"}},
      {"SizeMismatch",
       File("{" + Entry("w", f32x2 + R"("data_offsets":[0,12])") + "}", 12),
       kInvalid,
       {"tensor \"w\": data_offsets [0, 12] hold 12 bytes, but F32 [2] needs 2 x 32 "
        "bits"}},
      {"SubByteDTypeNotTilingBytes",
       File("{" + Entry("w", R"("dtype":"F4","shape":[3],"data_offsets":[0,1])") + "}", 1),
       kInvalid,
       {"tensor \"w\": data_offsets [0, 1] hold 1 bytes, but F4 [3] needs 3 x 4 bits"}},
      {"Overlap",
       File("{" + Entry("a", f32x2 + R"("data_offsets":[0,8])") + "," +
                Entry("b", f32x2 + R"("data_offsets":[4,12])") + "}",
            12),
       kInvalid,
       {"tensor \"b\": data_offsets [4, 12] overlap \"a\" [0, 8]"}},
      {"EmptyTensorInsideAnother",
       File("{" + Entry("a", f32x2 + R"("data_offsets":[0,8])") + "," +
                Entry("e", R"("dtype":"F32","shape":[0],"data_offsets":[4,4])") + "}",
            8),
       kInvalid,
       {"tensor \"e\": data_offsets [4, 4] overlap \"a\" [0, 8]"}},
      {"GapBetweenTensors",
       File("{" + Entry("a", f32x2 + R"("data_offsets":[0,8])") + "," +
                Entry("b", f32x2 + R"("data_offsets":[12,20])") + "}",
            20),
       kInvalid,
       {"bytes [8, 12) of the data section belong to no tensor (a gap after \"a\" and before "
        "\"b\")"}},
      {"GapAtTheStart",
       File("{" + Entry("b", f32x2 + R"("data_offsets":[4,12])") + "}", 12),
       kInvalid,
       {"bytes [0, 4) of the data section belong to no tensor (a gap before \"b\")"}},
      {"BytesAfterTheLastTensor",
       File("{" + Entry("a", f32x2 + R"("data_offsets":[0,8])") + "}", 16),
       kInvalid,
       {"bytes [8, 16) at the end of the data section belong to no tensor"}},
      {"DuplicateTensorName",
       File("{" + Entry("w", f32x2 + R"("data_offsets":[0,8])") + "," +
                Entry("w", f32x2 + R"("data_offsets":[8,16])") + "}",
            16),
       kInvalid,
       {"tensor name \"w\" appears twice"}},
      {"DuplicateFieldInEntry",
       File("{" + Entry("w", f32x2 + R"("dtype":"I32","data_offsets":[0,8])") + "}", 8),
       kInvalid,
       {"key \"dtype\" appears twice in \"w\""}},
      {"MetadataValueNotAString",
       File(R"({"__metadata__":{"format":"pt","step":12}})"),
       kInvalid,
       {"\"__metadata__\" value of \"step\" must be a string, found 12"}},
      {"MetadataNotAnObject",
       File(R"({"__metadata__":["pt"]})"),
       kInvalid,
       {"\"__metadata__\" must be an object of strings, found [\"pt\"]"}},
  };
}

void PrintTo(const BadFile& bad, std::ostream* out) { *out << bad.case_name; }

class SafetensorsHeaderTest : public ::testing::TestWithParam<BadFile> {};

TEST_P(SafetensorsHeaderTest, FailsWithOneClearMessage) {
  const BadFile& bad = GetParam();
  testing::ScratchDir dir;
  const std::string path = dir.Path("bad.safetensors");
  testing::WriteFile(path, bad.bytes);
  const absl::StatusOr<SafetensorsFile> file = SafetensorsFile::Open(path);
  ASSERT_FALSE(file.ok()) << "opened " << bad.case_name;
  EXPECT_EQ(file.status().code(), bad.code) << file.status();
  EXPECT_THAT(std::string(file.status().message()), HasSubstr(path + ": "));
  for (const std::string& expected : bad.expected) {
    EXPECT_THAT(std::string(file.status().message()), HasSubstr(expected));
  }
  EXPECT_THAT(std::string(file.status().message()), HasSubstr("download or export it again"));
}

INSTANTIATE_TEST_SUITE_P(EveryRule, SafetensorsHeaderTest, ::testing::ValuesIn(BadFiles()),
                         [](const ::testing::TestParamInfo<BadFile>& info) {
                           return info.param.case_name;
                         });

TEST(SafetensorsHeaderTest, MissingFileIsNotFound) {
  testing::ScratchDir dir;
  const std::string path = dir.Path("model.safetensors");
  const absl::StatusOr<SafetensorsFile> file = SafetensorsFile::Open(path);
  EXPECT_EQ(file.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(file.status().message()), HasSubstr(path + ": no such file"));
  EXPECT_THAT(std::string(file.status().message()), HasSubstr("check the path"));
}

// What the format allows and other writers produce: whitespace padding, null metadata, unknown
// fields in an entry, an empty tensor at the boundary of two others, entries out of offset order.
TEST(SafetensorsHeaderTest, AcceptsEverythingTheFormatAllows) {
  testing::ScratchDir dir;
  const std::string path = dir.Path("ok.safetensors");
  const std::string header =
      R"( {"__metadata__":null,"b":{"dtype":"F32","shape":[1],"data_offsets":[4,8],"x":1},)"
      R"("e":{"dtype":"I64","shape":[0,5],"data_offsets":[4,4]},)"
      R"("a":{"dtype":"I32","shape":[],"data_offsets":[0,4]}}     )";
  testing::WriteFile(path, testing::SafetensorsBytes(header, std::string(8, '\1')));
  const absl::StatusOr<SafetensorsFile> file = SafetensorsFile::Open(path);
  ASSERT_TRUE(file.ok()) << file.status();
  ASSERT_EQ(file->entries().size(), 3u);
  EXPECT_EQ(file->entries()[0].name, "a");
  EXPECT_EQ(file->entries()[0].shape, Shape{});
  EXPECT_EQ(file->entries()[2].shape, (Shape{0, 5}));
  EXPECT_TRUE(file->metadata().empty());
  const absl::StatusOr<Tensor> a = file->Read("a");
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->data<int32_t>()[0], 0x01010101);
}

}  // namespace
}  // namespace kelvin::io
