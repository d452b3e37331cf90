// Strict JSON: errors at their line and column, duplicate keys refused at any depth, deep nesting
// refused, and linear time (a header of 200,000 keys parses at once; it was quadratic).
#include "core/io/strict_json.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "absl/strings/str_cat.h"
#include "core/io/safetensors.h"
#include "tests/core/io/test_files.h"

namespace kelvin::io {
namespace {

using ::testing::HasSubstr;

std::string Error(std::string_view text) {
  return std::string(ParseStrictJson(text, "f.json", "tensor name").status().message());
}

TEST(StrictJson, ErrorsNameTheLineColumnAndFlaw) {
  EXPECT_EQ(Error("{\n  \"a\": NaN\n}"),
            "f.json: not well-formed JSON at line 2, column 8 (syntax error while parsing value - "
            "invalid literal; last read: '\"a\": N')");
  EXPECT_THAT(Error("{\"a\": 1e400}"), HasSubstr("number overflow parsing '1e400'"));
  EXPECT_THAT(Error("{\"a\": \"\xff\"}"), HasSubstr("ill-formed UTF-8"));
  EXPECT_THAT(Error("{\"a\": 1"), HasSubstr("line 1, column 8"));
  // nlohmann alone stops at a NUL byte and would take what precedes it as the whole file.
  EXPECT_EQ(Error(std::string("{\"a\": 1}\n\0{\"b\"", 14)),
            "f.json: not well-formed JSON at line 2, column 1 (a NUL byte)");
  EXPECT_EQ(Error("{\"w\": 1, \"w\": 2}"), "f.json: tensor name \"w\" appears twice");
  EXPECT_EQ(Error("{\"m\": {\"k\": 1, \"k\": 2}}"), "f.json: key \"k\" appears twice in \"m\"");
  EXPECT_THAT(Error(std::string(100, '[') + std::string(100, ']')),
              HasSubstr("nested deeper than 64 levels"));
  const absl::StatusOr<nlohmann::json> fine = ParseStrictJson("{\"a\": [1, 2], \"b\": {}}", "f");
  ASSERT_TRUE(fine.ok()) << fine.status();
  EXPECT_EQ((*fine)["a"][1], 2);
}

TEST(StrictJson, ParsesManyKeysInLinearTime) {
  // 200,000 tensors of one element each: the quadratic parse took minutes from 20,000.
  constexpr int kTensors = 200000;
  std::string header = "{";
  for (int i = 0; i < kTensors; ++i) {
    absl::StrAppend(&header, i == 0 ? "" : ",", "\"t", i, "\":{\"dtype\":\"U8\",\"shape\":[1],",
                    "\"data_offsets\":[", i, ",", i + 1, "]}");
  }
  header += "}";
  testing::ScratchDir dir;
  testing::WriteFile(dir.Path("many.safetensors"),
                     testing::SafetensorsBytes(header, std::string(kTensors, '\1')));
  const absl::StatusOr<SafetensorsFile> file = SafetensorsFile::Open(dir.Path("many.safetensors"));
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_EQ(file->entries().size(), static_cast<size_t>(kTensors));
  EXPECT_NE(file->Find("t199999"), nullptr);
}

}  // namespace
}  // namespace kelvin::io
