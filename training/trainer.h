// Trainer: the training loop of `kelvin train` on the CPU (f32) or a CUDA device (bf16 with f32
// master weights), one process or a tensor/sequence/context/pipeline/data parallel grid under
// mpirun (MPI or NCCL communicators, parallel.communication_backend). Read trainer.cc top to
// bottom; checkpoints (and background saves) are in trainer_checkpoints.cc.
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "configs/kelvin.pb.h"
#include "core/optim/adamw_optimizer.h"
#include "core/optim/optimizer.h"
#include "models/llama/memory_plan.h"
#include "parallel/gradient_buckets.h"
#include "parallel/parameter_gather.h"
#include "parallel/pipeline/pipeline_runner.h"
#include "parallel/process_grid.h"
#include "training/checkpoint/async_checkpoint_saver.h"
#include "training/checkpoint/checkpoint.h"
#include "training/checkpoint/checkpoint_lock.h"
#include "training/job/data_sources.h"
#include "training/job/job_setup.h"
#include "training/loss_spike.h"
#include "training/metrics/metrics_file.h"
#include "training/metrics/tensorboard_writer.h"

namespace kelvin::training {

struct StepStats {
  int64_t step = 0;
  double loss = 0;       // mean over the step's labelled tokens
  double grad_norm = 0;  // before clipping
  double lr = 0;
  // training.loss_spike judged the loss a spike and SKIP_STEP discarded the update.
  bool skipped = false;
  int64_t tokens = 0;  // this data-parallel replica's tokens (all positions, labelled or not)
  int64_t labelled_tokens = 0;  // the global batch's tokens with a label (those the loss averages)
  // Wall time of this rank: the whole step, its forwards and backwards (the pipeline's program),
  // its communication calls (all groups), and of those the pipeline group's transfers (waiting
  // for the neighbouring stages: the bubble).
  double seconds = 0, micro_batch_seconds = 0, communication_seconds = 0,
         pipeline_transfer_seconds = 0;
  // Per layer, the SSA temperatures of the step's last micro-batch (empty without SSA, and on
  // the steps that do not report them: Trainer::ReportsTemperatures).
  std::vector<ssa::TemperatureStatistics> temperatures;
};

struct EvalStats {
  int64_t step = 0;
  double loss = 0;
  double retrieval_accuracy = -1;  // passkey rows with all digits right; -1 when not passkey
  double token_accuracy = 0;       // correct_tokens / labelled_tokens
  // Over the evaluated batches: the tokens with a label, and those whose most likely prediction
  // (the argmax over the vocabulary) is the label.
  int64_t labelled_tokens = 0, correct_tokens = 0;
};

// "loss 1.2345 | token accuracy 61.2%" (and " | passkey retrieval 90.0%" for passkey), as the
// evaluation lines print it.
std::string FormatEvalStats(const EvalStats& eval);

struct SavedCheckpoint {
  std::string path;
  bool written_in_background = false;  // checkpoint.async_save, committed after training went on
};

struct TrainerTestOptions {
  // f32 master weights apart from the f32 CPU model, so that the mixed-precision bookkeeping of
  // bf16 training (ZeRO-1's sharded masters among it) runs without a GPU.
  bool separate_master = false;
  // The run's identity when it starts afresh (runs compared byte for byte need the same one);
  // empty: a new one.
  std::string run_id;
};

// Per step, each data-parallel rank's micro-batches run forward and backward with the loss
// normalised by the global batch's labelled tokens, gradients are summed over the data- and
// context-parallel ranks and clipped by the norm of the full model, the learning rate comes from
// the schedule, and AdamW steps (unless training.loss_spike judges the loss a spike: the run stops,
// or the update is skipped); then progress lines, periodic evaluation and checkpoints (resume,
// every checkpoint.interval_steps, at the end and on a preemption signal; with
// checkpoint.async_save written in the background), and the export at the end.
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
  // The held-out loss (and passkey retrieval) over training.eval_steps global batches (or every
  // held-out row with training.eval_whole_set), split over the data-parallel replicas (the same
  // batches on every layout); an error naming
  // the data fields when the job has no held-out data.
  absl::StatusOr<EvalStats> Evaluate(int64_t step);
  // The same on each data.also_eval set: (name, its statistics), in the config's order.
  absl::StatusOr<std::vector<std::pair<std::string, EvalStats>>> EvaluateFurtherSets(int64_t step);
  // Restores the chosen checkpoint of checkpoint.dir (`kelvin eval --step N / --best`, on a
  // Trainer created with checkpoint.resume NEVER); an error on every rank, naming the field, when
  // there is none. Collective.
  absl::Status RestoreCheckpoint(const CheckpointChoice& choice);
  // The steps of checkpoint.dir's complete checkpoints, oldest first, as world rank 0 lists them
  // (`kelvin eval --all`); an error on every rank, naming the field, when there is none.
  // Collective.
  absl::StatusOr<std::vector<int64_t>> CheckpointSteps();
  // The model (as built, or as restored from the checkpoint) to a Hugging Face directory
  // (config.json + safetensors), gathered over the tensor and pipeline ranks; written once, by
  // one replica's ranks (data- and context-parallel rank 0). Every rank calls it.
  absl::Status ExportHf(const std::string& directory);

