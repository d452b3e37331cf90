// PipelineRunner: one pipeline rank's part of a training step and of a forward-only pass, for
// every layout (one stage's program is each micro-batch's forward, then its backward), on any
// PipelineStage.
#pragma once

#include <functional>
#include <vector>

#include "parallel/comm/communicator.h"
#include "parallel/pipeline/pipeline_schedule.h"
#include "parallel/pipeline/pipeline_stage.h"

namespace kelvin::parallel {

class PipelineRunner {
 public:
  // Runs `program` (BuildPipelineProgram's for this rank: compute actions of its model chunks and
  // the blocking Send/Recv between them) of `kind` on the stage's chunk steps over the pipeline
  // group `pp`, giving each micro-batch an activation slot from its first use to its last.
  PipelineRunner(PipelineScheduleKind kind, std::vector<PipelineStep> program, PipelineStage& stage,
                 Communicator& pp);

  // On the last stage, the loss of micro-batch m from its logits [N, V/TP]: returns its summed
  // token losses and leaves dlogits in the logits buffer.
  using LossFunction = std::function<double(Tensor& logits, int micro_batch)>;

  // The step's forwards and backwards of `micro_batches`. Returns the losses by micro-batch on the
  // last stage, zeros elsewhere.
  std::vector<double> RunStep(const Context& ctx, const std::vector<MicroBatchInput>& micro_batches,
                              const LossFunction& loss);
  // The forward of one micro-batch through every stage: the logits on the last stage, nullptr on
  // the others (valid until the next call).
  Tensor* Forward(const Context& ctx, const MicroBatchInput& input);

  PipelineScheduleKind kind() const { return kind_; }
  // The activation slots pipeline rank `rank` running `program` holds at once at most (the
  // micro-batches between their first and last use there).
  static int64_t SlotsNeeded(const std::vector<PipelineStep>& program, int rank);

 private:
  PipelineScheduleKind kind_;
  std::vector<PipelineStep> program_;
  PipelineStage& stage_;
  Communicator& pp_;
};

}  // namespace kelvin::parallel
