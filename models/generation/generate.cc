// The generation loop over LlamaDecoder::Append, logits copied to the host for the sampler.
#include "models/generation/generate.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "core/copy.h"

namespace kelvin::models {

absl::StatusOr<GenerationResult> Generate(LlamaDecoder& decoder, const GenerationRequest& request) {
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
  decoder.Reset();
  TokenSampler sampler(request.sampling);
  GenerationResult result;
  std::vector<int32_t> next = request.prompt;
  while (true) {
    KELVIN_ASSIGN_OR_RETURN(const Tensor logits, decoder.Append(next));
    const Tensor last = logits.Slice(logits.dim(0) - 1, logits.dim(0)).View({-1});
    const Tensor host = last.is_cpu() ? last : CopyToDevice(decoder.context(), last, Device::Cpu());
    const SampledToken token = sampler.Next(host);
    result.tokens.push_back(token.token);
    result.logprobs.push_back(token.logprob);
    if (std::find(request.stop_ids.begin(), request.stop_ids.end(), token.token) !=
        request.stop_ids.end()) {
      result.finish_reason = "eos";
      break;
    }
    if (request.stop_after && request.stop_after(result.tokens)) {
      result.finish_reason = "stop";
      break;
    }
    if (static_cast<int64_t>(result.tokens.size()) == request.max_new_tokens) {
      result.finish_reason = "length";
      break;
    }
    next = {token.token};
  }
  return result;
}

}  // namespace kelvin::models