  const std::vector<StepStats>& history() const { return history_; }
  const std::vector<EvalStats>& evaluations() const { return evaluations_; }
  // data.also_eval's evaluations, by set name, in step order.
  const std::map<std::string, std::vector<EvalStats>>& also_evaluations() const {
    return also_evaluations_;
  }
  const std::vector<SavedCheckpoint>& saved_checkpoints() const { return saved_checkpoints_; }
  // The model, its parameters current (a parameter gather still in flight is waited for first).
  models::LlamaModel& model() {
    SettleParameters();
    return *model_;
  }
  int64_t start_step() const { return start_step_; }  // > 0 after a resume
  // The memory plan of the rank at (tensor rank, pipeline rank) of this job's layout (rank 0 of
  // the other groups), e.g. this rank's: MemoryPlanOf(tp_rank, pp_rank).
  models::MemoryPlan MemoryPlanOf(int tensor_rank, int pipeline_rank) const;
  int TensorParallelRank() const { return grid_->tp_rank(); }
  int PipelineParallelRank() const { return grid_->pp_rank(); }
  // Bytes of this rank's optimizer state (AdamW moments, or its ZeRO-1 shards).
  int64_t OptimizerStateBytes() const;
  // Bytes of this rank's f32 master weights kept apart from the model (whole, or its ZeRO-1
  // shards; 0 when the model's f32 values are the masters).
  int64_t MasterWeightBytes() const;

