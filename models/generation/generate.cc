// The generation loop over LlamaDecoder::AppendBatch, logits copied to the host for the samplers.
#include "models/generation/generate.h"

#include <algorithm>
#include <chrono>

#include "absl/strings/str_cat.h"
#include "core/copy.h"

namespace kelvin::models {

absl::StatusOr<GenerationResult> Generate(LlamaDecoder& decoder, const GenerationRequest& request) {
  KELVIN_ASSIGN_OR_RETURN(std::vector<GenerationResult> results, GenerateBatch(decoder, {request}));
  return std::move(results.front());
}

absl::StatusOr<std::vector<GenerationResult>> GenerateBatch(
    LlamaDecoder& decoder, const std::vector<GenerationRequest>& requests,
    GenerationTiming* timing) {
  const int64_t count = static_cast<int64_t>(requests.size());
  if (count == 0 || count > decoder.sequences()) {
    return absl::InvalidArgumentError(
        absl::StrCat(count, " requests for a decoder of ", decoder.sequences(), " sequences"));
  }
  std::vector<TokenSampler> samplers;
  for (const GenerationRequest& request : requests) {
    KELVIN_RETURN_IF_ERROR(ValidateSamplingOptions(request.sampling));
    const int64_t prompt = static_cast<int64_t>(request.prompt.size());
    if (prompt == 0) return absl::InvalidArgumentError("the prompt has no tokens");
    // The last new token is never read back: the prompt and max_new_tokens - 1 take positions.
    if (request.max_new_tokens < 1 || prompt + request.max_new_tokens - 1 > decoder.max_tokens()) {
      return absl::InvalidArgumentError(
          absl::StrCat("a prompt of ", prompt, " tokens and --max-new-tokens ",
                       request.max_new_tokens, " do not fit the model's ", decoder.max_tokens(),
                       " positions: give a shorter prompt or fewer new tokens (>= 1)"));
    }
    samplers.emplace_back(request.sampling);
  }
  decoder.Reset();
  std::vector<GenerationResult> results(count);
  std::vector<std::vector<int32_t>> next(decoder.sequences());  // empty: finished or unused
  for (int64_t b = 0; b < count; ++b) next[b] = requests[b].prompt;
  for (bool prefill = true;; prefill = false) {
    const auto start = std::chrono::steady_clock::now();
    int64_t appended = 0;
    for (const std::vector<int32_t>& tokens : next) appended += static_cast<int64_t>(tokens.size());
    KELVIN_ASSIGN_OR_RETURN(const Tensor logits, decoder.AppendBatch(next));
    const Tensor host =
        logits.is_cpu() ? logits : CopyToDevice(decoder.context(), logits, Device::Cpu());
    int64_t row = 0, running = 0;
    for (int64_t b = 0; b < count; ++b) {
      if (next[b].empty()) continue;
      row += static_cast<int64_t>(next[b].size());  // this request's last row is row - 1
      const SampledToken token = samplers[b].Next(host.Slice(row - 1, row).View({-1}));
      const GenerationRequest& request = requests[b];
      GenerationResult& result = results[b];
      result.tokens.push_back(token.token);
      result.logprobs.push_back(token.logprob);
      if (std::find(request.stop_ids.begin(), request.stop_ids.end(), token.token) !=
          request.stop_ids.end()) {
        result.finish_reason = "eos";
      } else if (request.stop_after && request.stop_after(result.tokens)) {
        result.finish_reason = "stop";
      } else if (static_cast<int64_t>(result.tokens.size()) == request.max_new_tokens) {
        result.finish_reason = "length";
      }
      next[b] =
          result.finish_reason.empty() ? std::vector<int32_t>{token.token} : std::vector<int32_t>();
      running += next[b].empty() ? 0 : 1;
    }
    if (timing != nullptr) {
      const double seconds =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      (prefill ? timing->prefill_seconds : timing->decode_seconds) += seconds;
      (prefill ? timing->prompt_tokens : timing->decoded_tokens) += appended;
    }
    if (running == 0) return results;
  }
}

}  // namespace kelvin::models
