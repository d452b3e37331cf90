// Retrieval prompts through the greedy generation loop, cell by cell.
#include "inference/needle_grid.h"

#include <algorithm>
#include <cctype>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "inference/generation_loop.h"

namespace kelvin::inference {
namespace {

// The prompt's text: the sample without BOS and without the answer digits.
std::string PromptText(const data::PasskeySample& sample) {
  return data::ByteTokensToText(std::span<const int32_t>(sample.tokens)
                                    .subspan(1, sample.tokens.size() - 1 - data::kPasskeyDigits));
}

// Whether the answer's text, leading spaces dropped, is the key and then no further digit.
bool AnswerIsKey(const std::string& answer, int32_t key) {
  const size_t start = answer.find_first_not_of(' ');
  if (start == std::string::npos) return false;
  const std::string digits = absl::StrCat(key);
  if (answer.compare(start, digits.size(), digits) != 0) return false;
  const size_t after = start + digits.size();
  return after == answer.size() || !std::isdigit(static_cast<unsigned char>(answer[after]));
}

}  // namespace

NeedleText ByteNeedleText() {
  NeedleText text;
  text.encode = [](const std::string& prompt) -> absl::StatusOr<std::vector<int32_t>> {
    std::vector<int32_t> ids = {data::kByteBos};
    const std::vector<int32_t> bytes = data::TextToByteTokens(prompt);
    ids.insert(ids.end(), bytes.begin(), bytes.end());
    return ids;
  };
  text.decode = [](const std::vector<int32_t>& ids) -> absl::StatusOr<std::string> {
    std::string answer;
    for (const int32_t id : ids) {
      if (id < 0 || id >= data::kByteBos) return answer;  // BOS or padding ids end the answer
      answer.push_back(static_cast<char>(id));
    }
    return answer;
  };
  text.answer_tokens = data::kPasskeyDigits;
  text.byte_vocabulary = true;
  return text;
}

absl::StatusOr<NeedleText> TokenizerNeedleText(const data::Tokenizer& tokenizer) {
  NeedleText text;
  text.encode = [&tokenizer](const std::string& prompt) -> absl::StatusOr<std::vector<int32_t>> {
    std::vector<int32_t> ids;
    KELVIN_RETURN_IF_ERROR(tokenizer.Encode(prompt, /*add_special_tokens=*/true, ids));
    return ids;
  };
  text.decode = [&tokenizer](const std::vector<int32_t>& ids) {
    return tokenizer.Decode(ids, /*skip_special_tokens=*/true);
  };
  // A space and five digits: at most 6 tokens in any byte-level BPE; 8 leave room for a stray one.
  text.answer_tokens = 8;
  std::string filler;
  for (int i = 0; i < 20; ++i) filler.append(data::kPasskeyFiller);
  std::vector<int32_t> ids;
  KELVIN_RETURN_IF_ERROR(tokenizer.Encode(filler, /*add_special_tokens=*/false, ids));
  text.bytes_per_token = static_cast<double>(filler.size()) / static_cast<double>(ids.size());
  if (tokenizer.eos_id().has_value()) text.stop_ids.push_back(*tokenizer.eos_id());
  return text;
}

int64_t NeedleAnswerTokens(const NeedleText& text, data::RetrievalTask task) {
  if (task == data::RetrievalTask::kPasskey) return text.answer_tokens;
  // A token is at least a byte, so the answer's bytes bound its tokens; 2 more for a stray space.
  const int64_t bytes = data::RetrievalAnswerBytes(task);
  return text.byte_vocabulary ? bytes : bytes + 2;
}

absl::StatusOr<int64_t> NeedleSampleBytes(const NeedleText& text, int64_t length,
                                          int64_t distractors, data::RetrievalTask task) {
  const bool passkey = task == data::RetrievalTask::kPasskey;
  // The prompt of sample 0 at `bytes`; what the smallest sample's prompt and answer take.
  const auto prompt_of = [&](int64_t bytes) {
    return passkey ? PromptText(data::MakePasskeySample(0, 0, bytes, {}, distractors))
                   : data::MakeRetrievalSample(task, 0, 0, bytes, 0).prompt;
  };
  const int64_t answer_tokens = NeedleAnswerTokens(text, task);
  const int64_t fixed = passkey ? 0 : static_cast<int64_t>(prompt_of(0).size());
  const int64_t least = passkey ? data::MinPasskeySequenceLength(distractors) : 0;
  const auto too_short = [&]() {
    return absl::InvalidArgumentError(absl::StrFormat(
        "needle length %d is too short for the %s task: its needles%s, the question and the "
        "answer need %d tokens (bytes) and more for the filler",
        length, data::RetrievalTaskName(task),
        passkey ? absl::StrFormat(", %d decoys", distractors) : "",
        passkey ? least : fixed + answer_tokens));
  };
  if (text.byte_vocabulary) {
    // BOS and the prompt's bytes, then the answer: length + 1 ids, the last never read back.
    const int64_t bytes = passkey ? length : length - answer_tokens - fixed;
    if (bytes < least) return too_short();
    return bytes;
  }
  // A tokenizer: the filler's rate, corrected by what sample 0's prompt really takes.
  const int64_t budget = length + 1 - answer_tokens;
  int64_t bytes = static_cast<int64_t>(std::floor(budget * text.bytes_per_token)) - fixed;
  for (int attempt = 0; attempt < 4 && bytes >= least; ++attempt) {
    KELVIN_ASSIGN_OR_RETURN(const std::vector<int32_t> ids, text.encode(prompt_of(bytes)));
    const int64_t excess = static_cast<int64_t>(ids.size()) - budget;
    if (excess <= 0 && attempt > 0) return bytes;
    bytes -= static_cast<int64_t>(std::ceil((excess + 2) * text.bytes_per_token));
  }
  if (bytes < least) return too_short();
  return bytes;
}

absl::StatusOr<NeedleAttempt> AttemptNeedle(models::LlamaDecoder& decoder, const NeedleText& text,
                                            const NeedleGridSpec& spec, int64_t sample_bytes,
                                            double depth, int64_t sample) {
  NeedleAttempt attempt;
  std::string prompt;
  std::function<double(const std::string&)> score;  // of the answer's text
  if (spec.task == data::RetrievalTask::kPasskey) {
    const data::PasskeySample passkey =
        data::MakePasskeySample(spec.seed, sample, sample_bytes, {depth, depth}, spec.distractors);
    attempt.depth = passkey.depth;
    prompt = PromptText(passkey);
    score = [key = passkey.key](const std::string& answer) {
      return AnswerIsKey(answer, key) ? 1.0 : 0.0;
    };
  } else {
    data::RetrievalSample task_sample =
        data::MakeRetrievalSample(spec.task, spec.seed, sample, sample_bytes, depth);
    attempt.depth = task_sample.depth;
    prompt = std::move(task_sample.prompt);
    score = [answers = std::move(task_sample.answers)](const std::string& answer) {
      return data::ScoreRetrievalAnswer(answer, answers);
    };
  }
  KELVIN_ASSIGN_OR_RETURN(attempt.prompt, text.encode(prompt));
  GenerationRequest request;
  request.prompt = attempt.prompt;
  request.max_new_tokens = NeedleAnswerTokens(text, spec.task);
  request.stop_ids = text.stop_ids;
  KELVIN_ASSIGN_OR_RETURN(const GenerationResult result, Generate(decoder, request));
  attempt.generated = result.tokens;
  KELVIN_ASSIGN_OR_RETURN(const std::string answer, text.decode(result.tokens));
  attempt.score = score(answer);
  attempt.retrieved = attempt.score == 1.0;
  return attempt;
}

absl::StatusOr<std::vector<NeedleCell>> RunNeedleGrid(
    models::LlamaDecoder& decoder, const NeedleText& text, const NeedleGridSpec& spec,
    const std::function<void(const NeedleCell&)>& progress) {
  if (spec.lengths.empty() || spec.depths.empty() || spec.samples < 1) {
    return absl::InvalidArgumentError("the needle grid needs lengths, depths and samples >= 1");
  }
  for (const double depth : spec.depths) {
    if (!(depth >= 0 && depth <= 1)) {
      return absl::InvalidArgumentError(
          absl::StrCat("needle depth ", depth, " is not in [0, 1] (a fraction of the filler)"));
    }
  }
  std::vector<NeedleCell> cells;
  for (const int64_t length : spec.lengths) {
    KELVIN_ASSIGN_OR_RETURN(const int64_t bytes,
                            NeedleSampleBytes(text, length, spec.distractors, spec.task));
    for (const double depth : spec.depths) {
      NeedleCell cell{.length = length, .depth = depth, .samples = spec.samples};
      double depth_sum = 0, prompt_tokens = 0, score_sum = 0;
      for (int64_t j = 0; j < spec.samples; ++j) {
        KELVIN_ASSIGN_OR_RETURN(const NeedleAttempt attempt,
                                AttemptNeedle(decoder, text, spec, bytes, depth, j));
        cell.retrieved += attempt.retrieved ? 1 : 0;
        score_sum += attempt.score;
        depth_sum += attempt.depth;
        prompt_tokens += static_cast<double>(attempt.prompt.size());
      }
      cell.mean_score = score_sum / static_cast<double>(spec.samples);
      cell.mean_depth = depth_sum / static_cast<double>(spec.samples);
      cell.mean_prompt_tokens = prompt_tokens / static_cast<double>(spec.samples);
      if (progress) progress(cell);
      cells.push_back(cell);
    }
  }
  return cells;
}

}  // namespace kelvin::inference
