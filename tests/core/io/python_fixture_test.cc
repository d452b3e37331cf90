// Files written by Python's safetensors and huggingface_hub (tests/fixtures/safetensors/, made by
// tools/make_safetensors_fixture.py) read by Kelvin, every value checked against what torch read;
// and the reverse direction: Kelvin re-exports them. With KELVIN_IO_EXPORT_DIR set, the re-exports
// are kept there for `make_safetensors_fixture.py --check DIR` (Python loads what Kelvin wrote).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/io/hf_checkpoint.h"
#include "core/io/safetensors.h"
#include "tests/core/io/test_files.h"

namespace kelvin::io {
namespace {

using ::testing::HasSubstr;
using Json = nlohmann::json;

const std::string kFixtures = std::string(KELVIN_FIXTURES_DIR) + "/safetensors";

Json Expected() { return Json::parse(testing::ReadFile(kFixtures + "/expected.json")); }

std::vector<uint32_t> FloatBits(const Tensor& t) {  // t: f32
  const uint32_t* data = static_cast<const uint32_t*>(t.raw_data());
  return std::vector<uint32_t>(data, data + t.numel());
}

bool IsNanBits(uint32_t bits) { return (bits & 0x7fffffffu) > 0x7f800000u; }

template <typename T>
std::vector<T> Values(const Tensor& t) {
  return std::vector<T>(t.data<T>(), t.data<T>() + t.numel());
}

std::string Bytes(const Tensor& t) {
  return std::string(static_cast<const char*>(t.raw_data()), t.nbytes());
}

// Reads `name` from `source` (a SafetensorsFile or HfCheckpoint) and compares it with `want`, the
// fixture's description of what torch read.
template <typename Source>
void ExpectAsTorchRead(const Source& source, const std::string& name, const Json& want) {
  SCOPED_TRACE(name);
  const SafetensorsEntry* entry = source.Find(name);
  ASSERT_NE(entry, nullptr);
  EXPECT_EQ(entry->dtype_name, want["dtype"].get<std::string>());
  EXPECT_EQ(entry->shape, want["shape"].get<Shape>());
  if (want.contains("f32_bits")) {
    absl::StatusOr<Tensor> as_f32 = source.Read(name, DType::kF32);
    ASSERT_TRUE(as_f32.ok()) << as_f32.status();
    const std::vector<uint32_t> got = FloatBits(*as_f32);
    const auto torch = want["f32_bits"].get<std::vector<uint32_t>>();
    ASSERT_EQ(got.size(), torch.size());
    for (size_t i = 0; i < got.size(); ++i) {
      // NaN payloads differ between conversions (torch gives 0x7fffffff for half NaN 0x7e00).
      const bool both_nan = IsNanBits(got[i]) && IsNanBits(torch[i]);
      EXPECT_TRUE(got[i] == torch[i] || both_nan)
          << "element " << i << ": 0x" << std::hex << got[i] << " vs torch 0x" << torch[i];
    }
  }
  absl::StatusOr<Tensor> native = source.Read(name);
  if (entry->dtype_name == "F16") {
    EXPECT_THAT(std::string(native.status().message()), HasSubstr("pass `as`"));
    return;
  }
  ASSERT_TRUE(native.ok()) << native.status();
  if (entry->dtype_name == "F64") {
    EXPECT_EQ(Values<double>(*native), want["values"].get<std::vector<double>>());
  } else if (entry->dtype_name == "I64") {
    EXPECT_EQ(Values<int64_t>(*native), want["values"].get<std::vector<int64_t>>());
  } else if (entry->dtype_name == "I32") {
    EXPECT_EQ(Values<int32_t>(*native), want["values"].get<std::vector<int32_t>>());
  }
}

std::vector<std::string> Keys(const Json& object) {
  std::vector<std::string> keys;
  for (const auto& [key, value] : object.items()) keys.push_back(key);
  return keys;  // sorted: nlohmann::json objects are std::maps
}

TEST(PythonFixtureTest, SingleFileFromTheSafetensorsPackage) {
  const Json expected = Expected();
  const Json& tensors = expected["python.safetensors"];
  absl::StatusOr<SafetensorsFile> file = SafetensorsFile::Open(kFixtures + "/python.safetensors");
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_EQ(file->metadata(), (expected["metadata"].get<std::map<std::string, std::string>>()));
  std::vector<std::string> names;
  for (const SafetensorsEntry& entry : file->entries()) names.push_back(entry.name);
  EXPECT_EQ(names, Keys(tensors));
  for (const auto& [name, want] : tensors.items()) ExpectAsTorchRead(*file, name, want);

  // f32 -> bf16 rounding equals torch's.
  absl::StatusOr<Tensor> rounded = file->Read("f32_rounding", DType::kBF16);
  ASSERT_TRUE(rounded.ok()) << rounded.status();
  std::vector<uint32_t> bits;
  for (const bf16 value : Values<bf16>(*rounded)) bits.push_back(value.bits);
  EXPECT_EQ(bits, tensors["f32_rounding"]["bf16_bits"].get<std::vector<uint32_t>>());

  // Columns [2, 4) of a [4, 6] weight, as one tensor-parallel rank would load them.
  const std::string weight = "model.layers.0.mlp.up_proj.weight";
  absl::StatusOr<Tensor> cols = file->ReadSlice(weight, 1, 2, 4);
  ASSERT_TRUE(cols.ok()) << cols.status();
  const auto all = tensors[weight]["f32_bits"].get<std::vector<uint32_t>>();
  std::vector<uint32_t> want;
  for (size_t row = 0; row < 4; ++row)
    want.insert(want.end(), {all[row * 6 + 2], all[row * 6 + 3]});
  EXPECT_EQ(FloatBits(*cols), want);
}

TEST(PythonFixtureTest, ShardedDirectoryFromHuggingfaceHub) {
  const Json expected = Expected();
  absl::StatusOr<HfCheckpoint> checkpoint = HfCheckpoint::Open(kFixtures + "/hf_sharded");
  ASSERT_TRUE(checkpoint.ok()) << checkpoint.status();
  EXPECT_EQ(checkpoint->TensorNames(), Keys(expected["hf_sharded"]));
  for (const auto& [name, want] : expected["hf_sharded"].items()) {
    ExpectAsTorchRead(*checkpoint, name, want);
  }
}

// Where the re-exports go: KELVIN_IO_EXPORT_DIR when set (kept), else a scratch directory.
class ExportDir {
 public:
  ExportDir() {
    const char* keep = std::getenv("KELVIN_IO_EXPORT_DIR");
    path_ = keep != nullptr ? keep : scratch_.path();
    std::filesystem::create_directories(path_);
  }
  std::string Path(const std::string& name) const { return path_ + "/" + name; }

