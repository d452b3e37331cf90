// Greedy generations of one model on two devices (f32 on the CPU, bf16 on CUDA) compared where
// bf16 rounding allows: the same tokens until the first step at which the f32 logits' top two are
// within what an error inside the bf16 tolerance can swap; there the runs may part.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "models/llama/llama_model.h"
#include "tests/testing/tensors.h"
#include "tests/testing/tolerance.h"

namespace kelvin::testing {

// `expected` (the f32 run) and `actual` (the bf16 run) generated greedily from `prompt`, both with
// the same budget and stops. They must be equal, or equal up to a step k whose f32 logits (of
// `f32_model`, a whole model on the CPU, after the prompt and expected[0, k)) have the top two
// within sqrt(2) kBf16ModelLogitsRelTol ||logits||: an error e with ||e|| <= tol ||logits|| moves
// the difference of two entries by at most sqrt(2) ||e||, so only such a step may pick another
// token. `compared` (when given) gets the number of steps the runs agreed on.
inline ::testing::AssertionResult SameGreedyTokensWhereMarginsAllow(
    models::LlamaModel& f32_model, const std::vector<int32_t>& prompt,
    const std::vector<int32_t>& expected, const std::vector<int32_t>& actual,
    size_t* compared = nullptr) {
  size_t k = 0;
  while (k < expected.size() && k < actual.size() && expected[k] == actual[k]) ++k;
  if (compared != nullptr) *compared = k;
  if (k == expected.size() && k == actual.size()) return ::testing::AssertionSuccess();
  if (k == expected.size() || k == actual.size()) {
    return ::testing::AssertionFailure()
           << "the runs agree on " << k << " tokens, then one stops (" << expected.size()
           << " f32 tokens, " << actual.size() << " bf16 tokens)";
  }
  // The f32 logits of step k: the last row of the forward over the prompt and expected[0, k).
  std::vector<int32_t> sequence = prompt;
  sequence.insert(sequence.end(), expected.begin(), expected.begin() + static_cast<int64_t>(k));
  const int64_t n = static_cast<int64_t>(sequence.size());
  Tensor tokens = Tensor::Empty({1, n}, DType::kI32),
         positions = Tensor::Empty({1, n}, DType::kI32);
  for (int64_t t = 0; t < n; ++t) {
    tokens.data<int32_t>()[t] = sequence[t];
    positions.data<int32_t>()[t] = static_cast<int32_t>(t);
  }
  const Tensor logits = Cast(f32_model.Forward(Context::Cpu(), tokens, positions), DType::kF64);
  const int64_t vocab = logits.dim(1);
  std::vector<double> row(logits.data<double>() + (n - 1) * vocab,
                          logits.data<double>() + n * vocab);  // [V]
  double norm = 0;
  for (const double x : row) norm += x * x;
  norm = std::sqrt(norm);
  std::partial_sort(row.begin(), row.begin() + 2, row.end(), std::greater<double>());
  const double margin = row[0] - row[1];
  const double swappable = std::sqrt(2.0) * kBf16ModelLogitsRelTol * norm;
  if (margin <= swappable) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure()
         << "the runs part at step " << k << " (f32 token " << expected[k] << ", bf16 token "
         << actual[k] << ") where the f32 logits' top two are " << margin
         << " apart, more than the " << swappable << " an error within the bf16 tolerance can swap";
}

}  // namespace kelvin::testing
