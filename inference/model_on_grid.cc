// The sums over the ranks of a process grid that share a model.
#include "inference/model_on_grid.h"

namespace kelvin::inference {

int ReplicasOf(const parallel::ProcessGrid& grid) {
  return grid.spec().data_parallel * grid.spec().context_parallel;
}

// A one-rank group's sums are identities (the grid makes it a SelfCommunicator): no size tests.
double SumOverReplicas(parallel::ProcessGrid& grid, double value) {
  return grid.dp_cp().AllReduceScalar(value, parallel::ReduceOp::kSum);
}

double FromLastStage(parallel::ProcessGrid& grid, double value) {
  // The last stage's value, zeros elsewhere.
  return grid.pp().AllReduceScalar(grid.is_last_stage() ? value : 0.0, parallel::ReduceOp::kSum);
}

parallel::ContextSplit ContextSplitOf(parallel::ProcessGrid& grid, const data::Batch& batch) {
  return {grid.cp(), batch.rows(), batch.sequence_length()};
}

}  // namespace kelvin::inference