 private:
  testing::ScratchDir scratch_;
  std::string path_;
};

TEST(PythonFixtureTest, KelvinReexportsReadBackIdentically) {
  const ExportDir out;
  // The single file, F16 widened to F32 (Kelvin has no F16), with the same metadata.
  absl::StatusOr<SafetensorsFile> file = SafetensorsFile::Open(kFixtures + "/python.safetensors");
  ASSERT_TRUE(file.ok()) << file.status();
  std::vector<std::pair<std::string, Tensor>> tensors;
  for (const SafetensorsEntry& entry : file->entries()) {
    const std::optional<DType> as =
        entry.dtype_name == "F16" ? std::optional(DType::kF32) : std::nullopt;
    absl::StatusOr<Tensor> read = file->Read(entry.name, as);
    ASSERT_TRUE(read.ok()) << read.status();
    tensors.emplace_back(entry.name, *read);
  }
  const std::string path = out.Path("kelvin.safetensors");
  ASSERT_TRUE(WriteSafetensors(path, tensors, file->metadata()).ok());
  absl::StatusOr<SafetensorsFile> reread = SafetensorsFile::Open(path);
  ASSERT_TRUE(reread.ok()) << reread.status();
  EXPECT_EQ(reread->metadata(), file->metadata());
  for (const auto& [name, tensor] : tensors) {
    absl::StatusOr<Tensor> read = reread->Read(name);
    ASSERT_TRUE(read.ok()) << read.status();
    EXPECT_EQ(read->dtype(), tensor.dtype()) << name;
    EXPECT_EQ(Bytes(*read), Bytes(tensor)) << name;
  }

  // The sharded checkpoint, re-sharded by Kelvin at the same 200-byte limit.
  absl::StatusOr<HfCheckpoint> sharded = HfCheckpoint::Open(kFixtures + "/hf_sharded");
  ASSERT_TRUE(sharded.ok()) << sharded.status();
  std::vector<std::pair<std::string, Tensor>> weights;
  for (const std::string& name : sharded->TensorNames()) {
    absl::StatusOr<Tensor> read = sharded->Read(name);
    ASSERT_TRUE(read.ok()) << read.status();
    weights.emplace_back(name, *read);
  }
  ASSERT_TRUE(WriteHfCheckpoint(out.Path("kelvin_hf"), weights, 200).ok());
  absl::StatusOr<HfCheckpoint> resharded = HfCheckpoint::Open(out.Path("kelvin_hf"));
  ASSERT_TRUE(resharded.ok()) << resharded.status();
  EXPECT_TRUE(std::filesystem::exists(out.Path("kelvin_hf/model.safetensors.index.json")));
  for (const auto& [name, tensor] : weights) {
    absl::StatusOr<Tensor> read = resharded->Read(name);
    ASSERT_TRUE(read.ok()) << read.status();
    EXPECT_EQ(Bytes(*read), Bytes(tensor)) << name;
  }
}

}  // namespace
}  // namespace kelvin::io
