// JobForwardModel: a job's model for forward-only use on the job's own layout (tensor, sequence,
// context, pipeline and data parallelism as training lays it out): this rank's slice holding its
// parameter values alone (no gradients, master weights or optimizer state), the process grid and
// the pipeline runner that carries a micro-batch through the stages. `kelvin eval JOB` scores the
// job's held-out sets on it, its weights read from a checkpoint whatever layout wrote it.
#pragma once

#include <mpi.h>

#include <memory>
#include <string>

#include "configs/kelvin.pb.h"
#include "core/status.h"
#include "inference/model_on_grid.h"
#include "models/llama/llama_model.h"
#include "models/llama/memory_plan.h"
#include "parallel/pipeline/pipeline_runner.h"
#include "parallel/process_grid.h"

namespace kelvin::inference {

class JobForwardModel {
 public:
  // This rank's slice on the grid the job's parallel settings give over `world`, placed as training
  // places it (training.device; the model's dtype, bf16 on CUDA), after checking its memory plan
  // (ForwardMemoryPlan) against the device; its weights model.hf_dir's, else the seed's
  // initialisation, until ReadWeights replaces them. Collective.
  static absl::StatusOr<std::unique_ptr<JobForwardModel>> Build(const config::JobConfig& job,
                                                                const models::LlamaConfig& arch,
                                                                MPI_Comm world);

  // The weights of the checkpoint at `path` (found alike on every rank); a failure on any rank is
  // the first failing rank's error on every rank. Collective.
  absl::Status ReadWeights(const std::string& path);

  ModelOnGrid scored() const { return {ctx_, *grid_, *model_, *pipeline_}; }
  parallel::ProcessGrid& grid() const { return *grid_; }
  const models::LlamaModel& model() const { return *model_; }
  // The memory plan of this rank's forward-only slice (models::MemoryPlanOptions::forward_only).
  const models::MemoryPlan& memory_plan() const { return plan_; }

 private:
  JobForwardModel() = default;

  std::string job_name_;                         // checkpoints of another job are refused
  Context ctx_ = Context::Cpu();                 // this rank's device
  std::unique_ptr<parallel::ProcessGrid> grid_;  // size 1 for one process
  std::unique_ptr<models::LlamaModel> model_;
  std::unique_ptr<parallel::PipelineRunner> pipeline_;
  models::MemoryPlan plan_;
};

}  // namespace kelvin::inference
