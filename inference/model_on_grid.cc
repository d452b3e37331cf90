// The sums over the ranks of a process grid that share a model.
#include "inference/model_on_grid.h"

#include "parallel/context_parallel.h"

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

Tensor LocalLabels(const parallel::ProcessGrid& grid, const data::Batch& batch) {
  const int cp = grid.spec().context_parallel;
  if (cp == 1) return batch.labels.View({-1});
  return parallel::LocalSequence(batch.labels, batch.rows(), grid.cp_rank(), cp);
}

}  // namespace kelvin::inference
