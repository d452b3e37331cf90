// One pipeline rank's program, run on the stage's chunk steps.
#include "parallel/pipeline/pipeline_runner.h"

#include <algorithm>
#include <set>
#include <variant>

#include "absl/strings/str_cat.h"
#include "core/profile_range.h"

namespace kelvin::parallel {

PipelineRunner::PipelineRunner(PipelineScheduleKind kind, std::vector<PipelineStep> program,
                               PipelineStage& stage, Communicator& pp)
    : kind_(kind), program_(std::move(program)), stage_(stage), pp_(pp) {}

namespace {

int MicroBatchOf(const PipelineStep& step) {
  return std::visit([](const auto& s) { return s.micro_batch; }, step);
}

// A micro-batch takes its activation slot at its first use on a rank: its first forward, or the
// receipt of that forward's input.
bool UsesSlot(const PipelineStep& step) {
  const auto* action = std::get_if<PipelineAction>(&step);
  return action != nullptr ? action->kind == PipelineAction::kForward
                           : std::get<PipelineTransfer>(step).kind == PipelineTransfer::kRecv;
}

// And gives it back after its last: the backward of virtual stage 0 (chunk 0 of rank 0), or on
// the other ranks the send of chunk 0's input gradient.
bool ReleasesSlot(const PipelineStep& step, int rank) {
  if (const auto* action = std::get_if<PipelineAction>(&step)) {
    return action->kind == PipelineAction::kBackward && action->chunk == 0 && rank == 0;
  }
  const auto& transfer = std::get<PipelineTransfer>(step);
  return transfer.kind == PipelineTransfer::kSend && transfer.tensor == PipelineTensor::kGradient &&
         transfer.chunk == 0;
}

}  // namespace

int64_t PipelineRunner::SlotsNeeded(const std::vector<PipelineStep>& program, int rank) {
  std::set<int> held;
  int64_t peak = 0;
  for (const PipelineStep& step : program) {
    if (UsesSlot(step)) held.insert(MicroBatchOf(step));
    peak = std::max<int64_t>(peak, static_cast<int64_t>(held.size()));
    if (ReleasesSlot(step, rank)) held.erase(MicroBatchOf(step));
  }
  return peak;
}

std::vector<double> PipelineRunner::RunStep(const Context& ctx,
                                            const std::vector<MicroBatchInput>& micro_batches,
                                            const LossFunction& loss) {
  std::vector<double> losses(micro_batches.size(), 0.0);
  for (const PipelineStep& step : program_) {
    const int m = MicroBatchOf(step);
    if (UsesSlot(step) && !stage_.HoldsMicroBatch(m)) {
      stage_.BeginMicroBatch(m, micro_batches[m].tokens, micro_batches[m].positions);
    }
    if (const auto* action = std::get_if<PipelineAction>(&step)) {
      const int c = action->chunk;
      if (action->kind == PipelineAction::kForward) {
        Tensor& output = stage_.ForwardChunk(ctx, m, c);
        if (stage_.EndsModel(c)) losses[m] = loss(output, m);
      } else {
        stage_.BackwardChunk(ctx, m, c);
      }
    } else {
      const auto& transfer = std::get<PipelineTransfer>(step);
      const int c = transfer.chunk;
      const bool activation = transfer.tensor == PipelineTensor::kActivation;
      const bool receive = transfer.kind == PipelineTransfer::kRecv;
      const ProfileRange range(absl::StrCat(
          receive ? "receive " : "send ", activation ? "activation" : "gradient",
          " of micro-batch ", m, receive ? " from stage " : " to stage ", transfer.peer));
      if (receive) {
        pp_.Recv(activation ? stage_.ChunkInput(m, c) : stage_.ChunkGradient(m, c), transfer.peer);
      } else {
        pp_.Send(activation ? stage_.ChunkOutput(m, c) : stage_.ChunkGradient(m, c), transfer.peer);
      }
    }
    if (ReleasesSlot(step, pp_.rank())) stage_.EndMicroBatch(m);
  }
  return losses;
}

Tensor* PipelineRunner::Forward(const Context& ctx, const MicroBatchInput& input) {
  constexpr int kMicroBatch = 0;
  stage_.BeginMicroBatch(kMicroBatch, input.tokens, input.positions);
  Tensor* logits = nullptr;
  const int rank = pp_.rank(), stages = pp_.size();
  // The virtual stages in order; each rank runs its own, receiving from the one before.
  for (int c = 0; c < stage_.PipelineChunks(); ++c) {
    if (!stage_.StartsModel(c)) {
      pp_.Recv(stage_.ChunkInput(kMicroBatch, c), (rank + stages - 1) % stages);
    }
    Tensor& output = stage_.ForwardChunk(ctx, kMicroBatch, c);
    if (stage_.EndsModel(c)) {
      logits = &output;
    } else {
      pp_.Send(output, (rank + 1) % stages);
    }
  }
  stage_.EndMicroBatch(kMicroBatch);
  return logits;
}

}  // namespace kelvin::parallel
