// Softmax in double over the row, then the top-k candidates sorted by probability (ties by id),
// cut by top-p, and one uniform draw over what is left.
#include "inference/token_sampler.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/check.h"

namespace kelvin::inference {

absl::Status ValidateSamplingOptions(const SamplingOptions& o) {
  if (!(o.temperature >= 0) || !std::isfinite(o.temperature)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--temperature ", o.temperature, ": must be >= 0 (0: greedy)"));
  }
  if (o.top_k < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--top-k ", o.top_k, ": must be >= 0 (0: every token)"));
  }
  if (!(o.top_p > 0 && o.top_p <= 1)) {
    return absl::InvalidArgumentError(absl::StrCat("--top-p ", o.top_p, ": must be in (0, 1]"));
  }
  return absl::OkStatus();
}

TokenSampler::TokenSampler(const SamplingOptions& options, AllowedIds allowed)
    : options_(options), allowed_(std::move(allowed)), state_(options.seed) {
  KELVIN_CHECK(allowed_ == nullptr ||
               std::find(allowed_->begin(), allowed_->end(), uint8_t{1}) != allowed_->end())
      << "a sampler needs an id it may draw";
}

double TokenSampler::Uniform() {
  state_ += 0x9E3779B97F4A7C15ull;  // SplitMix64
  uint64_t z = state_;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  z ^= z >> 31;
  return static_cast<double>(z >> 11) * 0x1.0p-53;
}

SampledToken TokenSampler::Next(const Tensor& logits) {
  const int64_t vocab = logits.numel();
  std::vector<double> row(static_cast<size_t>(vocab));  // [V]
  for (int64_t i = 0; i < vocab; ++i) {
    row[i] = logits.dtype() == DType::kF64 ? logits.data<double>()[i] : logits.data<float>()[i];
  }
  const double top = *std::max_element(row.begin(), row.end());
  double sum = 0;
  for (const double x : row) sum += std::exp(x - top);
  const double log_sum = top + std::log(sum);
  const auto logprob = [&](int64_t i) { return row[i] - log_sum; };

  // The candidates: every id, or the allowed ones.
  std::vector<int64_t> order;
  order.reserve(static_cast<size_t>(vocab));
  const std::vector<uint8_t>* allowed = allowed_.get();
  for (int64_t i = 0; i < vocab; ++i) {
    if (allowed == nullptr || (i < static_cast<int64_t>(allowed->size()) && (*allowed)[i] != 0)) {
      order.push_back(i);
    }
  }
  const auto likelier = [&](int64_t a, int64_t b) {
    return row[a] != row[b] ? row[a] > row[b] : a < b;
  };
  if (options_.temperature == 0) {
    const int64_t best = *std::min_element(order.begin(), order.end(), likelier);
    return {static_cast<int32_t>(best), logprob(best)};
  }
  // Likeliest first, ties by id; with top-k only the k first are ordered.
  const int64_t candidates = static_cast<int64_t>(order.size());
  const int64_t kept = options_.top_k > 0 ? std::min(options_.top_k, candidates) : candidates;
  std::partial_sort(order.begin(), order.begin() + kept, order.end(), likelier);
  order.resize(static_cast<size_t>(kept));
  const double best = row[order.front()];     // the likeliest candidate's logit
  std::vector<double> weights(order.size());  // softmax(logits / temperature) over the candidates
  double total = 0;
  for (size_t i = 0; i < order.size(); ++i) {
    weights[i] = std::exp((row[order[i]] - best) / options_.temperature);
    total += weights[i];
  }
  if (options_.top_p < 1) {
    double mass = 0;
    size_t keep = 0;
    while (keep < order.size() && mass < options_.top_p * total) mass += weights[keep++];
    order.resize(std::max<size_t>(keep, 1));
    weights.resize(order.size());
    total = std::accumulate(weights.begin(), weights.end(), 0.0);
  }
  double draw = Uniform() * total;
  for (size_t i = 0; i < order.size(); ++i) {
    draw -= weights[i];
    if (draw < 0 || i + 1 == order.size()) {
      return {static_cast<int32_t>(order[i]), logprob(order[i])};
    }
  }
  return {static_cast<int32_t>(order.front()), logprob(order.front())};  // not reached
}

}  // namespace kelvin::inference
