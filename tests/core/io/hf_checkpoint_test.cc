// Hugging Face checkpoint directories: sharded and single-file round trips (file names and index
// content as save_pretrained writes them), reads through the index, stale files of an earlier
// layout, and every inconsistency between the index and its shards.
#include "core/io/hf_checkpoint.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tests/core/io/test_files.h"
#include "tests/testing/tensors.h"

namespace kelvin::io {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
namespace fs = std::filesystem;
using ::testing::UnorderedElementsAre;

using NamedTensors = std::vector<std::pair<std::string, Tensor>>;

std::string Bytes(const Tensor& t) {
  return std::string(static_cast<const char*>(t.raw_data()), t.nbytes());
}

std::vector<std::string> FileNames(const std::string& directory) {
  std::vector<std::string> names;
  for (const auto& entry : std::filesystem::directory_iterator(directory)) {
    names.push_back(entry.path().filename().string());
  }
  return names;
}

// Six tensors of 96, 96, 16, 160, 96 and 8 bytes.
NamedTensors SmallModel() {
  return {
      {"model.embed_tokens.weight", testing::Random({6, 4}, DType::kF32, 1)},
      {"model.layers.0.self_attn.q_proj.weight", testing::Random({4, 12}, DType::kBF16, 2)},
      {"model.layers.0.input_layernorm.weight", testing::Random({4}, DType::kF32, 3)},
      {"model.layers.0.mlp.up_proj.weight", testing::Random({4, 5}, DType::kF64, 4)},
      {"lm_head.weight", testing::Random({6, 4}, DType::kF32, 5)},
      {"step", testing::RandomInts({}, DType::kI64, 6, 0, 100)},
  };
}

HfCheckpoint OpenOrDie(const std::string& path) {
  absl::StatusOr<HfCheckpoint> checkpoint = HfCheckpoint::Open(path);
  EXPECT_TRUE(checkpoint.ok()) << checkpoint.status();
  return std::move(checkpoint).value();
}

void ExpectHolds(const HfCheckpoint& checkpoint, const NamedTensors& tensors) {
  std::vector<std::string> names;
  for (const auto& [name, tensor] : tensors) names.push_back(name);
  std::sort(names.begin(), names.end());
  EXPECT_EQ(checkpoint.TensorNames(), names);
  for (const auto& [name, tensor] : tensors) {
    SCOPED_TRACE(name);
    ASSERT_NE(checkpoint.Find(name), nullptr);
    EXPECT_EQ(checkpoint.Find(name)->shape, tensor.shape());
    absl::StatusOr<Tensor> read = checkpoint.Read(name);
    ASSERT_TRUE(read.ok()) << read.status();
    EXPECT_EQ(read->dtype(), tensor.dtype());
    EXPECT_EQ(read->shape(), tensor.shape());
    EXPECT_EQ(Bytes(*read), Bytes(tensor));
  }
}

TEST(HfCheckpointTest, ShardedRoundTripWritesSavePretrainedLayout) {
  testing::ScratchDir dir;
  const NamedTensors tensors = SmallModel();
  // Greedy in order with 200 bytes per shard: [96, 96] [16, 160] [96, 8].
  ASSERT_TRUE(WriteHfCheckpoint(dir.path(), tensors, 200).ok());
  EXPECT_THAT(
      FileNames(dir.path()),
      UnorderedElementsAre("model-00001-of-00003.safetensors", "model-00002-of-00003.safetensors",
                           "model-00003-of-00003.safetensors", kHfIndexFileName));

  const std::string index_text = testing::ReadFile(dir.Path(kHfIndexFileName));
  const nlohmann::json index = nlohmann::json::parse(index_text);
  EXPECT_EQ(index, nlohmann::json::parse(R"({
    "metadata": {"total_size": 472},
    "weight_map": {
      "lm_head.weight": "model-00003-of-00003.safetensors",
      "model.embed_tokens.weight": "model-00001-of-00003.safetensors",
      "model.layers.0.input_layernorm.weight": "model-00002-of-00003.safetensors",
      "model.layers.0.mlp.up_proj.weight": "model-00002-of-00003.safetensors",
      "model.layers.0.self_attn.q_proj.weight": "model-00001-of-00003.safetensors",
      "step": "model-00003-of-00003.safetensors"}})"));
  EXPECT_EQ(index_text, index.dump(2) + "\n");  // transformers' formatting: indent 2, sorted

  absl::StatusOr<SafetensorsFile> shard =
      SafetensorsFile::Open(dir.Path("model-00002-of-00003.safetensors"));
  ASSERT_TRUE(shard.ok()) << shard.status();
  EXPECT_EQ(shard->entries().size(), 2u);
  EXPECT_EQ(shard->metadata(), (std::map<std::string, std::string>{{"format", "pt"}}));

  const HfCheckpoint checkpoint = OpenOrDie(dir.path());
  EXPECT_EQ(checkpoint.path(), dir.path());
  ExpectHolds(checkpoint, tensors);

  absl::StatusOr<Tensor> cols =
      checkpoint.ReadSlice("model.layers.0.self_attn.q_proj.weight", 1, 3, 9, DType::kF32);
  ASSERT_TRUE(cols.ok()) << cols.status();
  EXPECT_EQ(cols->shape(), (Shape{4, 6}));
  EXPECT_EQ(cols->data<float>()[7], static_cast<float>(tensors[1].second.data<bf16>()[12 + 4]));
}

TEST(HfCheckpointTest, TensorLargerThanTheShardSizeGetsItsOwnShard) {
  testing::ScratchDir dir;
  const NamedTensors tensors = {{"a", Tensor::ZerosCpu({2}, DType::kF32)},
                                {"big", Tensor::ZerosCpu({100}, DType::kF32)},
                                {"b", Tensor::ZerosCpu({2}, DType::kF32)}};
  ASSERT_TRUE(WriteHfCheckpoint(dir.path(), tensors, 64).ok());
  const nlohmann::json index = nlohmann::json::parse(testing::ReadFile(dir.Path(kHfIndexFileName)));
  // As huggingface_hub: "a" stays open while "big" is placed alone, so "b" joins "a".
  EXPECT_EQ(index["weight_map"]["a"], "model-00002-of-00002.safetensors");
  EXPECT_EQ(index["weight_map"]["big"], "model-00001-of-00002.safetensors");
  EXPECT_EQ(index["weight_map"]["b"], "model-00002-of-00002.safetensors");
  ExpectHolds(OpenOrDie(dir.path()), tensors);
}

TEST(HfCheckpointTest, MadeTensorsAreMadeOneShardAtATime) {
  testing::ScratchDir dir;
  // Three shards of 64 bytes; each tensor is made when its shard is written, so when the first
  // tensor of a shard is made the shards before it are on disk already (in the staging
  // directory the written files are moved from when all are written).
  const std::string staged = dir.path() + ".partial/";
  std::vector<std::string> made;
  std::vector<HfTensorSource> sources;
  for (const char* name : {"a", "b", "c", "d", "e", "f"}) {
    sources.push_back({name, {8}, DType::kF32, [&, name]() -> absl::StatusOr<Tensor> {
                         made.push_back(name);
                         if (std::string(name) == "c") {
                           EXPECT_TRUE(fs::exists(staged + "model-00001-of-00003.safetensors"));
                         }
                         if (std::string(name) == "e") {
                           EXPECT_TRUE(fs::exists(staged + "model-00002-of-00003.safetensors"));
                         }
                         Tensor t = Tensor::Empty({8}, DType::kF32);
                         std::fill(t.data<float>(), t.data<float>() + 8, made.size());
                         return t;
                       }});
  }
  ASSERT_TRUE(WriteHfCheckpoint(dir.path(), sources, 64).ok());
  EXPECT_EQ(made, (std::vector<std::string>{"a", "b", "c", "d", "e", "f"}));
  absl::StatusOr<Tensor> e = OpenOrDie(dir.path()).Read("e");
  ASSERT_TRUE(e.ok()) << e.status();
  EXPECT_EQ(e->data<float>()[3], 5.0f);

  // A made tensor that is not what was announced is an error naming it.
  sources = {{"w", {4, 2}, DType::kF32, []() -> absl::StatusOr<Tensor> {
                return Tensor::ZerosCpu({2, 4}, DType::kF32);
              }}};
  EXPECT_THAT(std::string(WriteHfCheckpoint(dir.path(), sources).message()),
              HasSubstr("tensor \"w\" was announced as [4, 2] but made as f32[2, 4]@cpu"));
}

TEST(HfCheckpointTest, EverythingThatFitsIsOneModelSafetensors) {
  testing::ScratchDir dir;
  const NamedTensors tensors = SmallModel();
  ASSERT_TRUE(WriteHfCheckpoint(dir.path(), tensors).ok());
  EXPECT_THAT(FileNames(dir.path()), ElementsAre(kHfSingleFileName));
  ExpectHolds(OpenOrDie(dir.path()), tensors);
  ExpectHolds(OpenOrDie(dir.Path(kHfSingleFileName)), tensors);  // a file path works too
}

TEST(HfCheckpointTest, WritingAnotherLayoutRemovesTheStaleFiles) {
  testing::ScratchDir dir;
  const NamedTensors tensors = SmallModel();
  testing::WriteFile(dir.Path("config.json"), "{}");
  testing::WriteFile(dir.Path("model-00007-of-00009.safetensors"), "stale");
  ASSERT_TRUE(WriteHfCheckpoint(dir.path(), tensors).ok());
  ASSERT_TRUE(WriteHfCheckpoint(dir.path(), tensors, 300).ok());  // now two shards
  EXPECT_THAT(FileNames(dir.path()),
              UnorderedElementsAre("config.json", "model-00001-of-00002.safetensors",
                                   "model-00002-of-00002.safetensors", kHfIndexFileName));
  ExpectHolds(OpenOrDie(dir.path()), tensors);
  ASSERT_TRUE(WriteHfCheckpoint(dir.path(), tensors).ok());  // back to one file
  EXPECT_THAT(FileNames(dir.path()), UnorderedElementsAre("config.json", kHfSingleFileName));
  ExpectHolds(OpenOrDie(dir.path()), tensors);
}

TEST(HfCheckpointTest, AStagingPathThatIsNotAnInterruptedExportIsRefusedAndKept) {
  testing::ScratchDir dir;
  const std::string out = dir.Path("export");
  fs::create_directories(out + ".partial");
  testing::WriteFile(out + ".partial/notes.txt", "the user's");
  const absl::Status refused = WriteHfCheckpoint(out, SmallModel());
  EXPECT_EQ(refused.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(refused.message()),
              HasSubstr("its staging path " + out +
                        ".partial exists and is not what an interrupted export leaves"));
  EXPECT_EQ(testing::ReadFile(out + ".partial/notes.txt"), "the user's");
  EXPECT_FALSE(fs::exists(out));
  testing::WriteFile(dir.Path("file.partial"), "a file");  // a file at the path: the same
  EXPECT_EQ(WriteHfCheckpoint(dir.Path("file"), SmallModel()).code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(testing::ReadFile(dir.Path("file.partial")), "a file");
}

TEST(HfCheckpointTest, WhatAnInterruptedExportLeftIsReplaced) {
  testing::ScratchDir dir;
  const std::string out = dir.Path("export");
  fs::create_directories(out + ".partial");
  testing::WriteFile(out + ".partial/.kelvin-export-in-progress", "");
  testing::WriteFile(out + ".partial/model-00001-of-00002.safetensors", "half written");
  const NamedTensors tensors = SmallModel();
  ASSERT_TRUE(WriteHfCheckpoint(out, tensors).ok());
  EXPECT_THAT(FileNames(out), ElementsAre(kHfSingleFileName));
  EXPECT_FALSE(fs::exists(out + ".partial"));
  ExpectHolds(OpenOrDie(out), tensors);
}

TEST(HfCheckpointTest, WriteRejectsDuplicateNamesAndZeroShardSize) {
  testing::ScratchDir dir;
  const Tensor t = Tensor::ZerosCpu({1}, DType::kF32);
  const absl::Status duplicate = WriteHfCheckpoint(dir.path(), {{"w", t}, {"w", t}}, 4);
  EXPECT_EQ(duplicate.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(duplicate.message()), HasSubstr("cannot write checkpoint " + dir.path() +
                                                          ": tensor name \"w\" appears "
                                                          "twice"));
  const absl::Status zero = WriteHfCheckpoint(dir.path(), {{"w", t}}, 0);
  EXPECT_THAT(std::string(zero.message()), HasSubstr("max_shard_bytes is 0"));
  EXPECT_TRUE(FileNames(dir.path()).empty());
}

TEST(HfCheckpointTest, MissingTensorListsTheClosestNamesOfAllShards) {
  testing::ScratchDir dir;
  ASSERT_TRUE(WriteHfCheckpoint(dir.path(), SmallModel(), 200).ok());
  const HfCheckpoint checkpoint = OpenOrDie(dir.path());
  EXPECT_EQ(checkpoint.Find("lm_head.weights"), nullptr);
  const absl::StatusOr<Tensor> read = checkpoint.Read("lm_head.weights");
  EXPECT_EQ(read.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(read.status().message()),
              HasSubstr(dir.path() + ": no tensor \"lm_head.weights\" among its 6 tensors; the "
                                     "closest names are \"lm_head.weight\""));
  const absl::StatusOr<Tensor> slice = checkpoint.ReadSlice("lm_head.weights", 0, 0, 1);
  EXPECT_EQ(slice.status().code(), absl::StatusCode::kNotFound);
}

TEST(HfCheckpointTest, MissingOrEmptyDirectory) {
  testing::ScratchDir dir;
  const absl::StatusOr<HfCheckpoint> missing = HfCheckpoint::Open(dir.Path("nope"));
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(missing.status().message()),
              HasSubstr(dir.Path("nope") + ": no such checkpoint directory; pass the folder"));
  const absl::StatusOr<HfCheckpoint> empty = HfCheckpoint::Open(dir.path());
  EXPECT_EQ(empty.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(empty.status().message()),
              HasSubstr(dir.path() + ": has neither model.safetensors nor "
                                     "model.safetensors.index.json"));
}

// A sharded checkpoint (2 shards: "a" and "b" in the first, "c" in the second) whose index is then
// replaced by `index`.
struct BadIndex {
  std::string case_name;
  std::string index;
  absl::StatusCode code;
  std::string expected;  // in the message; "<dir>" stands for the checkpoint directory
};

void PrintTo(const BadIndex& bad, std::ostream* out) { *out << bad.case_name; }

class HfCheckpointIndexTest : public ::testing::TestWithParam<BadIndex> {};

TEST_P(HfCheckpointIndexTest, FailsWithOneClearMessage) {
  const BadIndex& bad = GetParam();
  testing::ScratchDir dir;
  ASSERT_TRUE(WriteHfCheckpoint(dir.path(),
                                {{"a", Tensor::ZerosCpu({2}, DType::kF32)},
                                 {"b", Tensor::ZerosCpu({2}, DType::kF32)},
                                 {"c", Tensor::ZerosCpu({4}, DType::kF32)}},
                                16)
                  .ok());
  testing::WriteFile(dir.Path(kHfIndexFileName), bad.index);
  const absl::StatusOr<HfCheckpoint> checkpoint = HfCheckpoint::Open(dir.path());
  ASSERT_FALSE(checkpoint.ok()) << bad.case_name;
  EXPECT_EQ(checkpoint.status().code(), bad.code) << checkpoint.status();
  std::string expected = bad.expected;
  for (size_t at = expected.find("<dir>"); at != std::string::npos; at = expected.find("<dir>")) {
    expected.replace(at, 5, dir.path());
  }
  EXPECT_THAT(std::string(checkpoint.status().message()), HasSubstr(expected));
}

constexpr std::string_view kShard1 = "model-00001-of-00002.safetensors";
constexpr std::string_view kShard2 = "model-00002-of-00002.safetensors";

std::string WeightMap(const std::string& entries) {
  return R"({"metadata": {"total_size": 32}, "weight_map": {)" + entries + "}}";
}

std::vector<BadIndex> BadIndexes() {
  const std::string one = std::string(kShard1), two = std::string(kShard2);
  const std::string a = R"("a": ")" + one + "\", ";
  const std::string b = R"("b": ")" + one + "\", ";
  const std::string c = R"("c": ")" + two + "\"";
  const std::string index = "<dir>/model.safetensors.index.json";
  return {
      {"NotJson", R"({"weight_map": {"a": )", absl::StatusCode::kInvalidArgument,
       index + ": not well-formed JSON at line 1, column"},
      {"NotAnObject", "[]", absl::StatusCode::kInvalidArgument,
       index + ": the index is a JSON array; expected {\"metadata\""},
      {"NoWeightMap", R"({"metadata": {}})", absl::StatusCode::kInvalidArgument,
       index + ": missing \"weight_map\""},
      {"EmptyWeightMap", WeightMap(""), absl::StatusCode::kInvalidArgument,
       "\"weight_map\" must be a non-empty object"},
      {"MetadataNotAnObject", R"({"metadata": 3, "weight_map": {)" + a + b + c + "}}",
       absl::StatusCode::kInvalidArgument, "\"metadata\" must be an object"},
      {"ShardNotAString", WeightMap(a + b + R"("c": 2)"), absl::StatusCode::kInvalidArgument,
       "\"weight_map\" value of \"c\" must be a file name, found 2"},
      {"ShardOutsideTheDirectory", WeightMap(a + b + R"("c": "../model.safetensors")"),
       absl::StatusCode::kInvalidArgument,
       "tensor \"c\" is mapped to \"../model.safetensors\", which is not a file inside the "
       "checkpoint directory"},
      {"DuplicateTensor", WeightMap(a + b + c + ", " + R"("a": ")" + two + "\""),
       absl::StatusCode::kInvalidArgument, "key \"a\" appears twice in \"weight_map\""},
      {"MissingShard", WeightMap(a + b + R"("c": "model-00003-of-00003.safetensors")"),
       absl::StatusCode::kNotFound,
       index + ": tensor \"c\" is in shard model-00003-of-00003.safetensors, but "
               "<dir>/model-00003-of-00003.safetensors does not exist; the checkpoint is "
               "incomplete"},
      {"TensorNotInItsShard", WeightMap(a + b + c + R"(, "d": ")" + two + "\""),
       absl::StatusCode::kDataLoss,
       index + ": tensor \"d\" is in shard " + two + " by the index, but <dir>/" + two +
           " does not hold it"},
      {"TensorMissingFromIndex", WeightMap(a + c), absl::StatusCode::kDataLoss,
       "<dir>/" + one + ": holds tensor \"b\", which the index " + index +
           " does not place in this shard"},
      {"TensorInTheWrongShard", WeightMap(a + R"("b": ")" + two + "\", " + c),
       absl::StatusCode::kDataLoss, "tensor \"b\" is in shard " + two + " by the index"},
  };
}

INSTANTIATE_TEST_SUITE_P(EveryRule, HfCheckpointIndexTest, ::testing::ValuesIn(BadIndexes()),
                         [](const ::testing::TestParamInfo<BadIndex>& info) {
                           return info.param.case_name;
                         });

TEST(HfCheckpointTest, CorruptShardIsReportedWithItsPath) {
  testing::ScratchDir dir;
  ASSERT_TRUE(WriteHfCheckpoint(dir.path(),
                                {{"a", Tensor::ZerosCpu({4}, DType::kF32)},
                                 {"b", Tensor::ZerosCpu({4}, DType::kF32)}},
                                16)
                  .ok());
  const std::string shard = dir.Path("model-00002-of-00002.safetensors");
  const std::string bytes = testing::ReadFile(shard);
  testing::WriteFile(shard, bytes.substr(0, bytes.size() - 1));
  const absl::StatusOr<HfCheckpoint> checkpoint = HfCheckpoint::Open(dir.path());
  EXPECT_EQ(checkpoint.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(std::string(checkpoint.status().message()),
              HasSubstr(shard + ": tensor \"b\": data_offsets [0, 16] end past the data section "
                                "(15 bytes)"));
}

}  // namespace
}  // namespace kelvin::io
