// Passkey prompts through the greedy generation loop, cell by cell.
#include "training/needle_grid.h"

#include <algorithm>
#include <cctype>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "models/generation/generate.h"

namespace kelvin::training {
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

absl::StatusOr<int64_t> NeedleSampleBytes(const NeedleText& text, int64_t length,
                                          int64_t distractors) {
  const int64_t least = data::MinPasskeySequenceLength(distractors);
  const auto too_short = [&]() {
    return absl::InvalidArgumentError(absl::StrFormat(
        "needle length %d is too short: the key sentence, %d decoys, the question and the answer "
        "need %d tokens (bytes) and more for the filler",
        length, distractors, least));
  };
  if (text.byte_vocabulary) {
    if (length < least) return too_short();
    return length;
  }
  // A tokenizer: the filler's rate, corrected by what sample 0's prompt really takes.
  const int64_t budget = length + 1 - text.answer_tokens;
  int64_t bytes = static_cast<int64_t>(std::floor(budget * text.bytes_per_token));
  for (int attempt = 0; attempt < 4 && bytes >= least; ++attempt) {
    KELVIN_ASSIGN_OR_RETURN(
        const std::vector<int32_t> ids,
        text.encode(PromptText(data::MakePasskeySample(0, 0, bytes, {}, distractors))));
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
  const data::PasskeySample passkey =
      data::MakePasskeySample(spec.seed, sample, sample_bytes, {depth, depth}, spec.distractors);
  NeedleAttempt attempt;
  attempt.depth = passkey.depth;
  KELVIN_ASSIGN_OR_RETURN(attempt.prompt, text.encode(PromptText(passkey)));
  models::GenerationRequest request;
  request.prompt = attempt.prompt;
  request.max_new_tokens = text.answer_tokens;
  request.stop_ids = text.stop_ids;
  KELVIN_ASSIGN_OR_RETURN(const models::GenerationResult result,
                          models::Generate(decoder, request));
  attempt.generated = result.tokens;
  KELVIN_ASSIGN_OR_RETURN(const std::string answer, text.decode(result.tokens));
  attempt.retrieved = AnswerIsKey(answer, passkey.key);
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
    KELVIN_ASSIGN_OR_RETURN(const int64_t bytes, NeedleSampleBytes(text, length, spec.distractors));
    for (const double depth : spec.depths) {
      NeedleCell cell{.length = length, .depth = depth, .samples = spec.samples};
      double depth_sum = 0, prompt_tokens = 0;
      for (int64_t j = 0; j < spec.samples; ++j) {
        KELVIN_ASSIGN_OR_RETURN(const NeedleAttempt attempt,
                                AttemptNeedle(decoder, text, spec, bytes, depth, j));
        cell.retrieved += attempt.retrieved ? 1 : 0;
        depth_sum += attempt.depth;
        prompt_tokens += static_cast<double>(attempt.prompt.size());
      }
      cell.mean_depth = depth_sum / static_cast<double>(spec.samples);
      cell.mean_prompt_tokens = prompt_tokens / static_cast<double>(spec.samples);
      if (progress) progress(cell);
      cells.push_back(cell);
    }
  }
  return cells;
}

}  // namespace kelvin::training
