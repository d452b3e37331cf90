// A layer's statistics travel as one row of doubles: tau^q's count, mean, std, min and max, then
// tau^v's, then sigma(alpha) per head.
#include "training/temperature_reduction.h"

#include <algorithm>

#include "core/tensor.h"

namespace kelvin::training {
namespace {

constexpr int kSummaryFields = 5;
constexpr int kFields = 2 * kSummaryFields;  // before the heads

void Encode(const ssa::TemperatureSummary& s, double* out) {
  out[0] = static_cast<double>(s.count);
  out[1] = s.mean;
  out[2] = s.std;
  out[3] = s.min;
  out[4] = s.max;
}

ssa::TemperatureSummary Decode(const double* in) {
  return {static_cast<int64_t>(in[0]), in[1], in[2], in[3], in[4]};
}

// row [kFields + H] <- the layer's statistics.
void EncodeLayer(const ssa::TemperatureStatistics& t, double* row) {
  Encode(t.query, row);
  Encode(t.value, row + kSummaryFields);
  std::copy(t.sigma_alpha.begin(), t.sigma_alpha.end(), row + kFields);
}

}  // namespace

std::vector<ssa::TemperatureStatistics> MergeOver(
    parallel::Communicator& group, const std::vector<ssa::TemperatureStatistics>& local,
    bool gather_heads) {
  if (local.empty()) return local;
  const int64_t layers = static_cast<int64_t>(local.size());
  const int64_t heads = static_cast<int64_t>(local.front().sigma_alpha.size());
  const int64_t width = kFields + heads, size = group.size();
  Tensor mine = Tensor::Empty({layers, width}, DType::kF64);  // [L, 10 + H_local]
  for (int64_t l = 0; l < layers; ++l) EncodeLayer(local[l], mine.data<double>() + l * width);
  Tensor all = Tensor::Empty({size, layers, width}, DType::kF64);  // every member's
  Tensor gathered = all.View({-1});
  group.AllGather(mine.View({-1}), gathered);
  std::vector<ssa::TemperatureStatistics> merged(local.size());
  for (int64_t l = 0; l < layers; ++l) {
    std::vector<ssa::TemperatureSummary> query, value;
    for (int64_t r = 0; r < size; ++r) {
      const double* row = all.data<double>() + (r * layers + l) * width;
      query.push_back(Decode(row));
      value.push_back(Decode(row + kSummaryFields));
      if (gather_heads) {
        merged[l].sigma_alpha.insert(merged[l].sigma_alpha.end(), row + kFields, row + width);
      }
    }
    merged[l].query = ssa::MergeTemperatureSummaries(query);
    merged[l].value = ssa::MergeTemperatureSummaries(value);
    if (!gather_heads) merged[l].sigma_alpha = local[l].sigma_alpha;
  }
  return merged;
}

std::vector<ssa::TemperatureStatistics> GatherOverStages(
    parallel::Communicator& pp, const models::LlamaStageLayout& stage, int64_t layers,
    const std::vector<ssa::TemperatureStatistics>& local) {
  if (local.empty()) return local;
  const int64_t heads = static_cast<int64_t>(local.front().sigma_alpha.size());
  const int64_t width = kFields + heads;
  Tensor table = Tensor::ZerosCpu({layers, width}, DType::kF64);  // [L, width], this stage's rows
  size_t i = 0;
  for (const models::LlamaStageLayout::Chunk& chunk : stage.chunks) {
    for (int64_t l = chunk.layer_begin; l < chunk.layer_end; ++l, ++i) {
      EncodeLayer(local[i], table.data<double>() + l * width);
    }
  }
  pp.AllReduce(table, parallel::ReduceOp::kSum);
  std::vector<ssa::TemperatureStatistics> all(static_cast<size_t>(layers));
  for (int64_t l = 0; l < layers; ++l) {
    const double* row = table.data<double>() + l * width;
    all[l].query = Decode(row);
    all[l].value = Decode(row + kSummaryFields);
    all[l].sigma_alpha.assign(row + kFields, row + width);
  }
  return all;
}

}  // namespace kelvin::training
