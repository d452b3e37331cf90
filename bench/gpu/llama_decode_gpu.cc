// Decode throughput of Kelvin's KV-cache decoder on one GPU: a Llama-3-8B-shaped model cut to a
// few decoder layers (the 128K-vocabulary embedding and LM head kept), bf16, SSA on and off, at
// batch 1 and 8: greedy generation through inference::GenerateBatch, what `kelvin generate` runs
// (the decoder, each step's logits copied to the host and sampled there). Prints one JSON line per
// variant and batch; bench/gpu/torch_decode.py times torch on the same shapes.
// Usage: llama_decode_gpu [layers] [prompt_tokens] [new_tokens]
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "bench/throughput_init.h"
#include "inference/generation_loop.h"
#include "models/llama/llama_decoder.h"
#include "models/llama/llama_model.h"

namespace kelvin {
namespace {

// `batch` prompts of `prompt` token ids spread over the vocabulary, each to `new_tokens` greedy
// tokens (no stop id: every sequence runs its whole budget).
std::vector<inference::GenerationRequest> Requests(int64_t batch, int64_t prompt,
                                                   int64_t new_tokens, int64_t vocab) {
  std::vector<inference::GenerationRequest> requests(static_cast<size_t>(batch));
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t t = 0; t < prompt; ++t) {
      requests[b].prompt.push_back(static_cast<int32_t>(((b * prompt + t) * 7919) % vocab));
    }
    requests[b].max_new_tokens = new_tokens;
  }
  return requests;
}

// Decode tokens/s counts the steps after the prefill (GenerationTiming: every token after each
// sequence's first, the decoder call, the host copy of the logits and the sampling); one untimed
// generation first (cuBLASLt's heuristics, the allocator's cache).
int Run(int64_t layers, int64_t prompt, int64_t new_tokens) {
  if (!CudaAvailable()) {
    std::fprintf(stderr, "no CUDA device: %s\n", CudaUnavailableReason().c_str());
    return 2;
  }
  const Context ctx = Context::Cuda(0);
  for (const bool ssa : {true, false}) {
    absl::StatusOr<models::LlamaConfig> config = models::LlamaPreset("llama3-8b");
    if (!config.ok()) return 2;
    config->num_layers = layers;
    if (ssa) config->ssa = ssa::SsaOptions();
    models::LlamaModel model(*config, DType::kBF16, {}, {}, {.ctx = ctx});
    bench::InitForThroughput(model);
    for (const int64_t batch : {1, 8}) {
      absl::StatusOr<models::LlamaDecoder> decoder =
          models::LlamaDecoder::Create(model, prompt + new_tokens, batch);
      if (!decoder.ok()) {
        std::fprintf(stderr, "%s\n", decoder.status().ToString().c_str());
        return 2;
      }
      const std::vector<inference::GenerationRequest> requests =
          Requests(batch, prompt, new_tokens, config->vocab_size);
      inference::GenerationTiming timing;
      for (inference::GenerationTiming* timed :
           {static_cast<inference::GenerationTiming*>(nullptr), &timing}) {
        const absl::StatusOr<std::vector<inference::GenerationResult>> results =
            inference::GenerateBatch(*decoder, requests, timed);
        if (!results.ok()) {
          std::fprintf(stderr, "%s\n", results.status().ToString().c_str());
          return 2;
        }
      }
      const double steps = static_cast<double>(new_tokens - 1);
      std::printf(
          "{\"impl\": \"kelvin_%s\", \"layers\": %lld, \"batch\": %lld, \"prompt\": %lld, "
          "\"new_tokens\": %lld, \"prefill_ms\": %.2f, \"decode_ms_per_step\": %.3f, "
          "\"decode_tokens_per_s\": %.1f}\n",
          ssa ? "ssa" : "vanilla", static_cast<long long>(layers), static_cast<long long>(batch),
          static_cast<long long>(prompt), static_cast<long long>(new_tokens),
          timing.prefill_seconds * 1e3, timing.decode_seconds * 1e3 / steps,
          static_cast<double>(timing.decoded_tokens) / timing.decode_seconds);
      std::fflush(stdout);
    }
  }
  return 0;
}

}  // namespace
}  // namespace kelvin

// Defaults: 2 layers, prompts of 128 tokens, 128 new tokens each.
int main(int argc, char** argv) {
  const int64_t layers = argc > 1 ? std::atoll(argv[1]) : 2;
  const int64_t prompt = argc > 2 ? std::atoll(argv[2]) : 128;
  const int64_t new_tokens = argc > 3 ? std::atoll(argv[3]) : 128;
  return kelvin::Run(layers, prompt, new_tokens);
}
