// One optimizer step: the global batch read, its micro-batches run, the gradients reduced and
// clipped, the loss judged, the update applied.
#include "training/training_step.h"

#include <cmath>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/logging.h"
#include "core/ops/cross_entropy.h"
#include "core/ops/grad_norm.h"
#include "core/profile_range.h"
#include "core/stopwatch.h"
#include "parallel/loss/lm_loss.h"
#include "training/checkpointing.h"
#include "training/gradient_check.h"
#include "training/lr_schedule.h"
#include "training/temperature_reduction.h"

namespace kelvin::training {

absl::StatusOr<StepStats> TrainingStep::Run(int64_t step, bool report_temperatures) {
  const ProfileRange range(absl::StrCat("step ", step + 1));
  parallel::ProcessGrid& grid = trained_.grid();
  const Stopwatch step_time;
  const double communication_before = grid.CommunicationSeconds();
  const double pipeline_before = grid.PipelineCommunicationSeconds();
  KELVIN_ASSIGN_OR_RETURN(StepStats stats, RunUntimed(step, report_temperatures));
  stats.seconds = step_time.Seconds();
  stats.communication_seconds = grid.CommunicationSeconds() - communication_before;
  stats.pipeline_transfer_seconds = grid.PipelineCommunicationSeconds() - pipeline_before;
  return stats;
}

absl::StatusOr<StepStats> TrainingStep::RunUntimed(int64_t step, bool report_temperatures) {
  const Context host = Context::Cpu();
  const Context& ctx = trained_.ctx();
  parallel::ProcessGrid& grid = trained_.grid();
  models::LlamaModel& model = trained_.model();
  const int64_t micro_batches = trained_.micro_batches();
  // The whole global batch first: its labelled-token count normalises every micro-batch's loss,
  // so accumulating M micro-batches gives exactly the gradient of the one big batch.
  std::vector<data::Batch> batches;
  std::vector<int64_t> first_samples;  // [M] each micro-batch's first global sample
  int64_t labelled = 0;
  absl::Status read = absl::OkStatus();
  for (int64_t m = 0; m < micro_batches; ++m) {
    const data::BatchCoordinates where{step, m, micro_batches, grid.dp_rank(),
                                       grid.spec().data_parallel};
    first_samples.push_back(data::FirstGlobalSample(where, batches_.micro_batch_size()));
    absl::StatusOr<data::Batch> batch = batches_.BatchAt(where);
    if (!batch.ok()) {
      read = batch.status();
      break;
    }
    labelled += ops::CountNonIgnored(host, trained_.ContextSplitOf(*batch).Local(batch->labels));
    batches.push_back(std::move(batch).value());
  }
  // A bad row fails the replica that reads it: every rank stops, none waits in a collective.
  KELVIN_RETURN_IF_ERROR(parallel::AgreeOnStatus(
      grid.world(), read, absl::StrCat("reading the batches of step ", step + 1)));
  labelled = static_cast<int64_t>(trained_.SumOverReplicas(static_cast<double>(labelled)));
  StepStats stats;
  stats.step = step;
  stats.labelled_tokens = labelled;
  ParameterSet& params = model.parameters();
  // While the last step's parameter gather is in flight, its stretches of the gradient buffers
  // receive masters, zeroed as the forward waits for them; the rest is zero already.
  if (!trained_.GatheringParameters()) params.ZeroGrads();
  if (labelled == 0) {
    KLOG_RANK0(WARNING) << "step " << step + 1 << " has no labelled token; no update";
    return stats;
  }
  // The steps that report temperatures record those of their last micro-batch.
  model.RecordTemperatureStatisticsOf(report_temperatures ? static_cast<int>(micro_batches) - 1
                                                          : models::LlamaModel::kNoMicroBatch);
  const Stopwatch micro_batch_time;
  // LoRA dropout masks (model.lora.dropout) in the step's forwards alone, keyed by the samples.
  model.SetLoraDropout(job_.training().seed(), std::move(first_samples));
  for (const double loss : RunMicroBatches(batches, 1.0 / static_cast<double>(labelled))) {
    stats.loss += loss;  // in micro-batch order on every layout
  }
  model.SetLoraDropout(0, {});
  stats.micro_batch_seconds = micro_batch_time.Seconds();
  KELVIN_CHECK(!trained_.GatheringParameters())
      << "the step's forward did not read every parameter bucket the last step gathered";
  {
    const ProfileRange reduction("gradient reduction");
    trained_.FinishGradientReduction();
  }
  for (const data::Batch& batch : batches) stats.tokens += batch.tokens.numel();
  stats.loss =
      trained_.FromLastStage(trained_.SumOverReplicas(stats.loss)) / static_cast<double>(labelled);
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
                                 ResumeAdviceBeforeSpike(job_.checkpoint().dir(), step + 1));
  }
  stats.skipped = spike.verdict == LossSpikeRule::Verdict::kSkip;
  // A skipped step's gradients are only measured (max_norm 0: not clipped), not applied.
  stats.grad_norm = ClipGradients(stats.skipped ? 0.0 : job_.optimizer().grad_clip_norm());
  stats.lr =
      LearningRateAt(job_.lr_schedule(), job_.optimizer().lr(), job_.training().steps(), step);
  if (stats.skipped) {
    KLOG_RANK0(WARNING) << loss_spike_.SkipWarning(step + 1, stats.loss, spike);
  } else {
    KELVIN_RETURN_IF_ERROR(CheckGradientsFinite(ctx, params, step + 1, stats.loss, stats.grad_norm,
                                                job_.optimizer().lr()));
    const ProfileRange update("optimizer step");
    trained_.optimizer().Step(ctx, stats.lr);
  }
  if (report_temperatures) stats.temperatures = GatherTemperatures();
  return stats;
}