 private:
  Trainer(const config::JobConfig& job, const models::LlamaConfig& arch);
  absl::StatusOr<StepStats> TrainStepUntimed(int64_t step);
  // This rank's memory plan fits its device (the host's memory, or the GPU's): checked before
  // the model is built, so that sizes no machine holds end in a message, not in bad_alloc.
  absl::Status CheckPlanFitsDevice(const TrainingPlacement& placement,
                                   bool distributed_optimizer) const;
  // Evaluate on `source` (passkey rows score retrieval too).
  absl::StatusOr<EvalStats> EvaluateOn(data::BatchSource& source, bool passkey, int64_t step);
  // The main evaluation after `steps_completed` steps, then data.also_eval's sets: logged, and
  // recorded in TensorBoard and the metrics file.
  absl::Status EvaluateAll(int64_t steps_completed);
  // The step's scalars (loss, lr, grad norm, throughput, communication share, SSA temperatures)
  // to logging.tensorboard_dir and logging.metrics_file; a no-op without them and off world rank 0.
  void RecordStepScalars(const StepStats& stats);
  // Model FLOPs per second and process (models/llama/model_flops.h) at a global rate of
  // `tokens_per_second`, and their share of logging.peak_tflops (0 without one).
  struct Throughput {
    double tflops_per_process = 0;
    double mfu = 0;
  };
  Throughput ThroughputOf(double tokens_per_second) const;
  // The most tensor memory this process has held at once on the training device (the allocator's
  // peak), in GiB.
  double PeakMemoryGiB() const;
  // Scalars of `step` to TensorBoard and the metrics file; a failed write (rank 0's alone) is a
  // warning and turns that sink off, so that no rank stops while the others wait for it.
  void RecordScalars(int64_t step, const std::vector<std::pair<std::string, double>>& scalars);
  // logging.metrics_file on world rank 0, keeping the records up to the resumed step (training
  // only: `kelvin eval` builds a Trainer too and must leave the file alone). Collective.
  absl::Status OpenMetricsFile();
  // checkpoint.resume: restores the newest checkpoint of checkpoint.dir when the policy says so
  // (with checkpoint.skip_damaged, the newest that restores). Then the run's identity: the
  // restored run's, else `fresh_run_id` or, when empty, a new one (world rank 0's, broadcast).
  absl::Status Resume(const std::string& fresh_run_id);
  absl::Status ResumeFromCheckpoint();  // Resume's checkpoint part
  // A new run identity, the same on every rank. Collective.
  std::string AgreedNewRunId();
  // checkpoint.skip_damaged: moves the checkpoint at `path`, which failed to restore with
  // `error`, aside to <path>.damaged (world rank 0) with a warning, so that resume, pruning and
  // `eval --all` pass it by. Collective.
  absl::Status SetAsideDamaged(const std::string& path, const absl::Status& error);
  // The chosen checkpoint of checkpoint.dir (nullopt: none, for the newest), the same on every
  // rank: a listing error or a split view is an error on every rank. Collective.
  absl::StatusOr<std::optional<std::string>> AgreedCheckpoint(const CheckpointChoice& choice);
  // Restores the complete checkpoint at `path` (found alike on every rank); a failure on any rank
  // is that rank's error on every rank (the first failing rank's). Collective.
  absl::Status RestoreFrom(const std::string& path);
  // Every rank found the same checkpoint to restore (a shared filesystem may show one late): an
  // error on every rank when not. Collective over the world.
  absl::Status CheckSameCheckpointEverywhere(const std::optional<std::string>& found);
  // Saves the checkpoint of `steps_completed` steps, after finishing a background save in flight:
  // in turn, or with checkpoint.async_save in the background unless `wait`. Collective.
  absl::Status SaveCheckpointAt(int64_t steps_completed, bool wait);
  // Commits the background save in flight once this rank's part is written. Collective.
  absl::Status FinishBackgroundSave();
  // `error`, which every rank returns at the same point, after committing a background save in
  // flight (as a save in turn would have been). Collective.
  absl::Status StopOnAgreedError(const absl::Status& error);
  // Records and logs a saved checkpoint; prunes old ones (world rank 0: a failure is a warning).
  void CheckpointSaved(const SavedCheckpoint& saved);
  // checkpoint.keep_best: logs which checkpoint it keeps (world rank 0).
  void LogBestCheckpoint(const BestCheckpoint& best) const;
  // Whether `step` (0-based) writes a progress line: every logging.log_interval-th and the last.
  bool LogsProgress(int64_t step) const;
  // Whether `step`'s SSA temperature statistics are reported (StepStats::temperatures, else
  // empty): every step's with a metrics file or TensorBoard, else those of the progress lines
  // (model.ssa.log_statistics). The same on every rank (the statistics are merged over them).
  bool ReportsTemperatures(int64_t step) const;
  // Whether logging.profile's capture window covers `step` (0-based) on this run's CUDA device.
  bool ProfilesStep(int64_t step) const;
  std::string LayoutName() const;  // e.g. "tp2 sp pp2 vp1 dp2 zero1", for checkpoints and logs
  TrainingState CurrentTrainingState() const;  // this rank's, as checkpoints hold it
  // What the ranks agree on after a step (one all-reduce): the preemption signal any rank
  // received (0: none), and whether every rank's part of the background save is written.
  struct StepAgreement {
    int preemption_signal = 0;
    bool background_save_written = false;
  };
  StepAgreement AgreeAfterStep();
  int DataParallelRank() const { return grid_->dp_rank(); }
  int DataParallelSize() const { return grid_->spec().data_parallel; }
  int WorldSize() const { return grid_->spec().world_size; }
  int WorldRank() const { return grid_->world_rank(); }
  // World rank 0: removes the step_<N>.partial / .deleting directories that interrupted saves
  // and deletions left in checkpoint.dir, with a log line each (a failure is a warning).
  void RemoveUnfinishedCheckpoints();
  // World rank 0 locks checkpoint.dir (checkpoint_lock.h) and holds the lock it returns (nullopt
  // on the other ranks); agreed by every rank.
  absl::StatusOr<std::optional<CheckpointDirectoryLock>> LockCheckpointDirectory();
  // What to do after a preemption stop: run the job again, or under SLURM what happens next.
  static std::string ResumeAdvice();
  // Which checkpoint to resume from after the loss of `step` (1-based) stopped the run as a spike:
  // the newest of checkpoint.dir before the one of step - 1 (whose weights gave that loss).
  std::string ResumeAdviceBeforeSpike(int64_t step) const;
  // The run's last line (steps, time, where its outputs are) and the run directory's marker.
  void LogFinished(double seconds);
  int ContextParallelSize() const { return grid_->spec().context_parallel; }
  int PipelineStages() const { return grid_->spec().pipeline_parallel; }
  // The ranks that share the model but split the data: the data-parallel replicas and, within
  // each, the context-parallel ranks (each holding its tokens of every row). Gradients, losses and
  // token counts are summed over them.
  int GradientReplicas() const { return DataParallelSize() * ContextParallelSize(); }
  double SumOverReplicas(double value);
  // This rank's labels of a batch [B*T/CP]: its context-parallel tokens of every row.
  Tensor LocalLabels(const data::Batch& batch) const;
  // The value of the last pipeline stage on every stage (no-op without pipeline parallelism).
  double FromLastStage(double value);
  // Waits for ZeRO-1's parameter gather still in flight (parameter_gather_): before anything but
  // the next step's forward reads the model or the gradient buffers.
  void SettleParameters();
  // The forward and backward of every micro-batch of the step: this rank's pipeline program (one
  // stage's runs them in turn). Returns each micro-batch's summed token losses x `loss_scale` (1 /
  // the global batch's labelled tokens), 0 off the last pipeline stage.
  std::vector<double> RunMicroBatches(const std::vector<data::Batch>& batches, double loss_scale);
  // The global gradient norm over the full model (before clipping); scales the gradients by
  // PyTorch's clip coefficient when max_norm > 0 and the norm exceeds it.
  double ClipGradients(double max_norm);

