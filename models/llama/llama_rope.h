// LlamaRopeFrequencies: the RoPE inverse frequencies each forward call of a model uses, one rule
// for the training model (per micro-batch) and the KV-cache decoder (per append): fixed for most
// scalings; LongRoPE's short or long factors and dynamic NTK's raised base picked from the call's
// largest position id, as transformers picks them per forward call.
#pragma once

#include <cstdint>

#include "core/context.h"
#include "core/ops/rope.h"
#include "core/tensor.h"

namespace kelvin::models {

class LlamaRopeFrequencies {
 public:
  // `dtype`: the activations' (the frequencies are in its AccumDType, on ctx's device).
  LlamaRopeFrequencies(const ops::RopeConfig& rope, int64_t head_dim, DType dtype,
                       const Context& ctx);

  // Whether ForCall reads its argument (the call's largest position id must then be found).
  bool DependsOnCall() const { return ops::RopeDependsOnCall(rope_); }
  // [d/2] for a call whose largest position id is `max_position`: a tensor held here, or for
  // dynamic NTK beyond the original length one made for the call (a host-to-device copy on CUDA).
  Tensor ForCall(const Context& ctx, int64_t max_position) const;

 private:
  ops::RopeConfig rope_;
  int64_t head_dim_;
  DType accum_;
  Tensor within_;  // [d/2] the frequencies of a call within the original length (every call's
                   // for the types that do not depend on the call)
  Tensor long_;    // [d/2] LongRoPE's long factors' (undefined for the other types)
};

}  // namespace kelvin::models