std::vector<double> TrainingStep::RunMicroBatches(const std::vector<data::Batch>& batches,
                                                  double loss_scale) {
  models::LlamaModel& model = trained_.model();
  // The loss of a micro-batch from its logits, leaving dlogits in place.
  auto loss = [&](Tensor& logits, int m) {
    const data::Batch& batch = batches[m];
    return parallel::SoftmaxCrossEntropySum(trained_.ctx(), model.tp(), logits,
                                            trained_.ContextSplitOf(batch).Local(batch.labels),
                                            model.layout().vocab_begin, loss_scale);
  };
  std::vector<parallel::MicroBatchInput> inputs;
  for (const data::Batch& batch : batches) inputs.push_back({batch.tokens, batch.positions});
  return trained_.pipeline().RunStep(trained_.ctx(), inputs, loss);
}

double TrainingStep::ClipGradients(double max_norm) {
  models::LlamaModel& model = trained_.model();
  Optimizer& optimizer = trained_.optimizer();
  // Each parameter of the full model once: this rank's shards, and replicated tensors only where
  // IsCanonicalCopy says; the squares summed over the data-parallel replicas where they hold
  // shards (the optimizer), the tensor-parallel group and the pipeline stages.
  double squares = optimizer.GradientSumOfSquares(
      [&](const std::string& name) { return model.IsCanonicalCopy(name); });
  squares = model.tp().AllReduceScalar(squares, parallel::ReduceOp::kSum);
  squares = trained_.grid().pp().AllReduceScalar(squares, parallel::ReduceOp::kSum);
  const double norm = std::sqrt(squares);
  const double coefficient = max_norm > 0 ? ops::ClipCoefficient(norm, max_norm) : 1.0;
  // `coefficient < 1` is false for NaN; a non-finite norm stops the step before the update
  // (CheckGradientsFinite).
  if (coefficient < 1) optimizer.ScaleGradients(coefficient);
  return norm;
}

std::vector<ssa::TemperatureStatistics> TrainingStep::GatherTemperatures() {
  parallel::ProcessGrid& grid = trained_.grid();
  models::LlamaModel& model = trained_.model();
  // Every head and token of the micro-batch (tensor and context ranks), then every layer (stages).
  std::vector<ssa::TemperatureStatistics> temperatures = model.TemperatureStatistics();
  temperatures = MergeOver(grid.tp(), temperatures, /*gather_heads=*/true);
  temperatures = MergeOver(grid.cp(), temperatures, /*gather_heads=*/false);
  return GatherOverStages(grid.pp(), model.stage(), model.config().num_layers, temperatures);
}

}  // namespace kelvin::training
