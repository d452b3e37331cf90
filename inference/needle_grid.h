// The needle-in-a-haystack grid by generation: prompts of one retrieval task (the passkey of
// data/tasks/passkey_task.h, or data/tasks/retrieval_tasks.h's multi-key, multi-value and variable
// tracking) at each context length x needle depth, the answer generated greedily with the KV-cache
// decoder and scored by what it holds (not teacher-forced), the standard long-context retrieval
// chart.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/status.h"
#include "data/tasks/passkey_task.h"
#include "data/tasks/retrieval_tasks.h"
#include "data/tokenizer/tokenizer.h"
#include "models/llama/llama_decoder.h"

namespace kelvin::inference {

// How prompt text becomes the model's ids and generated ids text again: the passkey task's byte
// vocabulary (a model trained on data.passkey), or the model's tokenizer.
struct NeedleText {
  std::function<absl::StatusOr<std::vector<int32_t>>(const std::string&)> encode;  // BOS + text
  std::function<absl::StatusOr<std::string>(const std::vector<int32_t>&)> decode;
  int64_t answer_tokens = 0;     // tokens generated per passkey prompt: enough for the 5 digits
  bool byte_vocabulary = false;  // a token per byte: the passkey samples of seq_length L
  double bytes_per_token = 1;    // of the filler (a tokenizer), to size a prompt of L tokens
  std::vector<int32_t> stop_ids;
};
NeedleText ByteNeedleText();
// The tokenizer must outlive the result.
absl::StatusOr<NeedleText> TokenizerNeedleText(const data::Tokenizer& tokenizer);

struct NeedleGridSpec {
  // Context lengths L in tokens, as training.seq_length counts them: the positions the prompt and
  // the answer take (the last answer token is generated, never read back). A prompt of the byte
  // vocabulary at L is laid out as a training sample of seq_length L.
  std::vector<int64_t> lengths;
  std::vector<double> depths;  // key depths in [0, 1], fractions of the filler
  int64_t samples = 10;        // per cell
  uint64_t seed = 0;           // sample j of a cell is passkey sample j of this seed
  int64_t distractors = 0;     // passkey decoy sentences per prompt (data.passkey.distractors)
  data::RetrievalTask task = data::RetrievalTask::kPasskey;
};

// One prompt's outcome.
struct NeedleAttempt {
  bool retrieved = false;          // the answer holds everything asked
  double score = 0;                // the fraction of what was asked that it holds
  std::vector<int32_t> prompt;     // the ids given to the model
  std::vector<int32_t> generated;  // the greedy answer
  double depth = 0;                // where the key sat
};

struct NeedleCell {
  int64_t length = 0;
  double depth = 0;  // asked for
  int64_t samples = 0, retrieved = 0;
  double mean_score = 0;          // of the attempts (partial answers count their fraction)
  double mean_depth = 0;          // where the keys sat (the nearest sentence boundaries)
  double mean_prompt_tokens = 0;  // the prompts' length in the model's tokens
  double accuracy() const { return samples > 0 ? static_cast<double>(retrieved) / samples : 0; }
};

// The tokens generated per prompt of `task`: room for its whole answer.
int64_t NeedleAnswerTokens(const NeedleText& text, data::RetrievalTask task);

// The size of the samples whose prompt and answer take about `length` positions: for the passkey,
// the sample length T (bytes after BOS), `length` itself for bytes; for the other tasks, the filler
// budget. For a tokenizer, sized by the filler's bytes per token, checked on sample 0 (prompts
// differ by a few tokens: AttemptNeedle reports each). An error when `length` cannot hold the
// needles, the decoys and the question.
absl::StatusOr<int64_t> NeedleSampleBytes(const NeedleText& text, int64_t length,
                                          int64_t distractors,
                                          data::RetrievalTask task = data::RetrievalTask::kPasskey);

// Sample `sample` of spec.task's samples of `sample_bytes` (NeedleSampleBytes) with the (asked)
// needle at `depth`: the answer generated greedily and scored. The passkey is retrieved when the
// answer's text, leading spaces dropped, is the key's 5 digits and then no further digit; the other
// tasks by data::ScoreRetrievalAnswer (retrieved: all of it).
absl::StatusOr<NeedleAttempt> AttemptNeedle(models::LlamaDecoder& decoder, const NeedleText& text,
                                            const NeedleGridSpec& spec, int64_t sample_bytes,
                                            double depth, int64_t sample);

// Every cell of the grid, lengths outer, depths inner; the decoder must hold the longest length.
// `progress` is called after each cell.
absl::StatusOr<std::vector<NeedleCell>> RunNeedleGrid(
    models::LlamaDecoder& decoder, const NeedleText& text, const NeedleGridSpec& spec,
    const std::function<void(const NeedleCell&)>& progress = {});

}  // namespace kelvin::inference
