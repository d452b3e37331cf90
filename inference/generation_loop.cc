// The generation loop over LlamaDecoder::AppendBatch: each step the logits of every running
// sequence's last token, copied to the host (in f32 from a bf16 device) for the samplers, which
// run in parallel over the sequences.
#include "inference/generation_loop.h"

#include <algorithm>
#include <chrono>

#include "absl/strings/str_cat.h"
#include "core/copy.h"
#include "core/ops/elementwise.h"

namespace kelvin::inference {
namespace {

// logits [S, V] of the model's dtype and device -> a host tensor the samplers read (f32 or f64):
// one copy per step, widened on the host from bf16.
Tensor HostLogits(const Context& ctx, const Tensor& logits) {
  const Tensor host = logits.is_cpu() ? logits : CopyToDevice(ctx, logits, Device::Cpu());
  if (host.dtype() != DType::kBF16) return host;
  Tensor wide = Tensor::Empty(host.shape(), DType::kF32);
  ops::Cast(Context::Cpu(), host, wide);
  return wide;
}

}  // namespace

absl::StatusOr<GenerationResult> Generate(models::LlamaDecoder& decoder,
                                          const GenerationRequest& request) {
  KELVIN_ASSIGN_OR_RETURN(std::vector<GenerationResult> results, GenerateBatch(decoder, {request}));
  return std::move(results.front());
}

absl::StatusOr<std::vector<GenerationResult>> GenerateBatch(
    models::LlamaDecoder& decoder, const std::vector<GenerationRequest>& requests,
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
    if (request.max_new_tokens < 1 || request.max_new_tokens > kMaxNewTokens) {
      return absl::InvalidArgumentError(absl::StrCat("--max-new-tokens ", request.max_new_tokens,
                                                     ": must be in [1, ", kMaxNewTokens, "]"));
    }
    // The last new token is never read back: the prompt and max_new_tokens - 1 take positions.
    if (prompt + request.max_new_tokens - 1 > decoder.max_tokens()) {
      return absl::InvalidArgumentError(
          absl::StrCat("a prompt of ", prompt, " tokens and --max-new-tokens ",
                       request.max_new_tokens, " do not fit the model's ", decoder.max_tokens(),
                       " positions: give a shorter prompt or fewer new tokens"));
    }
    samplers.emplace_back(request.sampling, request.allowed);
  }
  decoder.Reset();
  std::vector<GenerationResult> results(count);
  std::vector<std::vector<int32_t>> next(decoder.sequences());  // empty: finished or unused
  for (int64_t b = 0; b < count; ++b) next[b] = requests[b].prompt;
  for (bool prefill = true;; prefill = false) {
    const auto start = std::chrono::steady_clock::now();
    int64_t appended = 0;
    for (const std::vector<int32_t>& tokens : next) appended += static_cast<int64_t>(tokens.size());
    // [S, V]: the last appended token's logits of each of the S sequences given tokens, in order.
    KELVIN_ASSIGN_OR_RETURN(const Tensor logits, decoder.AppendBatch(next, /*logit_rows=*/1));
    const Tensor host = HostLogits(decoder.context(), logits);
    // Row r samples for request given[r]; the rows in parallel (each a pass over the whole
    // vocabulary; each sampler draws from its own stream, so the threads change no token).
    std::vector<int64_t> given;
    for (int64_t b = 0; b < count; ++b) {
      if (!next[b].empty()) given.push_back(b);
    }
    const int64_t rows = static_cast<int64_t>(given.size());
    std::vector<SampledToken> sampled(given.size());
    // Threads only where the passes outweigh starting them (a large vocabulary, several rows).
    constexpr int64_t kParallelElements = int64_t{1} << 18;
    const bool parallel = rows > 1 && rows * host.dim(1) >= kParallelElements;
#pragma omp parallel for schedule(static) if (parallel)
    for (int64_t r = 0; r < rows; ++r) {
      sampled[r] = samplers[given[r]].Next(host.Slice(r, r + 1).View({-1}));
    }
    int64_t running = 0;
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t b = given[r];
      const SampledToken& token = sampled[r];
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

}  // namespace kelvin::inference
