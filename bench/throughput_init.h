// A fast stand-in for LlamaModel::InitRandom in the throughput benchmarks, whose values do not
// change the work timed. Not for anything whose numbers matter.
#pragma once

#include <cmath>
#include <cstdint>

#include "core/tensor.h"
#include "models/llama/llama_model.h"

namespace kelvin::bench {

// InitRandom draws every matrix from a Mersenne-Twister normal stream per tensor (layout
// independent, but about 40 ns a value: over a minute for the 128K-vocabulary embedding and head of
// a Llama-3-8B-shaped model, on device time). Here every matrix gets an LCG's uniform values of the
// same standard deviation (0.02), the norms 1 and SSA its fine-tuning start (InitSsaParameters).
inline void InitForThroughput(models::LlamaModel& model) {
  ParameterSet& params = model.parameters();
  const float half_width = 0.02f * std::sqrt(3.0f);  // uniform(-w, w) has std w / sqrt(3)
  uint32_t state = 1;
  for (const ParameterSet::Entry& e : params.entries()) {
    Tensor host = Tensor::Empty(e.master.shape(), DType::kF32);  // shaped like the parameter
    float* data = host.data<float>();
    for (int64_t i = 0; i < host.numel(); ++i) {
      state = state * 1664525u + 1013904223u;
      data[i] = e.group == ParamGroup::kNoDecay
                    ? 1.0f
                    : half_width * (static_cast<float>(state >> 8) / 8388608.0f - 1.0f);
    }
    params.Assign(e.name, host);
  }
  model.InitSsaParameters();
  params.SyncModelCopy();
}

}  // namespace kelvin::bench
