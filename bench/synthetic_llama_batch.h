// A deterministic synthetic training batch for the Llama throughput benchmarks: B rows of T
// tokens, one document per row, tokens and labels spread over the vocabulary by two primes.
#pragma once

#include <cstdint>

#include "core/tensor.h"

namespace kelvin::bench {

struct SyntheticLlamaBatch {
  Tensor tokens;     // [B, T] i32
  Tensor positions;  // [B, T] i32: 0..T-1 in every row
  Tensor labels;     // [B*T] i32
};

inline SyntheticLlamaBatch MakeSyntheticLlamaBatch(int64_t batch, int64_t seq, int64_t vocab) {
  SyntheticLlamaBatch b{Tensor::Empty({batch, seq}, DType::kI32),
                        Tensor::Empty({batch, seq}, DType::kI32),
                        Tensor::Empty({batch * seq}, DType::kI32)};
  for (int64_t i = 0; i < batch * seq; ++i) {
    b.tokens.data<int32_t>()[i] = static_cast<int32_t>((i * 7919) % vocab);
    b.labels.data<int32_t>()[i] = static_cast<int32_t>((i * 104729 + 1) % vocab);
    b.positions.data<int32_t>()[i] = static_cast<int32_t>(i % seq);
  }
  return b;
}

}  // namespace kelvin::bench
