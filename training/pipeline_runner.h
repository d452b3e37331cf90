// PipelineRunner: one pipeline rank's part of a training step and of an evaluation forward, for
// every layout (one stage's program is each micro-batch's forward, then its backward), and the
// per-layer temperature statistics gathered from every stage.
#pragma once

#include <functional>
#include <vector>

#include "configs/kelvin.pb.h"
#include "data/sampling/batch.h"
#include "models/llama/llama_model.h"
#include "parallel/pipeline/pipeline_schedule.h"

namespace kelvin::training {

parallel::PipelineScheduleKind PipelineScheduleKindOf(
    config::ParallelConfig::PipelineSchedule schedule);

class PipelineRunner {
 public:
  // Runs `program` (parallel::BuildPipelineProgram's for this rank: compute actions of its model
  // chunks and the blocking Send/Recv between them; parallel/pipeline/pipeline_schedule.h) of
  // `kind` on the model's chunk steps over the pipeline group `pp`, giving each micro-batch an
  // activation slot from its first use to its last.
  PipelineRunner(parallel::PipelineScheduleKind kind, std::vector<parallel::PipelineStep> program,
                 models::LlamaModel& model, parallel::Communicator& pp);

  // On the last stage, the loss of micro-batch m from its logits [N, V/TP]: returns its summed
  // token losses and leaves dlogits in the logits buffer.
  using LossFunction = std::function<double(Tensor& logits, int micro_batch)>;

  // The step's forwards and backwards of `batches` (one per micro-batch). Returns the losses by
  // micro-batch on the last stage, zeros elsewhere.
  std::vector<double> RunStep(const Context& ctx, const std::vector<data::Batch>& batches,
                              const LossFunction& loss);
  // The forward of one batch through every stage: the logits on the last stage, nullptr on the
  // others (valid until the next call).
  Tensor* Forward(const Context& ctx, const data::Batch& batch);
  // The whole model's per-layer statistics: each stage's layers, summed over the pipeline group.
  std::vector<ssa::TemperatureStatistics> GatherTemperatureStatistics(
      const std::vector<ssa::TemperatureStatistics>& local);

  parallel::PipelineScheduleKind kind() const { return kind_; }
  // The activation slots pipeline rank `rank` running `program` holds at once at most (the
  // micro-batches between their first and last use there).
  static int64_t SlotsNeeded(const std::vector<parallel::PipelineStep>& program, int rank);

 private:
  parallel::PipelineScheduleKind kind_;
  std::vector<parallel::PipelineStep> program_;
  models::LlamaModel& model_;
  parallel::Communicator& pp_;
};

}  // namespace kelvin::training
