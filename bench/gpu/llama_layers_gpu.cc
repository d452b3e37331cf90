// Training-step throughput of Kelvin's Llama on one GPU: a Llama-3-8B-shaped model cut to a few
// decoder layers, bf16 with f32 master weights, SSA on and off in the same run, on one attention
// core. Prints one JSON line per variant with the step time, tokens/s, achieved TFLOP/s and MFU.
// Usage: llama_layers_gpu [layers] [batch] [seq] [timed_steps] [fused|cudnn|auto]
#include <cstdio>
#include <cstdlib>
#include <string>

#include "bench/gpu/cuda_event_timer.h"
#include "bench/synthetic_llama_batch.h"
#include "bench/throughput_init.h"
#include "core/copy.h"
#include "core/ops/cross_entropy.h"
#include "core/optim/adamw_optimizer.h"
#include "models/llama/llama_model.h"
#include "models/llama/model_flops.h"
#include "ssa/ssa_attention.h"

namespace kelvin {
namespace {

// MFU = achieved / this (H100/H200 SXM dense bf16 peak). FLOPs: models::TrainingFlopsPerToken (the
// Megatron/PaLM model-FLOPs count, "model_flops" in the output) x B*T tokens; the SSA
// temperatures' extra work is not counted, so SSA's MFU is comparable with vanilla's.
constexpr double kPeakBf16Flops = 989.4e12;

// `layers` decoder layers (embedding, final norm and the 128K-vocabulary LM head included), B x T
// tokens; one step = forward, fused cross-entropy, backward and the AdamW update. SSA runs the
// default temperatures (weight-shared). Weights: bench::InitForThroughput (uniform, std 0.02; the
// values do not change the work).
int Run(int64_t layers, int64_t batch, int64_t seq, int timed_steps,
        ssa::AttentionBackend backend) {
  if (!CudaAvailable()) {
    std::fprintf(stderr, "no CUDA device: %s\n", CudaUnavailableReason().c_str());
    return 2;
  }
  const Context ctx = Context::Cuda(0);
  if (backend == ssa::AttentionBackend::kCudnn) {
    const std::string unavailable = ssa::CudnnCoreUnavailableReason(ctx);
    if (!unavailable.empty()) {
      std::fprintf(stderr, "llama_layers_gpu: the cuDNN core cannot run: %s\n",
                   unavailable.c_str());
      return 2;
    }
  }
  for (const bool ssa : {true, false}) {
    absl::StatusOr<models::LlamaConfig> config = models::LlamaPreset("llama3-8b");
    if (!config.ok()) return 2;
    config->num_layers = layers;
    if (ssa) config->ssa = ssa::SsaOptions();
    models::LlamaModel model(*config, DType::kBF16, {}, {},
                             {.ctx = ctx, .attention_backend = backend});
    bench::InitForThroughput(model);  // InitRandom would take over a minute here
    AdamWOptimizer optimizer(model.parameters(), AdamWSettings{});
    const bench::SyntheticLlamaBatch data =
        bench::MakeSyntheticLlamaBatch(batch, seq, config->vocab_size);
    const Tensor device_labels = CopyToDevice(ctx, data.labels, ctx.device());
    Tensor token_loss = Tensor::Empty({batch * seq}, DType::kF32, ctx.device());  // [B*T]
    auto step = [&] {
      model.parameters().ZeroGrads();
      Tensor& logits = model.Forward(ctx, data.tokens, data.positions);
      ops::SoftmaxCrossEntropy(ctx, logits, device_labels, 1.0 / static_cast<double>(batch * seq),
                               token_loss);
      model.Backward(ctx, logits);
      optimizer.Step(ctx, 1e-5);
    };
    const double ms = bench::MeanCudaMs(ctx, 2, timed_steps, step);
    const double flops =
        models::TrainingFlopsPerToken(*config, seq) * static_cast<double>(batch * seq);
    const double achieved = flops / (ms * 1e-3);
    std::printf(
        "{\"impl\": \"kelvin_%s\", \"backend\": \"%s\", \"layers\": %lld, \"batch\": %lld, "
        "\"seq\": %lld, "
        "\"step_ms\": %.2f, \"tokens_per_s\": %.0f, \"model_flops\": %.4g, \"tflops\": %.1f, "
        "\"mfu\": %.4f}\n",
        ssa ? "ssa" : "vanilla", std::string(ssa::AttentionBackendName(backend)).c_str(),
        static_cast<long long>(layers), static_cast<long long>(batch), static_cast<long long>(seq),
        ms, static_cast<double>(batch * seq) / (ms * 1e-3), flops, achieved / 1e12,
        achieved / kPeakBf16Flops);
    std::fflush(stdout);
  }
  return 0;
}

}  // namespace
}  // namespace kelvin

// Defaults: 2 layers, batch 1, 8192 tokens, 5 timed steps, Kelvin's fused attention kernel.
int main(int argc, char** argv) {
  const int64_t layers = argc > 1 ? std::atoll(argv[1]) : 2;
  const int64_t batch = argc > 2 ? std::atoll(argv[2]) : 1;
  const int64_t seq = argc > 3 ? std::atoll(argv[3]) : 8192;
  const int timed_steps = argc > 4 ? std::atoi(argv[4]) : 5;
  const std::string core = argc > 5 ? argv[5] : "fused";
  kelvin::ssa::AttentionBackend backend = kelvin::ssa::AttentionBackend::kFused;
  if (core == "cudnn") {
    backend = kelvin::ssa::AttentionBackend::kCudnn;
  } else if (core == "auto") {
    backend = kelvin::ssa::AttentionBackend::kAuto;
  } else if (core != "fused") {
    std::fprintf(stderr, "llama_layers_gpu: attention core '%s': expected fused, cudnn or auto\n",
                 core.c_str());
    return 2;
  }
  return kelvin::Run(layers, batch, seq, timed_steps, backend);
}
