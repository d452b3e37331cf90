// ModelOnGrid: this rank's slice of a model on the job's process grid with the pipeline program
// that runs it: what held-out scoring runs on, the trainer's own model (weights shared) or a
// forward-only one; and the sums over the ranks that share the model but split the data.
#pragma once

#include "core/context.h"
#include "core/tensor.h"
#include "data/sampling/batch.h"
#include "models/llama/llama_model.h"
#include "parallel/context_parallel.h"
#include "parallel/pipeline/pipeline_runner.h"
#include "parallel/process_grid.h"

namespace kelvin::inference {

struct ModelOnGrid {
  const Context& ctx;  // this rank's device
  parallel::ProcessGrid& grid;
  models::LlamaModel& model;           // this rank's slice (tensor shard, pipeline stage)
  parallel::PipelineRunner& pipeline;  // its Forward runs the slice's chunks in order
};

// The ranks that share the model but split the data: the data-parallel replicas and, within each,
// the context-parallel ranks (each holding its tokens of every row). Losses and token counts are
// summed over them (no-op for one).
int ReplicasOf(const parallel::ProcessGrid& grid);
double SumOverReplicas(parallel::ProcessGrid& grid, double value);
// The value of the last pipeline stage on every stage (no-op without pipeline parallelism).
double FromLastStage(parallel::ProcessGrid& grid, double value);
// Which tokens of a batch's rows this rank holds (its context-parallel tokens of every row; all
// of them without context parallelism): the model's tokens, the loss's labels, the predictions
// gathered back all split by it.
parallel::ContextSplit ContextSplitOf(parallel::ProcessGrid& grid, const data::Batch& batch);

}  // namespace kelvin::inference
