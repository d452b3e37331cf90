// TrainingStep: one optimizer step of a training run: the global batch's micro-batches forward and
// backward, the gradients summed over the replicas and clipped, the loss-spike rule, the update,
// and the step's statistics (StepStats).
#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "configs/kelvin.pb.h"
#include "data/sampling/batch.h"
#include "ssa/temperature.h"
#include "training/loss_spike.h"
#include "training/model_and_optimizer.h"

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
  // the steps that do not report them: RunMetrics::ReportsTemperatures).
  std::vector<ssa::TemperatureStatistics> temperatures;
};

// Per step, each data-parallel rank's micro-batches run forward and backward with the loss
// normalised by the global batch's labelled tokens, gradients are summed over the data- and
// context-parallel ranks and clipped by the norm of the full model, the learning rate comes from
// the schedule, and AdamW steps, unless training.loss_spike judges the loss a spike: the run
// stops, or the update is skipped.
class TrainingStep {
 public:
  // Every reference outlives the step: the job, the model it trains, the training batches and
  // the run's loss-spike rule (restored from checkpoints).
  TrainingStep(const config::JobConfig& job, ModelAndOptimizer& trained, data::BatchSource& batches,
               LossSpikeRule& loss_spike)
      : job_(job), trained_(trained), batches_(batches), loss_spike_(loss_spike) {}

  // Step `step` (0-based), timed; with `report_temperatures` its StepStats::temperatures.
  // Its errors are every rank's (its inputs and losses are agreed).
  absl::StatusOr<StepStats> Run(int64_t step, bool report_temperatures);

 private:
  absl::StatusOr<StepStats> RunUntimed(int64_t step, bool report_temperatures);
  // The forward and backward of every micro-batch of the step: this rank's pipeline program (one
  // stage's runs them in turn). Returns each micro-batch's summed token losses x `loss_scale` (1 /
  // the global batch's labelled tokens), 0 off the last pipeline stage.
  std::vector<double> RunMicroBatches(const std::vector<data::Batch>& batches, double loss_scale);
  // The global gradient norm over the full model (before clipping); scales the gradients by
  // PyTorch's clip coefficient when max_norm > 0 and the norm exceeds it.
  double ClipGradients(double max_norm);
  // Per layer, the SSA temperatures of the last micro-batch over the whole model.
  std::vector<ssa::TemperatureStatistics> GatherTemperatures();

  const config::JobConfig& job_;
  ModelAndOptimizer& trained_;
  data::BatchSource& batches_;
  LossSpikeRule& loss_spike_;
};

}  // namespace kelvin::training
