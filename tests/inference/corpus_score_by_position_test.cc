// kelvin eval --data --by-position on a model directory (the SSA fixture model): the buckets of a
// Megatron prefix with a PREFIX_loss_mask hold only the mask's targets, each bucket's loss the sum
// of the per-position losses of the same tokens scored without the mask, in buckets of one position
// (one window: one loss per position); the table and the JSON carry the boundaries and counts; a
// width wider than the window is an error naming it.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <nlohmann/json.hpp>

#include "data/corpus/megatron_dataset_writer.h"
#include "inference/corpus_score.h"
#include "launcher/commands/inference_options.h"

namespace kelvin::inference {
namespace {

using ::testing::HasSubstr;

constexpr char kModel[] = KELVIN_FIXTURES_DIR "/hf_ssa/full/model";  // 160 ids, 256 positions

// One document of `values` as the Megatron dataset `prefix`.bin/.idx.
void WriteDataset(const std::string& prefix, const std::vector<int64_t>& values,
                  data::TokenType type) {
  absl::StatusOr<data::MegatronDatasetWriter> writer =
      data::MegatronDatasetWriter::Create(prefix, type);
  ASSERT_TRUE(writer.ok()) << writer.status();
  ASSERT_TRUE(writer->AddSequence(values).ok());
  ASSERT_TRUE(writer->Finish().ok());
  ASSERT_TRUE(writer->Commit().ok());
}

TEST(ScoreByPosition, TheMaskedBucketsSumThePositionsLosses) {
  std::vector<int64_t> tokens, mask;
  for (int64_t t = 0; t < 17; ++t) {
    tokens.push_back((11 * t + 5) % 160);
    mask.push_back(t % 3 == 0 || t == 7 ? 1 : 0);  // targets 3, 6, 7, 9, 12, 15 (0 never counts)
  }
  const std::string dir = ::testing::TempDir();
  WriteDataset(dir + "/by_position_all", tokens, data::TokenType::kUInt16);
  WriteDataset(dir + "/by_position_sft", tokens, data::TokenType::kUInt16);
  WriteDataset(dir + "/by_position_sft_loss_mask", mask, data::TokenType::kUInt8);
  const config::JobConfig job = launcher::JobOfModelDirectory(kModel);

  // One window of 16 inputs: a bucket a position holds the loss of that position's target.
  ScoreOptions each;
  each.data = dir + "/by_position_all";
  each.seq_length = 16;
  each.by_position = PositionBuckets::OfWidth(1);
  const absl::StatusOr<ScoreReport> all = ScoreData(job, each);
  ASSERT_TRUE(all.ok()) << all.status();
  ASSERT_EQ(all->by_position.size(), 16u);

  ScoreOptions masked = each;
  masked.data = dir + "/by_position_sft";
  masked.by_position = PositionBuckets::OfWidth(5);  // [0, 5) [5, 10) [10, 15) [15, 16)
  const absl::StatusOr<ScoreReport> report = ScoreData(job, masked);
  ASSERT_TRUE(report.ok()) << report.status();
  ASSERT_EQ(report->by_position.size(), 4u);
  EXPECT_EQ(report->result.targets, 6);
  for (const PositionBucket& bucket : report->by_position) {
    double loss_sum = 0;
    int64_t targets = 0;
    for (int64_t p = bucket.begin; p < bucket.end; ++p) {  // input p predicts token p + 1
      if (mask[p + 1] == 0) continue;
      loss_sum += all->by_position[p].loss_sum;
      ++targets;
    }
    EXPECT_EQ(bucket.targets, targets) << "[" << bucket.begin << ", " << bucket.end << ")";
    EXPECT_NEAR(bucket.loss_sum, loss_sum, 1e-12 * std::abs(loss_sum));
  }
  EXPECT_EQ(report->by_position[3].begin, 15);
  EXPECT_EQ(report->by_position[3].targets, 0);  // token 16 is no target

  const std::string table = FormatLossByPosition(job, *report);
  EXPECT_THAT(table, HasSubstr("(windows of 16, stride 16; position p has seen p + 1 tokens)"));
  EXPECT_THAT(table, HasSubstr("\n          [0, 5)          1 "));  // target 3 (input 2)
  EXPECT_THAT(table, HasSubstr("\n         [5, 10)          3 "));  // targets 6, 7, 9
  EXPECT_THAT(table, HasSubstr("\n        [15, 16)          0            -            -\n"));
  const nlohmann::json json = nlohmann::json::parse(ScoreJson(job, *report));
  ASSERT_EQ(json["by_position"].size(), 4u);
  EXPECT_EQ(json["by_position"][1]["begin"], 5);
  EXPECT_EQ(json["by_position"][1]["end"], 10);
  EXPECT_EQ(json["by_position"][1]["targets"], report->by_position[1].targets);
  EXPECT_DOUBLE_EQ(json["by_position"][1]["loss"].get<double>(), report->by_position[1].loss());
  EXPECT_TRUE(json["by_position"][3]["loss"].is_null());
  EXPECT_EQ(json["loss_mask"], dir + "/by_position_sft_loss_mask");

  masked.by_position = PositionBuckets::OfWidth(17);
  EXPECT_THAT(std::string(ScoreData(job, masked).status().message()),
              HasSubstr("--by-position 17: a bucket's width must be in [1, 16]"));
  masked.seq_length = 0;  // the model's 256 positions
  masked.by_position = PositionBuckets::OfWidth(0);
  EXPECT_THAT(std::string(ScoreData(job, masked).status().message()),
              HasSubstr("--by-position 0: a bucket's width must be in [1, 256]"));
}

}  // namespace
}  // namespace kelvin::inference
