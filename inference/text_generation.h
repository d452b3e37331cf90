// Generation from a job's model without a training job around it: text or token ids through the
// KV-cache decoder (models/llama/llama_decoder.h) on the CPU in f32 or on CUDA in bf16, whatever
// layout trained the model: one process, or the model split over a tensor-parallel group; each
// prompt's result as a JSON line (`kelvin generate`'s output). The chat mode (chat_generation.h)
// shares its steps.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "configs/kelvin.pb.h"
#include "core/status.h"
#include "data/tokenizer/tokenizer.h"
#include "inference/generation_loop.h"
#include "inference/token_sampler.h"
#include "models/llama/llama_model.h"
#include "training/checkpoint/checkpoint.h"
#include "training/job/job_setup.h"

namespace kelvin::inference {

struct GenerateOptions {
  training::CheckpointChoice checkpoint;
  std::vector<std::string> prompts;  // text (needs the tokenizer)
  // Where each of `prompts` came from, for its errors ("--prompt 2", "FILE line 7"); a prompt
  // without one is named by its place ("text prompt 3").
  std::vector<std::string> prompt_sources;
  std::vector<std::vector<int32_t>> token_prompts;  // ids, used as they are
  std::string tokenizer;  // --tokenizer DIR: the tokenizer in place of model.hf_dir's ("" none)
  int64_t max_new_tokens = 64;
  SamplingOptions sampling;
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
// model runs where `placement` says (forward_model.h; the default: the CPU in
// f32). `timing` (when given) accumulates where the time went; `tp`: the group the model is split
// over (nullptr: this process holds it whole), every rank calling with the same options.
absl::StatusOr<std::vector<std::string>> GenerateFromJob(
    const config::JobConfig& job, const GenerateOptions& options,
    const training::TrainingPlacement& placement = {}, GenerationTiming* timing = nullptr,
    parallel::Communicator* tp = nullptr, int64_t* failed_prompts = nullptr);

// The steps GenerateFromJob and the chat mode (chat_generation.h) share.

// The options no generation can honour, each an error naming it: sampling, --max-new-tokens beyond
// any model's positions, a --stop text that is not UTF-8.
absl::Status CheckGenerateOptions(const GenerateOptions& options);

// The request every prompt starts from: options' budget and sampling, stopping at the model's eos
// ids (`arch`'s and the tokenizer's eos_token) and at --stop; with a tokenizer, sampling leaves out
// the ids it cannot spell (unless options.allow_unspellable). `options` and `tokenizer` must
// outlive the request (--stop reads them).
GenerationRequest BaseRequest(const GenerateOptions& options, const models::LlamaConfig& arch,
                              const std::optional<data::Tokenizer>& tokenizer);

// `prompts` continued by `model` as `base` says, `batch_size` prompts decoded together: a result
// per prompt, in order.
absl::StatusOr<std::vector<GenerationResult>> GeneratePrompts(
    const models::LlamaModel& model, const std::vector<std::vector<int32_t>>& prompts,
    const GenerationRequest& base, int64_t batch_size, GenerationTiming* timing);

// One prompt's output object (the fields GenerateFromJob describes). The text decodes the tokens
// without special tokens, less the stop id that ended them when `text_without_stop_id`; a result
// without text has "error" and counts in `failed_prompts` (when given).
nlohmann::ordered_json GenerationJson(const std::vector<int32_t>& prompt,
                                      const GenerationResult& result,
                                      const std::optional<data::Tokenizer>& tokenizer,
                                      bool text_without_stop_id, bool logprobs,
                                      int64_t* failed_prompts);
// `line` as one line of output (bytes that are not UTF-8 replaced).
std::string JsonLine(const nlohmann::ordered_json& line);

// --prompt-file: each line of `path` that is not blank, a prompt (named "PATH line N" in errors),
// appended to options.prompts; LF or CRLF line ends (the CR is no part of the prompt).
absl::Status AddPromptFile(const std::string& path, GenerateOptions& options);

}  // namespace kelvin::inference
