// Training throughput of Kelvin's Llama on the CPU: forward, fused cross-entropy, backward and an
// AdamW step of a built-in preset (default small-25m: hidden 512, 8 layers, 8/4 heads, FFN 1536,
// vocab 8192) at f32, B rows x T tokens. Prints one JSON line {"tokens_per_s": ...} for
// bench/llama_cpu_vs_torch.sh, which runs the PyTorch baseline on the same shape.
// Usage: llama_train_tokens [preset] [batch] [seq] [timed_steps]
#include <omp.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "bench/synthetic_llama_batch.h"
#include "core/ops/cross_entropy.h"
#include "core/optim/adamw_optimizer.h"
#include "models/llama/llama_model.h"

namespace kelvin {
namespace {

int Run(const std::string& preset, int64_t batch, int64_t seq, int timed_steps) {
  absl::StatusOr<models::LlamaConfig> config = models::LlamaPreset(preset);
  if (!config.ok()) {
    std::fprintf(stderr, "%s\n", std::string(config.status().message()).c_str());
    return 2;
  }
  models::LlamaModel model(*config, DType::kF32);
  model.InitRandom(1);
  AdamWOptimizer optimizer(model.parameters(), AdamWSettings{});
  const Context ctx = Context::Cpu();
  const bench::SyntheticLlamaBatch data =
      bench::MakeSyntheticLlamaBatch(batch, seq, config->vocab_size);
  Tensor token_loss = Tensor::Empty({batch * seq}, DType::kF32);  // [B*T]
  auto step = [&] {
    model.parameters().ZeroGrads();
    Tensor& logits = model.Forward(ctx, data.tokens, data.positions);
    ops::SoftmaxCrossEntropy(ctx, logits, data.labels, 1.0 / static_cast<double>(batch * seq),
                             token_loss);
    model.Backward(ctx, logits);
    optimizer.Step(ctx, 1e-4);
  };
  step();  // warm-up: allocations, OpenBLAS buffers
  step();
  const auto start = std::chrono::steady_clock::now();
  for (int s = 0; s < timed_steps; ++s) step();
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf(
      "{\"impl\": \"kelvin\", \"preset\": \"%s\", \"batch\": %lld, \"seq\": %lld, \"threads\": %d, "
      "\"parameters\": %lld, \"tokens_per_s\": %.1f}\n",
      preset.c_str(), static_cast<long long>(batch), static_cast<long long>(seq),
      omp_get_max_threads(), static_cast<long long>(model.parameters().NumElements()),
      static_cast<double>(batch * seq * timed_steps) / seconds);
  return 0;
}

}  // namespace
}  // namespace kelvin

int main(int argc, char** argv) {
  const std::string preset = argc > 1 ? argv[1] : "small-25m";
  const int64_t batch = argc > 2 ? std::atoll(argv[2]) : 4;
  const int64_t seq = argc > 3 ? std::atoll(argv[3]) : 512;
  const int timed_steps = argc > 4 ? std::atoi(argv[4]) : 5;
  return kelvin::Run(preset, batch, seq, timed_steps);
}
