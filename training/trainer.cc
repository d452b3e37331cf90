// The training run: the job built into its parts (model and optimizer, data, metrics, step,
// evaluation, checkpoints), the loop over the steps, and the export at the end.
#include "training/trainer.h"

#include <omp.h>

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/logging.h"
#include "core/profile_range.h"
#include "core/stopwatch.h"
#include "parallel/comm/stop_deadline.h"
#include "training/job/job_plan.h"
#include "training/run_directory.h"

namespace kelvin::training {

absl::StatusOr<std::unique_ptr<Trainer>> Trainer::Create(const config::JobConfig& job,
                                                         MPI_Comm world,
                                                         const TrainerTestOptions& test) {
  KELVIN_ASSIGN_OR_RETURN(const models::LlamaConfig arch, ResolveModelArchitecture(job.model()));
  KELVIN_RETURN_IF_ERROR(CheckSequenceLength(job, arch));
  std::unique_ptr<Trainer> trainer(new Trainer(job, arch));
  Trainer& t = *trainer;  // its parts hold references to its job, architecture and data
  KELVIN_ASSIGN_OR_RETURN(t.trained_,
                          ModelAndOptimizer::Build(t.job_, t.arch_, world, test.separate_master));
  KELVIN_ASSIGN_OR_RETURN(t.data_, BuildDataSources(t.job_, t.arch_));
  const parallel::ProcessGrid& grid = t.trained_->grid();
  KELVIN_ASSIGN_OR_RETURN(
      t.metrics_,
      RunMetrics::Create(t.job_, t.arch_, grid.spec().world_size, grid.spec().data_parallel,
                         grid.world_rank() == 0, t.trained_->ctx().device()));
  t.step_ = std::make_unique<TrainingStep>(t.job_, *t.trained_, *t.data_.train, t.loss_spike_);
  // The evaluation scores the trainer's own model: its weights, not a copy.
  t.evaluation_ =
      std::make_unique<inference::HeldOutEvaluation>(t.job_, t.trained_->ScoredModel(), t.data_);
  t.checkpoints_ = std::make_unique<Checkpointing>(t.job_, *t.trained_, t.data_, t.loss_spike_);
  KELVIN_RETURN_IF_ERROR(t.checkpoints_->Resume(test.run_id));
  return trainer;
}

Trainer::Trainer(const config::JobConfig& job, const models::LlamaConfig& arch)
    : job_(job), arch_(arch), loss_spike_(job.training().loss_spike()) {
  if (job.training().threads() > 0) omp_set_num_threads(job.training().threads());
}

absl::Status Trainer::Run() {
  const config::TrainingConfig& t = job_.training();
  // Where the run will write, before its steps rather than after them (every rank alike).
  KELVIN_RETURN_IF_ERROR(CheckOutputLocations(job_));
  const bool checkpoints = !job_.checkpoint().dir().empty();
  std::optional<CheckpointDirectoryLock> lock;  // released when Run returns
  if (checkpoints) {
    KELVIN_ASSIGN_OR_RETURN(lock, checkpoints_->LockDirectory());
  }
  parallel::ProcessGrid& grid = trained_->grid();
  KELVIN_RETURN_IF_ERROR(metrics_->OpenMetricsFile(start_step(), grid.world()));
  LogJobSummary();
  const Stopwatch run_time;
  if (checkpoints && grid.world_rank() == 0) checkpoints_->RemoveUnfinished();
  if (start_step() >= t.steps()) {
    KLOG_RANK0(INFO) << "the checkpoint of step " << start_step()
                     << " completed all training.steps=" << t.steps() << ": nothing to train";
  }
  int64_t tokens = 0;  // of every data-parallel replica (as TensorBoard's tokens_per_second)
  double slowest_iteration = 0;  // seconds of a step with its evaluation and save
  for (int64_t step = start_step(); step < t.steps(); ++step) {
    const Stopwatch iteration_time;
    OpenProfilerWindowAt(step);
    // TrainStep's and Evaluate's errors are every rank's (their inputs and losses are agreed).
    const absl::StatusOr<StepStats> trained = TrainStep(step);
    if (!trained.ok()) return checkpoints_->StopOnAgreedError(trained.status());
    const StepStats& stats = *trained;
    CloseProfilerWindowAfter(step);
    history_.push_back(stats);
    metrics_->RecordStep(stats);
    tokens += stats.tokens * grid.spec().data_parallel;
    if (metrics_->LogsProgress(step)) {
      metrics_->LogProgress(stats, start_step(), tokens, run_time.Seconds());
    }
    const bool last = step + 1 == t.steps();
    const bool evaluates = t.eval_interval() > 0 && (step + 1) % t.eval_interval() == 0;
    if (evaluation_->HasHeldOutData() && (evaluates || last)) {
      const absl::Status evaluated = EvaluateAll(step + 1);
      if (!evaluated.ok()) return checkpoints_->StopOnAgreedError(evaluated);
    }
    const int64_t interval = job_.checkpoint().interval_steps();
    const bool save = checkpoints && (last || (interval > 0 && (step + 1) % interval == 0));
    if (save) {
      KELVIN_RETURN_IF_ERROR(checkpoints_->Save(step + 1, EvalLossAfter(step + 1), /*wait=*/last));
    }
    const Checkpointing::StepAgreement agreed =
        checkpoints && !last ? checkpoints_->AgreeAfterStep() : Checkpointing::StepAgreement{};
    if (agreed.background_save_written) {
      KELVIN_RETURN_IF_ERROR(checkpoints_->FinishBackgroundSave());
    }
    // After a stop signal, a collective that waits far longer than any iteration took means a
    // rank is gone (parallel/comm/stop_deadline.h); once every rank agreed, the save waits as
    // usual.
    slowest_iteration = std::max(slowest_iteration, iteration_time.Seconds());
    parallel::SetStopGraceSeconds(std::max(60.0, 3 * slowest_iteration));
    if (agreed.preemption_signal != 0) {
      return checkpoints_->StopForPreemption(step + 1, agreed.preemption_signal, save,
                                             EvalLossAfter(step + 1));
    }
  }
  if (!t.export_hf_dir().empty()) {
    KELVIN_RETURN_IF_ERROR(ExportHf(t.export_hf_dir()));
    KLOG_RANK0(INFO) << "exported the trained model to " << t.export_hf_dir()
                     << " (Hugging Face format)";
  }
  LogFinished(run_time.Seconds());
  return absl::OkStatus();
}

absl::StatusOr<StepStats> Trainer::TrainStep(int64_t step) {
  return step_->Run(step, metrics_->ReportsTemperatures(step));
}

absl::StatusOr<inference::EvalStats> Trainer::Evaluate(int64_t step) {
  trained_->SettleParameters();  // ZeRO-1's gather of the last step's parameters
  return evaluation_->Evaluate(step);
}

absl::StatusOr<std::vector<std::pair<std::string, inference::EvalStats>>>
Trainer::EvaluateFurtherSets(int64_t step) {
  trained_->SettleParameters();
  return evaluation_->EvaluateFurtherSets(step);
}

absl::Status Trainer::EvaluateAll(int64_t steps_completed) {
  KELVIN_ASSIGN_OR_RETURN(const inference::EvalStats main, Evaluate(steps_completed));
  evaluations_.push_back(main);
  metrics_->RecordEvaluation(main, "");
  KELVIN_ASSIGN_OR_RETURN(const auto further, EvaluateFurtherSets(steps_completed));
  for (const auto& [name, eval] : further) {
    also_evaluations_[name].push_back(eval);
    metrics_->RecordEvaluation(eval, name);
  }
  return absl::OkStatus();
}

std::optional<double> Trainer::EvalLossAfter(int64_t steps_completed) const {
  if (evaluations_.empty() || evaluations_.back().step != steps_completed) return std::nullopt;
  return evaluations_.back().loss;
}

int64_t Trainer::OptimizerStateBytes() const { return trained_->optimizer().StateBytes(); }

int64_t Trainer::MasterWeightBytes() const {
  return trained_->model().parameters().WholeMasterBytes() +
         trained_->optimizer().MasterShardBytes();
}

void Trainer::LogJobSummary() const {
  const Context& ctx = trained_->ctx();
  const models::LlamaModel& model = trained_->model();
  const parallel::GridSpec& g = trained_->grid().spec();
  if (job_.logging().has_profile() && !ctx.is_cuda()) {
    KLOG_RANK0(WARNING) << "logging.profile opens the CUDA profiler's capture window; this run is "
                           "on the CPU: nothing to capture";
  }
  KLOG_RANK0(INFO) << "model: " << arch_.num_layers << " layers, hidden " << arch_.hidden_size
                   << ", " << arch_.num_attention_heads << "/" << arch_.num_key_value_heads
                   << " heads, vocab " << arch_.vocab_size << ", " << arch_.NumParameters()
                   << " parameters (" << model.parameters().NumElements() << " on each rank; "
                   << DTypeName(model.dtype())
                   << (model.parameters().has_model_copy() ? " with f32 master weights" : "")
                   << ", " << ctx.device().ToString() << ", " << omp_get_max_threads()
                   << (omp_get_max_threads() == 1 ? " CPU thread)" : " CPU threads)");
  if (g.world_size > 1) {
    KLOG_RANK0(INFO) << "layout: " << g.world_size << " processes = tensor " << g.tensor_parallel
                     << (g.sequence_parallel ? " (sequence parallel)" : "") << " x context "
                     << g.context_parallel << " x pipeline " << g.pipeline_parallel << " x data "
                     << g.data_parallel
                     << (trained_->optimizer().ShardsState() ? " (distributed optimizer)" : "");
    if (g.pipeline_parallel > 1) {
      KLOG_RANK0(INFO) << "pipeline: " << PipelineScheduleKindName(trained_->pipeline().kind())
                       << ", " << g.virtual_pipeline_stages << " model chunk(s) per stage of "
                       << arch_.num_layers / (g.pipeline_parallel * g.virtual_pipeline_stages)
                       << " layers";
    }
  }
  KLOG_RANK0(INFO) << "batch: " << trained_->micro_batches() << " micro-batches of "
                   << job_.training().micro_batch_size() << " x " << job_.training().seq_length()
                   << " tokens per step";
  if (g.pipeline_parallel == 1) {
    KLOG_RANK0(INFO) << "memory plan per rank: " << MemoryPlanOf(0, 0).ToString();
  } else {
    const int last = g.pipeline_parallel - 1;
    KLOG_RANK0(INFO) << "memory plan of the first stage: " << MemoryPlanOf(0, 0).ToString();
    KLOG_RANK0(INFO) << "memory plan of the last stage: " << MemoryPlanOf(0, last).ToString();
  }
}

bool Trainer::ProfilesStep(int64_t step) const {
  if (!job_.logging().has_profile() || !trained_->ctx().is_cuda()) return false;
  const config::ProfileSteps& profile = job_.logging().profile();
  return step + 1 >= profile.first_step() && step + 1 <= profile.last_step();
}

void Trainer::OpenProfilerWindowAt(int64_t step) {
  const config::ProfileSteps& profile = job_.logging().profile();
  if (!ProfilesStep(step) || (step + 1 != profile.first_step() && step != start_step())) return;
  KLOG_RANK0(INFO) << "profiling steps " << step + 1 << " to " << profile.last_step()
                   << " (the capture window of nsys --capture-range=cudaProfilerApi)";
  StartProfilerCapture();
}

void Trainer::CloseProfilerWindowAfter(int64_t step) {
  if (!ProfilesStep(step) || step + 1 != job_.logging().profile().last_step()) return;
  trained_->ctx().Synchronize();  // the step's kernels inside the window
  StopProfilerCapture();
}

void Trainer::LogFinished(double seconds) {
  // A checkpoint beyond training.steps (the job's steps lowered) counts as done, none in this run.
  const int64_t steps = std::max<int64_t>(job_.training().steps(), start_step());
  std::vector<std::string> outputs;
  if (!job_.checkpoint().dir().empty()) {
    outputs.push_back("checkpoints in " + job_.checkpoint().dir());
  }
  if (!job_.training().export_hf_dir().empty()) {
    outputs.push_back("the model in " + job_.training().export_hf_dir());
  }
  if (!job_.logging().metrics_file().empty()) {
    outputs.push_back("metrics in " + job_.logging().metrics_file());
  }
  if (!job_.logging().tensorboard_dir().empty()) {
    outputs.push_back("TensorBoard events in " + job_.logging().tensorboard_dir());
  }
  KLOG_RANK0(INFO) << "finished " << job_.name() << ": " << steps << " steps ("
                   << steps - start_step() << " in this run, " << FormatDuration(seconds) << ")"
                   << (outputs.empty() ? "" : "; ") << absl::StrJoin(outputs, ", ");
  if (trained_->grid().world_rank() == 0) {
    const absl::Status marked = MarkFinished(job_, steps);
    if (!marked.ok()) KLOG(WARNING) << "the run directory's finish marker: " << marked;
  }
}

absl::Status Trainer::ExportHf(const std::string& directory) {
  parallel::ProcessGrid& grid = trained_->grid();
  // One replica writes: data-parallel rank 0 and, of its context-parallel ranks (each holding the
  // whole replica's weights), rank 0; its tensor and pipeline ranks gather.
  const bool writes = grid.dp_rank() == 0 && grid.cp_rank() == 0;
  // Validated at the start (CheckOutputLocations): the same on every rank.
  KELVIN_ASSIGN_OR_RETURN(
      const models::ExportFormat format,
      ResolveExportFormat(job_, job_.training().export_format(), "training.export_format"));
  trained_->SettleParameters();
  // ZeRO-1's sharded masters, whole in the (free) gradient buffers while exported.
  trained_->optimizer().GatherMasters();
  models::HfExportProvenance provenance = ExportProvenanceOf(job_);
  provenance.steps = std::max<int64_t>(job_.training().steps(), start_step());
  if (!history_.empty()) provenance.train_loss = history_.back().loss;
  if (!evaluations_.empty()) provenance.eval_loss = evaluations_.back().loss;
  const absl::Status exported =
      writes ? trained_->model().ExportHf(directory, provenance, {.format = format})
             : absl::OkStatus();
  trained_->optimizer().ReleaseMasters();
  return exported;
}

}  // namespace kelvin::training
