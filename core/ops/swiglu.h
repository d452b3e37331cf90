// SwiGLU activation of the Llama MLP: out = silu(gate) * up, silu(g) = g * sigmoid(g), and its
// backward. N rows (tokens), F ffn features. CPU: f32, f64. CUDA: f32, bf16 (computed in f32; for
// bf16 silu(gate) is rounded to bf16 before the multiply, as Hugging Face's act_fn(gate) * up is).
// gate and up may be views (Slice) of one buffer.
#pragma once

#include "core/context.h"
#include "core/tensor.h"

namespace kelvin::ops {

// gate [N, F], up [N, F] -> out [N, F] (all one dtype); out may be gate or up.
void SwiGluForward(const Context& ctx, const Tensor& gate, const Tensor& up, Tensor& out);

// dout [N, F], gate [N, F], up [N, F] -> dgate [N, F], dup [N, F] (written, distinct tensors; each
// may be one of dout, gate, up: every element's inputs are read before its outputs are written).
void SwiGluBackward(const Context& ctx, const Tensor& dout, const Tensor& gate, const Tensor& up,
                    Tensor& dgate, Tensor& dup);

// Backends behind the dispatchers above (arguments already checked).
namespace cpu {
void SwiGluForward(const Tensor& gate, const Tensor& up, Tensor& out);
void SwiGluBackward(const Tensor& dout, const Tensor& gate, const Tensor& up, Tensor& dgate,
                    Tensor& dup);
}  // namespace cpu
namespace cuda {
void SwiGluForward(const Context& ctx, const Tensor& gate, const Tensor& up, Tensor& out);
void SwiGluBackward(const Context& ctx, const Tensor& dout, const Tensor& gate, const Tensor& up,
                    Tensor& dgate, Tensor& dup);
}  // namespace cuda

}  // namespace kelvin::ops
