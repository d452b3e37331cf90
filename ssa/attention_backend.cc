// AUTO's choice between the attention cores and their names (ssa/attention_backend.h).
#include "ssa/attention_backend.h"

namespace kelvin::ssa {

std::string_view AttentionBackendName(AttentionBackend backend) {
  switch (backend) {
    case AttentionBackend::kAuto:
      return "AUTO";
    case AttentionBackend::kFused:
      return "FUSED";
    case AttentionBackend::kCudnn:
      return "CUDNN";
  }
  return "?";
}

std::string_view AttentionCoreName(AttentionCore core) {
  return core == AttentionCore::kCudnn ? "cuDNN" : "fused";
}

bool CudnnCoreBuilt() { return KELVIN_WITH_CUDNN; }

AttentionCore ChooseAttentionCore(const CoreTimings& timings) {
  return timings.cudnn_ms.has_value() && *timings.cudnn_ms < timings.fused_ms
             ? AttentionCore::kCudnn
             : AttentionCore::kFused;
}

}  // namespace kelvin::ssa
