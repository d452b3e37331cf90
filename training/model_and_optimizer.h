// ModelAndOptimizer: what a training job builds before its first step and the step, the
// evaluation and the checkpoints share: this rank's device, the process grid, its model slice and
// pipeline program, the optimizer, and the exchanges between the replicas (gradient buckets,
// ZeRO-1's parameter gather), with the sums over the ranks that share the model.
#pragma once

#include <memory>

#include "absl/status/statusor.h"
#include "configs/kelvin.pb.h"
#include "core/optim/optimizer.h"
#include "data/sampling/batch.h"
#include "inference/model_on_grid.h"
#include "models/llama/llama_model.h"
#include "models/llama/memory_plan.h"
#include "parallel/gradient_buckets.h"
#include "parallel/parameter_gather.h"
#include "parallel/pipeline/pipeline_runner.h"
#include "parallel/process_grid.h"
#include "training/job/job_setup.h"

namespace kelvin::training {

class ModelAndOptimizer {
 public:
  // Resolves the placement and layout, checks this rank's memory plan against its device, then
  // builds the model, its pipeline program and the optimizer; fails with a clear message on
  // anything this build cannot run. `world`: the processes of the job; `separate_master`: f32
  // master weights apart from an f32 model (tests).
  static absl::StatusOr<std::unique_ptr<ModelAndOptimizer>> Build(const config::JobConfig& job,
                                                                  const models::LlamaConfig& arch,
                                                                  MPI_Comm world,
                                                                  bool separate_master);

  const Context& ctx() const { return ctx_; }
  parallel::ProcessGrid& grid() const { return *grid_; }
  models::LlamaModel& model() const { return *model_; }
  parallel::PipelineRunner& pipeline() const { return *pipeline_; }
  Optimizer& optimizer() const { return *optimizer_; }
  int64_t micro_batches() const { return micro_batches_; }  // per step (gradient accumulation)
  // The model on its grid as the held-out evaluation scores it (the weights are the trainer's).
  inference::ModelOnGrid ScoredModel() const { return {ctx_, *grid_, *model_, *pipeline_}; }

  // Waits for ZeRO-1's parameter gather still in flight: before anything but the next step's
  // forward reads the model or the gradient buffers.
  void SettleParameters();
  // Whether the last step's parameter gather is still in flight (its stretches of the gradient
  // buffers hold masters until the forward waits for them).
  bool GatheringParameters() const;
  // What the backward did not finish and start already of the sum of the gradients over the
  // replicas.
  void FinishGradientReduction();

  // The ranks that share the model but split the data (inference::ReplicasOf): gradients, losses
  // and token counts are summed over them.
  int GradientReplicas() const { return inference::ReplicasOf(*grid_); }
  double SumOverReplicas(double value) { return inference::SumOverReplicas(*grid_, value); }
  // The value of the last pipeline stage on every stage (no-op without pipeline parallelism).
  double FromLastStage(double value) { return inference::FromLastStage(*grid_, value); }
  // Which tokens of a batch's rows this rank holds (inference::ContextSplitOf).
  parallel::ContextSplit ContextSplitOf(const data::Batch& batch) const {
    return inference::ContextSplitOf(*grid_, batch);
  }

  // The memory plan of the rank at (tensor rank, pipeline rank) of this job's layout (rank 0 of
  // the other groups).
  models::MemoryPlan MemoryPlanOf(const config::JobConfig& job, const models::LlamaConfig& arch,
                                  int tensor_rank, int pipeline_rank) const;

 private:
  ModelAndOptimizer() = default;
  // This rank's memory plan fits its device (the host's memory, or the GPU's): checked before
  // the model is built, so that sizes no machine holds end in a message, not in bad_alloc.
  absl::Status CheckPlanFitsDevice(const config::JobConfig& job, const models::LlamaConfig& arch,
                                   const TrainingPlacement& placement,
                                   bool distributed_optimizer) const;
  // AdamW over the whole parameters, or ZeRO-1 over the data-parallel group; the gradient buckets
  // and the parameter gather the layout asks for.
  void BuildOptimizer(const config::JobConfig& job, const models::LlamaConfig& arch,
                      bool distributed_optimizer);

  Context ctx_ = Context::Cpu();                 // this rank's device
  std::unique_ptr<parallel::ProcessGrid> grid_;  // size 1 for one process
  std::unique_ptr<models::LlamaModel> model_;
  std::unique_ptr<parallel::PipelineRunner> pipeline_;  // this rank's program (one stage's too)
  // AdamW over the whole parameters, or ZeRO-1 over the data-parallel group
  // (parallel.distributed_optimizer).
  std::unique_ptr<Optimizer> optimizer_;
  // The sum of the gradients over the data-parallel (and context-parallel) replicas, in buckets
  // started as the backward finishes them (parallel.overlap_grad_reduce); null for one replica.
  std::unique_ptr<parallel::GradientBuckets> gradient_buckets_;
  // ZeRO-1's gather of the updated parameters, started after the optimizer step and waited for
  // bucket by bucket in the next forward (parallel.overlap_param_gather); null without it.
  std::unique_ptr<parallel::ParameterGather> parameter_gather_;
  int64_t micro_batches_ = 1;
};

}  // namespace kelvin::training
