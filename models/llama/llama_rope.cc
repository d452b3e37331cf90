// The RoPE inverse frequencies per forward call (llama_rope.h).
#include "models/llama/llama_rope.h"

#include "core/copy.h"

namespace kelvin::models {

LlamaRopeFrequencies::LlamaRopeFrequencies(const ops::RopeConfig& rope, int64_t head_dim,
                                           DType dtype, const Context& ctx)
    : rope_(rope), head_dim_(head_dim), accum_(AccumDType(dtype)) {
  within_ = CopyToDevice(ctx, ops::RopeInverseFrequencies(rope, head_dim, accum_), ctx.device());
  if (rope.type == ops::RopeType::kLongrope) {
    long_ = CopyToDevice(ctx, ops::RopeInverseFrequencies(rope, head_dim, accum_, /*long=*/true),
                         ctx.device());
  }
}

Tensor LlamaRopeFrequencies::ForCall(const Context& ctx, int64_t max_position) const {
  if (!ops::RopeScalesCall(rope_, max_position)) return within_;
  if (long_.defined()) return long_;
  return CopyToDevice(ctx, ops::RopeCallInverseFrequencies(rope_, head_dim_, accum_, max_position),
                      ctx.device());
}

}  // namespace kelvin::models
