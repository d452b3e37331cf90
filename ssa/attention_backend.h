// Which core computes the SSA operator's causal GQA attention on CUDA between the temperature/RoPE
// pass and its adjoint (docs/design.md, "Attention on a GPU"): Kelvin's own fused kernel or cuDNN's
// fused flash attention; the choice a caller asks for (model.attention_backend) and AUTO's rule
// for picking one from timings of both.
#pragma once

#include <optional>
#include <string_view>

namespace kelvin::ssa {

// What the caller asks for. FUSED is the operator's default (every caller that does not say).
enum class AttentionBackend { kAuto, kFused, kCudnn };

// What runs a call.
enum class AttentionCore { kFused, kCudnn };

std::string_view AttentionBackendName(AttentionBackend backend);  // "AUTO", "FUSED", "CUDNN"
std::string_view AttentionCoreName(AttentionCore core);           // "fused", "cuDNN"

// Whether this build has the cuDNN core (CMake's KELVIN_CUDNN resolved on). Whether it can run
// here is ssa::CudnnCoreUnavailableReason's answer (ssa_attention.h).
bool CudnnCoreBuilt();

// AUTO's measurements of one shape: mean milliseconds of one forward + backward of each core on
// the device (cuDNN's absent when it cannot run the shape).
struct CoreTimings {
  double fused_ms = 0;
  std::optional<double> cudnn_ms;
};

// The faster core; the own kernel on a tie or without a cuDNN time.
AttentionCore ChooseAttentionCore(const CoreTimings& timings);

}  // namespace kelvin::ssa