  config::JobConfig job_;
  models::LlamaConfig arch_;
  Context ctx_ = Context::Cpu();                 // this rank's device
  std::unique_ptr<parallel::ProcessGrid> grid_;  // size 1 for one process
  std::unique_ptr<models::LlamaModel> model_;
  DataSources data_;
  // AdamW over the whole parameters, or ZeRO-1 over the data-parallel group
  // (parallel.distributed_optimizer).
  std::unique_ptr<Optimizer> optimizer_;
  // The sum of the gradients over the data-parallel (and context-parallel) replicas, in buckets
  // started as the backward finishes them (parallel.overlap_grad_reduce); null for one replica.
  std::unique_ptr<parallel::GradientBuckets> gradient_buckets_;
  // ZeRO-1's gather of the updated parameters, started after the optimizer step and waited for
  // bucket by bucket in the next forward (parallel.overlap_param_gather); null without it.
  std::unique_ptr<parallel::ParameterGather> parameter_gather_;
  int64_t micro_batches_ = 1;                           // per step (gradient accumulation)
  std::unique_ptr<parallel::PipelineRunner> pipeline_;  // this rank's program (one stage's too)
  std::unique_ptr<TensorBoardWriter> tensorboard_;      // on world rank 0 with tensorboard_dir
  std::unique_ptr<MetricsFile> metrics_;                // on world rank 0 with metrics_file
  AsyncCheckpointSaver background_save_;                // checkpoint.async_save
  LossSpikeRule loss_spike_;                            // training.loss_spike, in checkpoints
  int64_t start_step_ = 0;  // steps already done by the run this one resumes
  std::string run_id_;      // the run's identity (its checkpoints carry it)
  std::vector<StepStats> history_;
  std::vector<EvalStats> evaluations_;
  std::map<std::string, std::vector<EvalStats>> also_evaluations_;
  std::vector<SavedCheckpoint> saved_checkpoints_;
};

}  // namespace kelvin::training
