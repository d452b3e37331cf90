// The training loop: building the job (model, layout, data, optimizer), a step (micro-batches,
// gradient reduction, clipping, the update), evaluation, the progress lines and metrics, and the
// run; the checkpoint side is trainer_checkpoints.cc.
#include "training/trainer.h"

#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "core/allocator.h"
#include "core/logging.h"
#include "core/ops/cross_entropy.h"
#include "core/ops/elementwise.h"
#include "core/ops/grad_norm.h"
#include "core/optim/adamw_optimizer.h"
#include "core/profile_range.h"
#include "data/tasks/passkey_task.h"
#include "models/llama/memory_plan.h"
#include "models/llama/model_flops.h"
#include "parallel/comm/stop_deadline.h"
#include "parallel/context_parallel.h"
#include "parallel/distributed_adamw.h"
#include "parallel/loss/lm_loss.h"
#include "training/checkpoint/checkpoint.h"
#include "training/checkpoint/preemption.h"
#include "training/gradient_check.h"
#include "training/job/job_plan.h"
#include "training/job/parallel_setup.h"
#include "training/lr_schedule.h"
#include "training/run_directory.h"
#include "training/temperature_reduction.h"

namespace kelvin::training {
namespace {

// Whether ResolvePlacement may pick CUDA (then the node-local rank is needed).
bool MayTrainOnCuda(const config::JobConfig& job) {
  return job.training().device() == config::TrainingConfig::CUDA ||
         (job.training().device() == config::TrainingConfig::AUTO && CudaAvailable());
}

double SecondsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// One line per layer: tau^q and tau^v as mean +- std [min, max], and the range of sigma(alpha)
// over the heads (docs/ssa.md, "Statistics").
void LogTemperatureStatistics(const std::vector<ssa::TemperatureStatistics>& layers) {
  auto summary = [](const ssa::TemperatureSummary& s) {
    return s.count == 0 ? std::string("off")
                        : absl::StrFormat("%.4f +- %.4f [%.4f, %.4f]", s.mean, s.std, s.min, s.max);
  };
  for (size_t l = 0; l < layers.size(); ++l) {
    const ssa::TemperatureStatistics& t = layers[l];
    std::string alpha = "off";
    if (!t.sigma_alpha.empty()) {
      const auto [lo, hi] = std::minmax_element(t.sigma_alpha.begin(), t.sigma_alpha.end());
      alpha = absl::StrFormat("[%.3g, %.3g]", *lo, *hi);
    }
    KLOG_RANK0(INFO) << absl::StrFormat("  ssa layer %d | tau^q %s | tau^v %s | sigma(alpha) %s", l,
                                        summary(t.query), summary(t.value), alpha);
  }
}

}  // namespace

std::string FormatEvalStats(const EvalStats& eval) {
  return absl::StrFormat("loss %.4f | token accuracy %.1f%%", eval.loss,
                         100 * eval.token_accuracy) +
         (eval.retrieval_accuracy >= 0
              ? absl::StrFormat(" | passkey retrieval %.1f%%", 100 * eval.retrieval_accuracy)
              : "");
}

absl::StatusOr<std::unique_ptr<Trainer>> Trainer::Create(const config::JobConfig& job,
                                                         MPI_Comm world,
                                                         const TrainerTestOptions& test) {
  KELVIN_ASSIGN_OR_RETURN(const models::LlamaConfig arch, ResolveModelArchitecture(job.model()));
  KELVIN_RETURN_IF_ERROR(CheckSequenceLength(job, arch));
  std::unique_ptr<Trainer> trainer(new Trainer(job, arch));
  // The node's processes pick their GPUs (a collective over `world`, only where CUDA may be used).
  const NodePlace node = MayTrainOnCuda(job) ? NodePlaceOf(world) : NodePlace{};
  KELVIN_ASSIGN_OR_RETURN(TrainingPlacement placement, ResolvePlacement(job, node.rank));
  placement.separate_master = placement.separate_master || test.separate_master;
  trainer->ctx_ = placement.ctx;
  KELVIN_ASSIGN_OR_RETURN(trainer->grid_,
                          BuildProcessGrid(job, arch, world, placement.ctx, node.size));
  models::LlamaParallelism parallelism;
  parallel::ProcessGrid* grid = trainer->grid_.get();
  const parallel::GridSpec& spec = grid->spec();
  parallelism.tp = &grid->tp();
  parallelism.cp = &grid->cp();
  parallelism.pp = &grid->pp();
  parallelism.sequence_parallel = spec.sequence_parallel;
  parallelism.virtual_stages = spec.pipeline_parallel > 1 ? spec.virtual_pipeline_stages : 1;
  parallelism.embedding = grid->embedding();
  trainer->micro_batches_ = spec.gradient_accumulation_steps;
  // Every layout runs a pipeline program, one stage's each micro-batch's forward then its
  // backward. Built before the model: its errors come first.
  const bool pipelined = spec.pipeline_parallel > 1;
  const parallel::PipelineScheduleKind schedule =
      pipelined ? ScheduleKindOf(job.parallel().pipeline_schedule())
                : parallel::PipelineScheduleKind::kOneForwardOneBackward;
  KELVIN_ASSIGN_OR_RETURN(
      std::vector<parallel::PipelineStep> program,
      parallel::BuildPipelineProgram(schedule, spec.pipeline_parallel, grid->pp_rank(),
                                     static_cast<int>(trainer->micro_batches_),
                                     pipelined ? spec.virtual_pipeline_stages : 1));
  const bool distributed_optimizer =
      job.parallel().distributed_optimizer() && trainer->GradientReplicas() > 1;
  // Before anything is allocated: a plan beyond the device is a message, not bad_alloc.
  KELVIN_RETURN_IF_ERROR(trainer->CheckPlanFitsDevice(placement, distributed_optimizer));
  KELVIN_ASSIGN_OR_RETURN(trainer->model_,
                          BuildModel(job, arch, parallelism, placement,
                                     distributed_optimizer ? trainer->GradientReplicas() : 1));
  trainer->pipeline_ = std::make_unique<parallel::PipelineRunner>(schedule, std::move(program),
                                                                  *trainer->model_, grid->pp());
  KELVIN_ASSIGN_OR_RETURN(trainer->data_, BuildDataSources(job, arch));
  const bool logging_rank = grid->world_rank() == 0;
  if (!job.logging().tensorboard_dir().empty() && logging_rank) {
    KELVIN_ASSIGN_OR_RETURN(trainer->tensorboard_,
                            TensorBoardWriter::Open(job.logging().tensorboard_dir()));
  }
  const config::OptimizerConfig& opt = job.optimizer();
  const AdamWSettings settings{opt.beta1(), opt.beta2(), opt.eps(), opt.weight_decay(),
                               arch.ssa.has_value() ? arch.ssa->temperature_lr_scale : 1.0};
  ParameterSet& params = trainer->model_->parameters();
  parallel::Communicator& replicas = grid->dp_cp();
  parallel::DistributedAdamW* zero = nullptr;
  if (distributed_optimizer) {
    auto sharded = std::make_unique<parallel::DistributedAdamW>(params, settings, replicas);
    zero = sharded.get();
    trainer->optimizer_ = std::move(sharded);
  } else {
    trainer->optimizer_ = std::make_unique<AdamWOptimizer>(params, settings);
  }
  if (replicas.size() > 1) {
    trainer->gradient_buckets_ = std::make_unique<parallel::GradientBuckets>(
        params, replicas,
        parallel::PlanGradientBuckets(params, trainer->model_->gradient_units().parameters,
                                      job.parallel().grad_bucket_elements()),
        job.parallel().overlap_grad_reduce(), zero);
    trainer->model_->ReportFinishedGradients(
        static_cast<int>(trainer->micro_batches_),
        [buckets = trainer->gradient_buckets_.get()](int unit) { buckets->Finished(unit); });
  }
  if (zero != nullptr && job.parallel().overlap_param_gather()) {
    trainer->parameter_gather_ = std::make_unique<parallel::ParameterGather>(
        params, replicas, trainer->gradient_buckets_->buckets(), *zero);
    trainer->model_->WaitForParametersWith(
        [gather = trainer->parameter_gather_.get()](int unit) { gather->WaitFor(unit); });
  }
  KELVIN_RETURN_IF_ERROR(trainer->Resume(test.run_id));
  return trainer;
}

bool Trainer::LogsProgress(int64_t step) const {
  return (step + 1) % job_.logging().log_interval() == 0 || step + 1 == job_.training().steps();
}

bool Trainer::ReportsTemperatures(int64_t step) const {
  if (!arch_.ssa.has_value()) return false;
  const config::LoggingConfig& logging = job_.logging();
  if (!logging.metrics_file().empty() || !logging.tensorboard_dir().empty()) return true;
  return job_.model().ssa().log_statistics() && LogsProgress(step);
}

bool Trainer::ProfilesStep(int64_t step) const {
  if (!job_.logging().has_profile() || !ctx_.is_cuda()) return false;
  const config::ProfileSteps& profile = job_.logging().profile();
  return step + 1 >= profile.first_step() && step + 1 <= profile.last_step();
}

Trainer::Trainer(const config::JobConfig& job, const models::LlamaConfig& arch)
    : job_(job), arch_(arch), loss_spike_(job.training().loss_spike()) {
  const config::TrainingConfig& t = job.training();
  micro_batches_ = t.gradient_accumulation_steps() > 0
                       ? t.gradient_accumulation_steps()
                       : std::max<int64_t>(t.global_batch_size() / t.micro_batch_size(), 1);
  if (t.threads() > 0) omp_set_num_threads(t.threads());
}

absl::StatusOr<StepStats> Trainer::TrainStep(int64_t step) {
  const ProfileRange range(absl::StrCat("step ", step + 1));
  const auto start = std::chrono::steady_clock::now();
  const double communication_before = grid_->CommunicationSeconds();
  const double pipeline_before = grid_->PipelineCommunicationSeconds();
  KELVIN_ASSIGN_OR_RETURN(StepStats stats, TrainStepUntimed(step));
  stats.seconds = SecondsSince(start);
  stats.communication_seconds = grid_->CommunicationSeconds() - communication_before;
  stats.pipeline_transfer_seconds = grid_->PipelineCommunicationSeconds() - pipeline_before;
  return stats;
}

absl::StatusOr<StepStats> Trainer::TrainStepUntimed(int64_t step) {
  const Context host = Context::Cpu();
  // The whole global batch first: its labelled-token count normalises every micro-batch's loss,
  // so accumulating M micro-batches gives exactly the gradient of the one big batch.
  std::vector<data::Batch> batches;
  int64_t labelled = 0;
  absl::Status read = absl::OkStatus();
  for (int64_t m = 0; m < micro_batches_; ++m) {
    absl::StatusOr<data::Batch> batch =
        data_.train->BatchAt({step, m, micro_batches_, DataParallelRank(), DataParallelSize()});
    if (!batch.ok()) {
      read = batch.status();
      break;
    }
    labelled += ops::CountNonIgnored(host, LocalLabels(*batch));
    batches.push_back(std::move(batch).value());
  }
  // A bad row fails the replica that reads it: every rank stops, none waits in a collective.
  KELVIN_RETURN_IF_ERROR(parallel::AgreeOnStatus(
      grid_->world(), read, absl::StrCat("reading the batches of step ", step + 1)));
  labelled = static_cast<int64_t>(SumOverReplicas(static_cast<double>(labelled)));
  StepStats stats;
  stats.step = step;
  stats.labelled_tokens = labelled;
  ParameterSet& params = model_->parameters();
  // While the last step's parameter gather is in flight, its stretches of the gradient buffers
  // receive masters, zeroed as the forward waits for them; the rest is zero already.
  if (parameter_gather_ == nullptr || !parameter_gather_->in_flight()) params.ZeroGrads();
  if (labelled == 0) {
    KLOG_RANK0(WARNING) << "step " << step + 1 << " has no labelled token; no update";
    return stats;
  }
  // The steps that report temperatures record those of their last micro-batch.
  const bool reads_temperatures = ReportsTemperatures(step);
  model_->RecordTemperatureStatisticsOf(reads_temperatures ? static_cast<int>(micro_batches_) - 1
                                                           : models::LlamaModel::kNoMicroBatch);
  const auto micro_batches_start = std::chrono::steady_clock::now();
  for (const double loss : RunMicroBatches(batches, 1.0 / static_cast<double>(labelled))) {
    stats.loss += loss;  // in micro-batch order on every layout
  }
  stats.micro_batch_seconds = SecondsSince(micro_batches_start);
  KELVIN_CHECK(parameter_gather_ == nullptr || !parameter_gather_->in_flight())
      << "the step's forward did not read every parameter bucket the last step gathered";
  {
    // What the backward did not finish and start already (gradient_buckets_).
    const ProfileRange reduction("gradient reduction");
    model_->FinishGradients();
    if (gradient_buckets_ != nullptr) gradient_buckets_->Wait();
  }
  for (const data::Batch& batch : batches) stats.tokens += batch.tokens.numel();
  stats.loss = FromLastStage(SumOverReplicas(stats.loss)) / static_cast<double>(labelled);
  if (!std::isfinite(stats.loss)) {
    return absl::InternalError(absl::StrCat("the loss became ", stats.loss, " at step ", step + 1,
                                            ": training diverged; lower optimizer.lr (now ",
                                            job_.optimizer().lr(),
                                            ") or raise lr_schedule.warmup_steps"));
  }
  // The loss every rank agrees on: every rank judges alike, and stops or skips alike.
  const LossSpikeRule::Judgement spike = loss_spike_.Judge(stats.loss);
  if (spike.verdict == LossSpikeRule::Verdict::kStop) {
    return loss_spike_.StopError(step + 1, stats.loss, spike, job_.optimizer().lr(),
                                 ResumeAdviceBeforeSpike(step + 1));
  }
  stats.skipped = spike.verdict == LossSpikeRule::Verdict::kSkip;
  // A skipped step's gradients are only measured (max_norm 0: not clipped), not applied.
  stats.grad_norm = ClipGradients(stats.skipped ? 0.0 : job_.optimizer().grad_clip_norm());
  stats.lr =
      LearningRateAt(job_.lr_schedule(), job_.optimizer().lr(), job_.training().steps(), step);
  if (stats.skipped) {
    KLOG_RANK0(WARNING) << loss_spike_.SkipWarning(step + 1, stats.loss, spike);
  } else {
    KELVIN_RETURN_IF_ERROR(CheckGradientsFinite(ctx_, params, step + 1, stats.loss, stats.grad_norm,
                                                job_.optimizer().lr()));
    const ProfileRange update("optimizer step");
    optimizer_->Step(ctx_, stats.lr);
  }
  if (!reads_temperatures) return stats;
  // Every head and token of the micro-batch (tensor and context ranks), then every layer (stages).
  std::vector<ssa::TemperatureStatistics> temperatures = model_->TemperatureStatistics();
  temperatures = MergeOver(grid_->tp(), temperatures, /*gather_heads=*/true);
  temperatures = MergeOver(grid_->cp(), temperatures, /*gather_heads=*/false);
  stats.temperatures =
      GatherOverStages(grid_->pp(), model_->stage(), model_->config().num_layers, temperatures);
  return stats;
}

std::vector<double> Trainer::RunMicroBatches(const std::vector<data::Batch>& batches,
                                             double loss_scale) {
  // The loss of a micro-batch from its logits, leaving dlogits in place.
  auto loss = [&](Tensor& logits, int m) {
    return parallel::SoftmaxCrossEntropySum(ctx_, model_->tp(), logits, LocalLabels(batches[m]),
                                            model_->layout().vocab_begin, loss_scale);
  };
  std::vector<parallel::MicroBatchInput> inputs;
  for (const data::Batch& batch : batches) inputs.push_back({batch.tokens, batch.positions});
  return pipeline_->RunStep(ctx_, inputs, loss);
}

models::MemoryPlan Trainer::MemoryPlanOf(int tensor_rank, int pipeline_rank) const {
  JobLayout layout;
  layout.spec = grid_->spec();
  layout.dtype = model_->dtype();
  layout.separate_master = model_->parameters().has_model_copy();
  layout.distributed_optimizer = optimizer_->ShardsState();
  const absl::StatusOr<models::MemoryPlan> plan =
      PlanRankMemory(job_, arch_, layout, tensor_rank, pipeline_rank);
  KELVIN_CHECK(plan.ok()) << plan.status();  // this rank's pipeline program was built the same way
  return *plan;
}

absl::Status Trainer::CheckPlanFitsDevice(const TrainingPlacement& placement,
                                          bool distributed_optimizer) const {
  JobLayout layout;
  layout.spec = grid_->spec();
  layout.dtype = placement.dtype;
  layout.separate_master = placement.separate_master || placement.dtype != DType::kF32;
  layout.distributed_optimizer = distributed_optimizer;
  KELVIN_ASSIGN_OR_RETURN(
      const models::MemoryPlan plan,
      PlanRankMemory(job_, arch_, layout, TensorParallelRank(), PipelineParallelRank()));
  const int64_t available = DeviceMemoryBytes(placement.ctx.device());
  if (available <= 0 || plan.Total() <= available) return absl::OkStatus();
  std::vector<std::string> remedies = ActivationMemoryRemedies(job_);
  remedies.push_back("spread the model over more processes (parallel.*; kelvin plan --layouts)");
  const auto gib = [](int64_t bytes) { return static_cast<double>(bytes) / (1 << 30); };
  return absl::ResourceExhaustedError(absl::StrFormat(
      "this rank's memory plan needs %.2f GiB (%s), more than the %.2f GiB of %s: %s",
      gib(plan.Total()), plan.ToString(), gib(available), placement.ctx.device().ToString(),
      absl::StrJoin(remedies, ", or ")));
}

int64_t Trainer::OptimizerStateBytes() const { return optimizer_->StateBytes(); }

int64_t Trainer::MasterWeightBytes() const {
  return model_->parameters().WholeMasterBytes() + optimizer_->MasterShardBytes();
}

double Trainer::FromLastStage(double value) {
  if (PipelineStages() == 1) return value;
  // The last stage's value, zeros elsewhere.
  return grid_->pp().AllReduceScalar(grid_->is_last_stage() ? value : 0.0,
                                     parallel::ReduceOp::kSum);
}

void Trainer::SettleParameters() {
  if (parameter_gather_ != nullptr) parameter_gather_->WaitAll();
}

double Trainer::SumOverReplicas(double value) {
  return GradientReplicas() == 1 ? value
                                 : grid_->dp_cp().AllReduceScalar(value, parallel::ReduceOp::kSum);
}

Tensor Trainer::LocalLabels(const data::Batch& batch) const {
  if (ContextParallelSize() == 1) return batch.labels.View({-1});
  return parallel::LocalSequence(batch.labels, batch.rows(), grid_->cp_rank(),
                                 ContextParallelSize());
}

double Trainer::ClipGradients(double max_norm) {
  // Each parameter of the full model once: this rank's shards, and replicated tensors only where
  // IsCanonicalCopy says; the squares summed over the data-parallel replicas where they hold
  // shards (the optimizer), the tensor-parallel group and the pipeline stages.
  double squares = optimizer_->GradientSumOfSquares(
      [&](const std::string& name) { return model_->IsCanonicalCopy(name); });
  squares = model_->tp().AllReduceScalar(squares, parallel::ReduceOp::kSum);
  squares = grid_->pp().AllReduceScalar(squares, parallel::ReduceOp::kSum);
  const double norm = std::sqrt(squares);
  const double coefficient = max_norm > 0 ? ops::ClipCoefficient(norm, max_norm) : 1.0;
  // `coefficient < 1` is false for NaN; a non-finite norm stops the step before the update
  // (CheckGradientsFinite).
  if (coefficient < 1) optimizer_->ScaleGradients(coefficient);
  return norm;
}

absl::Status Trainer::OpenMetricsFile() {
  if (job_.logging().metrics_file().empty()) return absl::OkStatus();
  absl::Status opened = absl::OkStatus();
  if (WorldRank() == 0) {  // from the step the run resumed at
    absl::StatusOr<MetricsFile> metrics =
        MetricsFile::Open(job_.logging().metrics_file(), start_step_);
    if (metrics.ok()) metrics_ = std::make_unique<MetricsFile>(std::move(*metrics));
    opened = metrics.status();
  }
  return parallel::AgreeOnStatus(grid_->world(), opened, "opening logging.metrics_file");
}

void Trainer::RecordScalars(int64_t step,
                            const std::vector<std::pair<std::string, double>>& scalars) {
  // Rank 0's alone: on a write error training goes on (the others would wait for it).
  if (metrics_ != nullptr) {
    const absl::Status appended = metrics_->Append(step, scalars);
    if (!appended.ok()) {
      KLOG(WARNING) << "the metrics file stops here: " << appended;
      metrics_.reset();
    }
  }
  if (tensorboard_ == nullptr) return;
  for (const auto& [tag, value] : scalars) {
    const absl::Status added = tensorboard_->AddScalar(tag, step, value);
    if (!added.ok()) {
      KLOG(WARNING) << "TensorBoard logging stops here: " << added;
      tensorboard_.reset();
      return;
    }
  }
}

Trainer::Throughput Trainer::ThroughputOf(double tokens_per_second) const {
  const double flops = models::TrainingFlopsPerToken(arch_, job_.training().seq_length()) *
                       tokens_per_second / static_cast<double>(WorldSize());
  const double peak = job_.logging().peak_tflops() * 1e12;
  return {flops / 1e12, peak > 0 ? flops / peak : 0.0};
}

double Trainer::PeakMemoryGiB() const {
  return static_cast<double>(AllocatorFor(ctx_.device()).stats().peak_bytes_in_use) /
         static_cast<double>(1ull << 30);
}

void Trainer::RecordStepScalars(const StepStats& stats) {
  if (tensorboard_ == nullptr && metrics_ == nullptr) return;
  const int64_t step = stats.step + 1;  // steps completed, as the progress lines count
  const double tokens_per_second = stats.tokens * DataParallelSize() / stats.seconds;
  std::vector<std::pair<std::string, double>> scalars = {
      {"train/loss", stats.loss},
      {"train/learning_rate", stats.lr},
      {"train/grad_norm", stats.grad_norm},
      {"train/step_seconds", stats.seconds},
      {"train/tokens_per_second", tokens_per_second},
      {"train/peak_memory_gib", PeakMemoryGiB()}};
  const Throughput rate = ThroughputOf(tokens_per_second);
  scalars.emplace_back("train/tflops_per_process", rate.tflops_per_process);
  if (rate.mfu > 0) scalars.emplace_back("train/mfu", rate.mfu);
  if (WorldSize() > 1) {
    scalars.emplace_back("train/communication_share", stats.communication_seconds / stats.seconds);
  }
  for (size_t l = 0; l < stats.temperatures.size(); ++l) {
    const ssa::TemperatureStatistics& t = stats.temperatures[l];
    const std::string layer = absl::StrCat("ssa/layer_", l, "/");
    if (t.query.count > 0) {
      scalars.emplace_back(layer + "tau_q_mean", t.query.mean);
      scalars.emplace_back(layer + "tau_q_std", t.query.std);
    }
    if (t.value.count > 0) {
      scalars.emplace_back(layer + "tau_v_mean", t.value.mean);
      scalars.emplace_back(layer + "tau_v_std", t.value.std);
    }
    if (!t.sigma_alpha.empty()) {
      const auto [lo, hi] = std::minmax_element(t.sigma_alpha.begin(), t.sigma_alpha.end());
      scalars.emplace_back(layer + "sigma_alpha_min", *lo);
      scalars.emplace_back(layer + "sigma_alpha_max", *hi);
    }
  }
  RecordScalars(step, scalars);
}

absl::Status Trainer::EvaluateAll(int64_t steps_completed) {
  // `name` "": the main evaluation (eval/loss, ...); else data.also_eval's (eval/<name>/loss).
  const auto record = [&](const EvalStats& eval, const std::string& name) {
    const std::string prefix = name.empty() ? "eval/" : absl::StrCat("eval/", name, "/");
    std::vector<std::pair<std::string, double>> scalars = {
        {prefix + "loss", eval.loss}, {prefix + "token_accuracy", eval.token_accuracy}};
    if (eval.retrieval_accuracy >= 0) {
      scalars.emplace_back(prefix + "passkey_retrieval", eval.retrieval_accuracy);
    }
    RecordScalars(eval.step, scalars);
    KLOG_RANK0(INFO) << "eval" << (name.empty() ? "" : " of " + name) << " at step "
                     << steps_completed << " | " << FormatEvalStats(eval);
  };
  KELVIN_ASSIGN_OR_RETURN(const EvalStats main, Evaluate(steps_completed));
  evaluations_.push_back(main);
  record(main, "");
  KELVIN_ASSIGN_OR_RETURN(const auto further, EvaluateFurtherSets(steps_completed));
  for (const auto& [name, eval] : further) {
    also_evaluations_[name].push_back(eval);
    record(eval, name);
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<std::pair<std::string, EvalStats>>> Trainer::EvaluateFurtherSets(
    int64_t step) {
  std::vector<std::pair<std::string, EvalStats>> evaluated;
  for (NamedEvalSource& also : data_.also_eval) {
    KELVIN_ASSIGN_OR_RETURN(const EvalStats eval,
                            EvaluateOn(*also.source, /*passkey=*/false, step));
    evaluated.emplace_back(also.name, eval);
  }
  return evaluated;
}

absl::StatusOr<EvalStats> Trainer::Evaluate(int64_t step) {
  if (data_.eval == nullptr && job_.data().has_passkey()) {
    return absl::FailedPreconditionError(
        "the job has no held-out data: data.passkey draws held-out samples only with "
        "training.eval_interval > 0; set it (e.g. --set training.eval_interval=50)");
  }
  if (data_.eval == nullptr) {
    return absl::FailedPreconditionError(
        "the job has no held-out data: use data.passkey, or give a corpus data.eval_fraction or "
        "a data.eval corpus");
  }
  return EvaluateOn(*data_.eval, data_.passkey, step);
}

absl::StatusOr<EvalStats> Trainer::EvaluateOn(data::BatchSource& source, bool passkey,
                                              int64_t step) {
  const ProfileRange range(absl::StrCat("evaluation at step ", step));
  SettleParameters();
  EvalStats stats{step, 0, passkey ? 0.0 : -1.0};
  int64_t labelled = 0, rows = 0, retrieved = 0, correct = 0;
  // Each data-parallel replica scores every DP-th batch (the same set on every layout); the sums
  // span the replicas.
  // The micro-batches: training.eval_steps global batches (the same rows at every evaluation), or
  // with training.eval_whole_set every row of the held-out data, B at a time.
  const config::TrainingConfig& t = job_.training();
  const std::optional<int64_t> whole_set =
      t.eval_whole_set() ? source.FixedRowCount() : std::nullopt;
  const int64_t micro_batch_count =
      whole_set.has_value() ? (*whole_set + t.micro_batch_size() - 1) / t.micro_batch_size()
                            : t.eval_steps() * (t.global_batch_size() / t.micro_batch_size());
  absl::Status read = absl::OkStatus();
  for (int64_t i = DataParallelRank(); i < micro_batch_count; i += DataParallelSize()) {
    const absl::StatusOr<data::Batch> next = whole_set.has_value()
                                                 ? source.FixedRowsAt(i * t.micro_batch_size())
                                                 : source.BatchAt({i, 0, 1, 0, 1});
    if (!next.ok()) {  // at the same batch on every rank of this replica
      read = next.status();
      break;
    }
    const data::Batch& batch = *next;
    const Tensor labels = LocalLabels(batch);  // [N] this rank's tokens
    labelled += ops::CountNonIgnored(Context::Cpu(), labels);
    rows += batch.rows();
    const Tensor* logits = pipeline_->Forward(ctx_, {batch.tokens, batch.positions});
    if (logits == nullptr) continue;  // a pipeline stage before the last
    Tensor predictions = Tensor::Empty({logits->dim(0)}, DType::kI32);  // [N]
    stats.loss += parallel::CrossEntropySum(ctx_, model_->tp(), *logits, labels,
                                            model_->layout().vocab_begin, &predictions);
    correct += parallel::CountCorrectPredictions(labels, predictions);
    if (passkey) {
      Tensor all = predictions;  // [B, T] every context-parallel rank's tokens
      if (ContextParallelSize() > 1) {
        all = Tensor::Empty(batch.tokens.shape(), DType::kI32);
        Tensor scratch = Tensor::Empty({all.numel()}, DType::kI32);
        parallel::GatherSequence(Context::Cpu(), grid_->cp(), batch.rows(), predictions, scratch,
                                 all);
      }
      retrieved += data::CountRetrieved(batch, all.View(batch.tokens.shape()));
    }
  }
  KELVIN_RETURN_IF_ERROR(
      parallel::AgreeOnStatus(grid_->world(), read, "reading the held-out batches"));
  labelled = static_cast<int64_t>(SumOverReplicas(static_cast<double>(labelled)));
  stats.loss = FromLastStage(SumOverReplicas(stats.loss)) /
               static_cast<double>(std::max<int64_t>(labelled, 1));
  stats.labelled_tokens = labelled;
  stats.correct_tokens =
      static_cast<int64_t>(FromLastStage(SumOverReplicas(static_cast<double>(correct))));
  stats.token_accuracy = static_cast<double>(stats.correct_tokens) /
                         static_cast<double>(std::max<int64_t>(labelled, 1));
  if (passkey) {  // whole rows: the context-parallel ranks count the same ones
    const auto over_data_parallel = [&](double value) {
      return DataParallelSize() == 1 ? value
                                     : grid_->dp().AllReduceScalar(value, parallel::ReduceOp::kSum);
    };
    stats.retrieval_accuracy = FromLastStage(over_data_parallel(static_cast<double>(retrieved))) /
                               over_data_parallel(static_cast<double>(rows));
  }
  return stats;
}

absl::Status Trainer::Run() {
  const config::TrainingConfig& t = job_.training();
  // Where the run will write, before its steps rather than after them (every rank alike).
  KELVIN_RETURN_IF_ERROR(CheckOutputLocations(job_));
  const bool checkpoints = !job_.checkpoint().dir().empty();
  std::optional<CheckpointDirectoryLock> lock;  // released when Run returns
  if (checkpoints) {
    KELVIN_ASSIGN_OR_RETURN(lock, LockCheckpointDirectory());
  }
  KELVIN_RETURN_IF_ERROR(OpenMetricsFile());
  if (job_.logging().has_profile() && !ctx_.is_cuda()) {
    KLOG_RANK0(WARNING) << "logging.profile opens the CUDA profiler's capture window; this run is "
                           "on the CPU: nothing to capture";
  }
  KLOG_RANK0(INFO) << "model: " << arch_.num_layers << " layers, hidden " << arch_.hidden_size
                   << ", " << arch_.num_attention_heads << "/" << arch_.num_key_value_heads
                   << " heads, vocab " << arch_.vocab_size << ", " << arch_.NumParameters()
                   << " parameters (" << model_->parameters().NumElements() << " on each rank; "
                   << DTypeName(model_->dtype())
                   << (model_->parameters().has_model_copy() ? " with f32 master weights" : "")
                   << ", " << ctx_.device().ToString() << ", " << omp_get_max_threads()
                   << (omp_get_max_threads() == 1 ? " CPU thread)" : " CPU threads)");
  if (WorldSize() > 1) {
    const parallel::GridSpec& g = grid_->spec();
    KLOG_RANK0(INFO) << "layout: " << g.world_size << " processes = tensor " << g.tensor_parallel
                     << (g.sequence_parallel ? " (sequence parallel)" : "") << " x context "
                     << g.context_parallel << " x pipeline " << g.pipeline_parallel << " x data "
                     << g.data_parallel
                     << (optimizer_->ShardsState() ? " (distributed optimizer)" : "");
    if (PipelineStages() > 1) {
      KLOG_RANK0(INFO) << "pipeline: " << PipelineScheduleKindName(pipeline_->kind()) << ", "
                       << g.virtual_pipeline_stages << " model chunk(s) per stage of "
                       << arch_.num_layers / (g.pipeline_parallel * g.virtual_pipeline_stages)
                       << " layers";
    }
  }
  KLOG_RANK0(INFO) << "batch: " << micro_batches_ << " micro-batches of " << t.micro_batch_size()
                   << " x " << t.seq_length() << " tokens per step";
  if (PipelineStages() == 1) {
    KLOG_RANK0(INFO) << "memory plan per rank: " << MemoryPlanOf(0, 0).ToString();
  } else {
    const int last = grid_->spec().pipeline_parallel - 1;
    KLOG_RANK0(INFO) << "memory plan of the first stage: " << MemoryPlanOf(0, 0).ToString();
    KLOG_RANK0(INFO) << "memory plan of the last stage: " << MemoryPlanOf(0, last).ToString();
  }
  const auto start = std::chrono::steady_clock::now();
  if (checkpoints && WorldRank() == 0) RemoveUnfinishedCheckpoints();
  if (start_step_ >= t.steps()) {
    KLOG_RANK0(INFO) << "the checkpoint of step " << start_step_
                     << " completed all training.steps=" << t.steps() << ": nothing to train";
  }
  int64_t tokens = 0;  // of every data-parallel replica (as TensorBoard's tokens_per_second)
  double slowest_iteration = 0;  // seconds of a step with its evaluation and save
  for (int64_t step = start_step_; step < t.steps(); ++step) {
    const auto iteration_start = std::chrono::steady_clock::now();
    if (ProfilesStep(step) &&
        (step + 1 == job_.logging().profile().first_step() || step == start_step_)) {
      KLOG_RANK0(INFO) << "profiling steps " << step + 1 << " to "
                       << job_.logging().profile().last_step()
                       << " (the capture window of nsys --capture-range=cudaProfilerApi)";
      StartProfilerCapture();
    }
    // TrainStep's and Evaluate's errors are every rank's (their inputs and losses are agreed).
    const absl::StatusOr<StepStats> trained = TrainStep(step);
    if (!trained.ok()) return StopOnAgreedError(trained.status());
    const StepStats& stats = *trained;
    if (ProfilesStep(step) && step + 1 == job_.logging().profile().last_step()) {
      ctx_.Synchronize();  // the step's kernels inside the window
      StopProfilerCapture();
    }
    history_.push_back(stats);
    RecordStepScalars(stats);
    tokens += stats.tokens * DataParallelSize();
    const bool last = step + 1 == t.steps();
    if (LogsProgress(step)) {
      const double elapsed =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      const double eta =
          elapsed / static_cast<double>(step + 1 - start_step_) * (t.steps() - step - 1);
      const Throughput rate = ThroughputOf(tokens / elapsed);
      KLOG_RANK0(INFO) << absl::StrFormat(
                              "step %d/%d | loss %.4f | lr %.2e | grad norm %.3f | %.0f tok/s | "
                              "%.3g TFLOP/s per process%s | peak mem %.2f GiB | ETA %s",
                              step + 1, t.steps(), stats.loss, stats.lr, stats.grad_norm,
                              tokens / elapsed, rate.tflops_per_process,
                              rate.mfu > 0 ? absl::StrFormat(" (MFU %.1f%%)", 100 * rate.mfu) : "",
                              PeakMemoryGiB(), FormatDuration(eta))
                       << (WorldSize() > 1
                               ? absl::StrFormat(" | comm %.0f%%",
                                                 100 * stats.communication_seconds / stats.seconds)
                               : "");
      if (arch_.ssa.has_value() && job_.model().ssa().log_statistics()) {
        LogTemperatureStatistics(stats.temperatures);
      }
    }
    const bool evaluates = t.eval_interval() > 0 && (step + 1) % t.eval_interval() == 0;
    if (data_.eval != nullptr && (evaluates || last)) {
      const absl::Status evaluated = EvaluateAll(step + 1);
      if (!evaluated.ok()) return StopOnAgreedError(evaluated);
    }
    const int64_t interval = job_.checkpoint().interval_steps();
    const bool save = checkpoints && (last || (interval > 0 && (step + 1) % interval == 0));
    if (save) KELVIN_RETURN_IF_ERROR(SaveCheckpointAt(step + 1, /*wait=*/last));
    const StepAgreement agreed = checkpoints && !last ? AgreeAfterStep() : StepAgreement{};
    if (agreed.background_save_written) KELVIN_RETURN_IF_ERROR(FinishBackgroundSave());
    const int signal = agreed.preemption_signal;
    // After a stop signal, a collective that waits far longer than any iteration took means a
    // rank is gone (parallel/comm/stop_deadline.h); once every rank agreed, the save waits as
    // usual.
    slowest_iteration = std::max(slowest_iteration, SecondsSince(iteration_start));
    parallel::SetStopGraceSeconds(std::max(60.0, 3 * slowest_iteration));
    if (signal != 0) {
      parallel::DisarmStopDeadline();
      if (!save) {
        KELVIN_RETURN_IF_ERROR(SaveCheckpointAt(step + 1, /*wait=*/true));
      } else if (background_save_.in_flight()) {  // this step's
        KELVIN_RETURN_IF_ERROR(FinishBackgroundSave());
      }
      if (WorldRank() == 0) {
        const absl::Status marked = MarkStoppedForPreemption(job_, step + 1, signal);
        if (!marked.ok()) KLOG(WARNING) << "the run directory's stop marker: " << marked;
      }
      return absl::CancelledError(
          absl::StrCat("stopped by ", StopSignalDescription(signal), " after step ", step + 1,
                       " of ", t.steps(), "; the checkpoint of step ", step + 1, " is saved in ",
                       job_.checkpoint().dir(), ": ", ResumeAdvice()));
    }
  }
  if (!t.export_hf_dir().empty()) {
    KELVIN_RETURN_IF_ERROR(ExportHf(t.export_hf_dir()));
    KLOG_RANK0(INFO) << "exported the trained model to " << t.export_hf_dir()
                     << " (Hugging Face format)";
  }
  LogFinished(SecondsSince(start));
  return absl::OkStatus();
}

void Trainer::RemoveUnfinishedCheckpoints() {
  const absl::StatusOr<std::vector<std::string>> removed =
      RemoveCheckpointLeftovers(job_.checkpoint().dir());
  if (!removed.ok()) {
    KLOG(WARNING) << "unfinished checkpoints stay: " << removed.status();
    return;
  }
  for (const std::string& path : *removed) {
    KLOG(INFO) << "removed " << path << ", left by an interrupted checkpoint save or deletion";
  }
}

std::string Trainer::ResumeAdvice() {
  const char* slurm_job = std::getenv("SLURM_JOB_ID");
  if (slurm_job == nullptr) return "run the same job again to resume";
  return absl::StrCat("SLURM job ", slurm_job,
                      " continues from it when it runs again (its batch script requeues it after "
                      "a time-limit warning; a preempted job is requeued by SLURM)");
}

void Trainer::LogFinished(double seconds) {
  // A checkpoint beyond training.steps (the job's steps lowered) counts as done, none in this run.
  const int64_t steps = std::max<int64_t>(job_.training().steps(), start_step_);
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
                   << steps - start_step_ << " in this run, " << FormatDuration(seconds) << ")"
                   << (outputs.empty() ? "" : "; ") << absl::StrJoin(outputs, ", ");
  if (WorldRank() == 0) {
    const absl::Status marked = MarkFinished(job_, steps);
    if (!marked.ok()) KLOG(WARNING) << "the run directory's finish marker: " << marked;
  }
}

absl::Status Trainer::ExportHf(const std::string& directory) {
  // One replica writes: data-parallel rank 0 and, of its context-parallel ranks (each holding the
  // whole replica's weights), rank 0; its tensor and pipeline ranks gather.
  const bool writes = DataParallelRank() == 0 && grid_->cp_rank() == 0;
  SettleParameters();
  // ZeRO-1's sharded masters, whole in the (free) gradient buffers while exported.
  optimizer_->GatherMasters();
  models::HfExportProvenance provenance = ExportProvenanceOf(job_);
  provenance.steps = std::max<int64_t>(job_.training().steps(), start_step_);
  if (!history_.empty()) provenance.train_loss = history_.back().loss;
  if (!evaluations_.empty()) provenance.eval_loss = evaluations_.back().loss;
  const absl::Status exported = writes ? model_->ExportHf(directory, provenance) : absl::OkStatus();
  optimizer_->ReleaseMasters();
  return exported;
}

}  // namespace kelvin::training
