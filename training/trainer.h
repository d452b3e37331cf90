// Trainer: the training loop of `kelvin train` on the CPU (f32) or a CUDA device (bf16 with f32
// master weights), one process or a tensor/sequence/context/pipeline/data parallel grid under
// mpirun (MPI or NCCL communicators, parallel.communication_backend). Each step is a
// TrainingStep; evaluation, checkpoints and metrics are the parts of their own it calls.
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "configs/kelvin.pb.h"
#include "inference/held_out_evaluation.h"
#include "models/llama/memory_plan.h"
#include "training/checkpointing.h"
#include "training/job/data_sources.h"
#include "training/loss_spike.h"
#include "training/metrics/run_metrics.h"
#include "training/model_and_optimizer.h"
#include "training/training_step.h"

namespace kelvin::training {

struct TrainerTestOptions {
  // f32 master weights apart from the f32 CPU model, so that the mixed-precision bookkeeping of
  // bf16 training (ZeRO-1's sharded masters among it) runs without a GPU.
  bool separate_master = false;
  // The run's identity when it starts afresh (runs compared byte for byte need the same one);
  // empty: a new one.
  std::string run_id;
};

// A run: resumed from checkpoint.dir when the policy says so, then per step a TrainingStep, its
// progress line and scalars (RunMetrics), the held-out evaluation (inference::HeldOutEvaluation)
// every training.eval_interval steps and at the end, checkpoints (Checkpointing) every
// checkpoint.interval_steps, at the end and on a preemption signal, and the export at the end.
class Trainer {
 public:
  // Resolves the layout, model and data; fails with a clear message on anything this build cannot
  // run. `world`: the processes of the job when MPI is initialised (tests pass MPI_COMM_SELF for
  // a one-process reference run inside an MPI job).
  // `test`: options only tests set.
  static absl::StatusOr<std::unique_ptr<Trainer>> Create(const config::JobConfig& job,
                                                         MPI_Comm world = MPI_COMM_WORLD,
                                                         const TrainerTestOptions& test = {});

  // Trains to training.steps. A preemption signal (SIGTERM, SIGUSR1) stops every rank after the
  // same step, once its checkpoint is saved: a Cancelled status (on every rank).
  absl::Status Run();
  absl::StatusOr<StepStats> TrainStep(int64_t step);  // timed
  // The held-out evaluation of the model as it is, labelled `step` (inference::HeldOutEvaluation);
  // an error naming the data fields when the job has no held-out data. Collective.
  absl::StatusOr<inference::EvalStats> Evaluate(int64_t step);
  // The same on each data.also_eval set: (name, its statistics), in the config's order.
  absl::StatusOr<std::vector<std::pair<std::string, inference::EvalStats>>> EvaluateFurtherSets(
      int64_t step);
  // The model (as built, or as restored from the checkpoint) to a Hugging Face directory
  // (config.json + safetensors), gathered over the tensor and pipeline ranks; written once, by
  // one replica's ranks (data- and context-parallel rank 0). Every rank calls it.
  absl::Status ExportHf(const std::string& directory);

  const std::vector<StepStats>& history() const { return history_; }
  const std::vector<inference::EvalStats>& evaluations() const { return evaluations_; }
  // data.also_eval's evaluations, by set name, in step order.
  const std::map<std::string, std::vector<inference::EvalStats>>& also_evaluations() const {
    return also_evaluations_;
  }
  const std::vector<SavedCheckpoint>& saved_checkpoints() const { return checkpoints_->saved(); }
  // The model, its parameters current (a parameter gather still in flight is waited for first).
  models::LlamaModel& model() {
    trained_->SettleParameters();
    return trained_->model();
  }
  int64_t start_step() const { return checkpoints_->start_step(); }  // > 0 after a resume
  // The memory plan of the rank at (tensor rank, pipeline rank) of this job's layout (rank 0 of
  // the other groups), e.g. this rank's: MemoryPlanOf(tp_rank, pp_rank).
  models::MemoryPlan MemoryPlanOf(int tensor_rank, int pipeline_rank) const {
    return trained_->MemoryPlanOf(job_, arch_, tensor_rank, pipeline_rank);
  }
  int TensorParallelRank() const { return trained_->grid().tp_rank(); }
  int PipelineParallelRank() const { return trained_->grid().pp_rank(); }
  // Bytes of this rank's optimizer state (AdamW moments, or its ZeRO-1 shards).
  int64_t OptimizerStateBytes() const;
  // Bytes of this rank's f32 master weights kept apart from the model (whole, or its ZeRO-1
  // shards; 0 when the model's f32 values are the masters).
  int64_t MasterWeightBytes() const;

 private:
  Trainer(const config::JobConfig& job, const models::LlamaConfig& arch);
  // The main evaluation after `steps_completed` steps, then data.also_eval's sets: logged, and
  // recorded in TensorBoard and the metrics file.
  absl::Status EvaluateAll(int64_t steps_completed);
  // The held-out loss evaluated after `steps_completed` steps, when the run evaluated then (a
  // checkpoint of that step records it for checkpoint.keep_best).
  std::optional<double> EvalLossAfter(int64_t steps_completed) const;
  // The run's first lines: the model, the layout, the batch and the memory plan.
  void LogJobSummary() const;
  // logging.profile's capture window on this run's CUDA device: opened before the step that
  // starts it (or the run's first step inside it), closed after its last step.
  bool ProfilesStep(int64_t step) const;  // whether the window covers `step` (0-based)
  void OpenProfilerWindowAt(int64_t step);
  void CloseProfilerWindowAfter(int64_t step);
  // The run's last line (steps, time, where its outputs are) and the run directory's marker.
  void LogFinished(double seconds);

  config::JobConfig job_;
  models::LlamaConfig arch_;
  LossSpikeRule loss_spike_;  // training.loss_spike: judged by the step, kept in checkpoints
  std::unique_ptr<ModelAndOptimizer> trained_;
  DataSources data_;
  std::unique_ptr<RunMetrics> metrics_;
  std::unique_ptr<TrainingStep> step_;
  std::unique_ptr<inference::HeldOutEvaluation> evaluation_;
  std::unique_ptr<Checkpointing> checkpoints_;
  std::vector<StepStats> history_;
  std::vector<inference::EvalStats> evaluations_;
  std::map<std::string, std::vector<inference::EvalStats>> also_evaluations_;
};

}  // namespace kelvin::training
