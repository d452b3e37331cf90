// Scoring a corpus (`kelvin eval MODEL_OR_JOB --data PATH | --text FILE`): a model's loss and
// perplexity on it with nothing but the model's settings (no training data, optimizer or batch),
// on the forward-only model through the held-out evaluation's LM loss, on the CPU or on CUDA: one
// process, or under mpirun / srun the model split over the processes (tensor parallelism); and
// the score as the command prints it and as JSON.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "configs/kelvin.pb.h"
#include "core/status.h"
#include "inference/loss_by_position.h"
#include "inference/sequence_scorer.h"
#include "training/checkpoint/checkpoint.h"
#include "training/job/job_setup.h"

namespace kelvin::inference {

struct ScoreOptions {
  std::string data;        // a Megatron prefix (PATH.bin/.idx) or a token file (.int32, .uint16)
  std::string text;        // a text file, encoded whole with the model's tokenizer (BOS first)
  std::string tokenizer;   // --tokenizer DIR: the tokenizer in place of model.hf_dir's ("" none)
  int64_t seq_length = 0;  // 0: training.seq_length, else min(2048, max_position_embeddings)
  int64_t stride = 0;      // 0: seq_length (non-overlapping windows)
  // --by-position: the loss by position in the window too, in these buckets (checked against the
  // window before scoring).
  std::optional<PositionBuckets> by_position;
  training::CheckpointChoice checkpoint;
};

struct ScoreReport {
  std::string source;     // the data as the command line named it
  std::string loss_mask;  // --data's PREFIX_loss_mask when it has one (only its targets count)
  int64_t seq_length = 0, stride = 0;
  ScoreResult result;
  std::vector<PositionBucket> by_position;  // [buckets]; empty without --by-position
};

// The model: a Hugging Face directory, or a job's checkpoint or model.hf_dir. Every token after the
// first is scored once, in non-overlapping windows of seq_length tokens or sliding at stride
// (sequence_scorer.h); documents are scored as one stream, as Megatron's and Hugging Face's
// perplexity runs do. A Megatron prefix with a PREFIX_loss_mask beside it (a fine-tuning set from
// prepare-data) counts only the tokens that mask marks as targets, as training's loss does; every
// token otherwise. The model runs where `placement` says (forward_model.h), forward-only, with a
// checkpoint's weights (any layout wrote them) or model.hf_dir's; `tp`: the group the model is
// split over (nullptr: this process holds it whole), every rank calling with the same options. With
// options.by_position the same per-token losses are also summed per bucket of window positions
// (report.by_position).
absl::StatusOr<ScoreReport> ScoreData(const config::JobConfig& job, const ScoreOptions& options,
                                      const training::TrainingPlacement& placement = {},
                                      parallel::Communicator* tp = nullptr);

// "score of NAME on SOURCE | loss 2.254109614 | perplexity 9.52681 | 10000 tokens in 5 windows
// of 2048 (stride 2048)"; with a loss mask "... | 2310 targets of 10000 tokens (the loss mask
// SOURCE_loss_mask) in 5 windows ...".
std::string FormatScore(const config::JobConfig& job, const ScoreReport& report);
// The loss by position as a table under a title line, one bucket a line: its positions, targets,
// loss and perplexity ("-" for a bucket without targets).
std::string FormatLossByPosition(const config::JobConfig& job, const ScoreReport& report);
// The score as JSON: {"model", "data", "seq_length", "stride", "windows", "tokens" (predicted),
// "targets" (counted in the loss), "loss", "perplexity", "loss_mask" (with one), "by_position"
// (with --by-position: [{"begin", "end", "targets", "loss", "perplexity"}], positions [begin, end)
// of the window, loss and perplexity null without targets)}, losses in full double precision.
std::string ScoreJson(const config::JobConfig& job, const ScoreReport& report);

}  // namespace kelvin::inference
