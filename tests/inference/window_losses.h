// The f64 reference of the scorer tests: each target's loss by the training forward
// (LlamaModel::Forward) on the window that predicts it, computed here by log-sum-exp in double.
#pragma once

#include <algorithm>
#include <cmath>
#include <vector>

#include "models/llama/llama_model.h"

namespace kelvin::testing {

// [end - begin]: -log p(tokens[p + 1]) for the inputs p in [begin, end), by Forward on those inputs
// alone at positions 0 .. end - begin - 1 (an f64 model).
inline std::vector<double> ForwardTokenLosses(models::LlamaModel& model,
                                              const std::vector<int32_t>& tokens, int64_t begin,
                                              int64_t end) {
  const int64_t n = end - begin;
  Tensor ids = Tensor::Empty({1, n}, DType::kI32), positions = Tensor::Empty({1, n}, DType::kI32);
  for (int64_t i = 0; i < n; ++i) {
    ids.data<int32_t>()[i] = tokens[begin + i];
    positions.data<int32_t>()[i] = static_cast<int32_t>(i);
  }
  const Tensor logits = model.Forward(Context::Cpu(), ids, positions).View({n, -1});  // [n, V]
  const int64_t vocab = logits.dim(1);
  std::vector<double> losses;
  for (int64_t p = begin; p < end; ++p) {
    const double* row = logits.data<double>() + (p - begin) * vocab;
    double top = row[0], sum = 0;
    for (int64_t v = 0; v < vocab; ++v) top = std::max(top, row[v]);
    for (int64_t v = 0; v < vocab; ++v) sum += std::exp(row[v] - top);
    losses.push_back(top + std::log(sum) - row[tokens[p + 1]]);
  }
  return losses;
}

}  // namespace kelvin::testing
