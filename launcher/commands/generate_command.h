// `kelvin generate`: text or token ids from the job's model without a training job around it, with
// the KV-cache decoder (models/llama/llama_decoder.h) on the CPU in f32 or on CUDA in bf16,
// whatever layout trained the model: one process, or under mpirun / srun the model split over the
// processes (TP).
#pragma once

#include <string>
#include <vector>

#include "configs/kelvin.pb.h"
#include "core/status.h"
#include "launcher/commands/command_line.h"
#include "models/generation/generate.h"
#include "models/generation/token_sampler.h"
#include "training/checkpoint/checkpoint.h"
#include "training/job/job_setup.h"

namespace kelvin::launcher {

struct GenerateOptions {
  training::CheckpointChoice checkpoint;
  std::vector<std::string> prompts;  // text (needs the tokenizer)
  // Where each of `prompts` came from, for its errors ("--prompt 2", "FILE line 7"); a prompt
  // without one is named by its place ("text prompt 3").
  std::vector<std::string> prompt_sources;
  std::vector<std::vector<int32_t>> token_prompts;  // ids, used as they are
  std::string tokenizer;  // --tokenizer DIR: the tokenizer in place of model.hf_dir's ("" none)
  int64_t max_new_tokens = 64;
  models::SamplingOptions sampling;
  std::string stop;       // stops once the generated text ends with it ("" none)
  bool logprobs = false;  // each token's log-probability in the output
  // With a tokenizer, sampling leaves out the ids it cannot spell (a model's vocab_size beyond the
  // tokenizer's ids); true: they may be drawn (and have no text).
  bool allow_unspellable = false;
  int64_t batch_size = 8;  // prompts decoded together (one decoder call per step for all)
};

// One JSON object per prompt, in order: {"prompt_tokens": [...], "tokens": [...], "text": ...
// (with a tokenizer), "finish_reason": "eos" | "stop" | "length", "logprobs": [...] (asked for)};
// a prompt whose tokens have no text (an unspellable id drawn with allow_unspellable) has
// "error": why in place of "text", the other prompts' lines as they are, and counts in
// `failed_prompts` (when given).
// The model stops at its eos ids (config.json's eos_token_id and the tokenizer's eos_token).
// The weights: the chosen checkpoint of checkpoint.dir (newest, --step N, --best; any layout wrote
// it), else model.hf_dir's; the tokenizer: options.tokenizer's, else model.hf_dir's tokenizer.json
// when it has one (text prompts need it). The prompts are decoded options.batch_size at a time. The
// model runs where `placement` says (launcher/commands/inference_model.h; the default: the CPU in
// f32). `timing` (when given) accumulates where the time went; `tp`: the group the model is split
// over (nullptr: this process holds it whole), every rank calling with the same options.
absl::StatusOr<std::vector<std::string>> GenerateFromJob(
    const config::JobConfig& job, const GenerateOptions& options,
    const training::TrainingPlacement& placement = {}, models::GenerationTiming* timing = nullptr,
    parallel::Communicator* tp = nullptr, int64_t* failed_prompts = nullptr);

// --prompt-file: each line of `path` that is not blank, a prompt (named "PATH line N" in errors),
// appended to options.prompts; LF or CRLF line ends (the CR is no part of the prompt).
absl::Status AddPromptFile(const std::string& path, GenerateOptions& options);

void AddGenerateCommand(CommandLine& line);

}  // namespace kelvin::launcher
