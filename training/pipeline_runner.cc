// One pipeline rank's program, run on the model's chunk steps.
#include "training/pipeline_runner.h"

#include <algorithm>
#include <set>
#include <variant>

#include "absl/strings/str_cat.h"
#include "core/profile_range.h"

namespace kelvin::training {
namespace {

// Statistics of one layer as numbers: query and value summaries, then sigma(alpha) per head.
constexpr int kSummaryFields = 5;
void Encode(const ssa::TemperatureSummary& s, double* out) {
  out[0] = static_cast<double>(s.count);
  out[1] = s.mean;
  out[2] = s.std;
  out[3] = s.min;
  out[4] = s.max;
}
ssa::TemperatureSummary Decode(const double* in) {
  return {static_cast<int64_t>(in[0]), in[1], in[2], in[3], in[4]};
}

}  // namespace

parallel::PipelineScheduleKind PipelineScheduleKindOf(
    config::ParallelConfig::PipelineSchedule schedule) {
  switch (schedule) {
    case config::ParallelConfig::ALL_FORWARD_ALL_BACKWARD:
      return parallel::PipelineScheduleKind::kAllForwardAllBackward;
    case config::ParallelConfig::INTERLEAVED_1F1B:
      return parallel::PipelineScheduleKind::kInterleaved1F1B;
    default:
      return parallel::PipelineScheduleKind::kOneForwardOneBackward;
  }
}

PipelineRunner::PipelineRunner(parallel::PipelineScheduleKind kind,
                               std::vector<parallel::PipelineStep> program,
                               models::LlamaModel& model, parallel::Communicator& pp)
    : kind_(kind), program_(std::move(program)), model_(model), pp_(pp) {}

namespace {

int MicroBatchOf(const parallel::PipelineStep& step) {
  return std::visit([](const auto& s) { return s.micro_batch; }, step);
}

// A micro-batch takes its activation slot at its first use on a rank: its first forward, or the
// receipt of that forward's input.
bool UsesSlot(const parallel::PipelineStep& step) {
  const auto* action = std::get_if<parallel::PipelineAction>(&step);
  return action != nullptr
             ? action->kind == parallel::PipelineAction::kForward
             : std::get<parallel::PipelineTransfer>(step).kind == parallel::PipelineTransfer::kRecv;
}

// And gives it back after its last: the backward of virtual stage 0 (chunk 0 of rank 0), or on
// the other ranks the send of chunk 0's input gradient.
bool ReleasesSlot(const parallel::PipelineStep& step, int rank) {
  if (const auto* action = std::get_if<parallel::PipelineAction>(&step)) {
    return action->kind == parallel::PipelineAction::kBackward && action->chunk == 0 && rank == 0;
  }
  const auto& transfer = std::get<parallel::PipelineTransfer>(step);
  return transfer.kind == parallel::PipelineTransfer::kSend &&
         transfer.tensor == parallel::PipelineTensor::kGradient && transfer.chunk == 0;
}

}  // namespace

int64_t PipelineRunner::SlotsNeeded(const std::vector<parallel::PipelineStep>& program, int rank) {
  std::set<int> held;
  int64_t peak = 0;
  for (const parallel::PipelineStep& step : program) {
    if (UsesSlot(step)) held.insert(MicroBatchOf(step));
    peak = std::max<int64_t>(peak, static_cast<int64_t>(held.size()));
    if (ReleasesSlot(step, rank)) held.erase(MicroBatchOf(step));
  }
  return peak;
}

std::vector<double> PipelineRunner::RunStep(const Context& ctx,
                                            const std::vector<data::Batch>& batches,
                                            const LossFunction& loss) {
  std::vector<double> losses(batches.size(), 0.0);
  const models::LlamaStageLayout& stage = model_.stage();
  for (const parallel::PipelineStep& step : program_) {
    const int m = MicroBatchOf(step);
    if (UsesSlot(step) && !model_.HoldsMicroBatch(m)) {
      model_.BeginMicroBatch(m, batches[m].tokens, batches[m].positions);
    }
    if (const auto* action = std::get_if<parallel::PipelineAction>(&step)) {
      const int c = action->chunk;
      if (action->kind == parallel::PipelineAction::kForward) {
        Tensor& output = model_.ForwardChunk(ctx, m, c);
        if (stage.ends_model(c)) losses[m] = loss(output, m);
      } else {
        model_.BackwardChunk(ctx, m, c);
      }
    } else {
      const auto& transfer = std::get<parallel::PipelineTransfer>(step);
      const int c = transfer.chunk;
      const bool activation = transfer.tensor == parallel::PipelineTensor::kActivation;
      const bool receive = transfer.kind == parallel::PipelineTransfer::kRecv;
      const ProfileRange range(absl::StrCat(
          receive ? "receive " : "send ", activation ? "activation" : "gradient",
          " of micro-batch ", m, receive ? " from stage " : " to stage ", transfer.peer));
      if (receive) {
        pp_.Recv(activation ? model_.ChunkInput(m, c) : model_.ChunkGradient(m, c), transfer.peer);
      } else {
        pp_.Send(activation ? model_.ChunkOutput(m, c) : model_.ChunkGradient(m, c), transfer.peer);
      }
    }
    if (ReleasesSlot(step, stage.rank)) model_.EndMicroBatch(m);
  }
  return losses;
}

Tensor* PipelineRunner::Forward(const Context& ctx, const data::Batch& batch) {
  const models::LlamaStageLayout& stage = model_.stage();
  constexpr int kMicroBatch = 0;
  model_.BeginMicroBatch(kMicroBatch, batch.tokens, batch.positions);
  Tensor* logits = nullptr;
  // The virtual stages in order; each rank runs its own, receiving from the one before.
  for (int c = 0; c < stage.virtual_stages; ++c) {
    if (!stage.starts_model(c))
      pp_.Recv(model_.ChunkInput(kMicroBatch, c), (stage.rank + stage.stages - 1) % stage.stages);
    Tensor& output = model_.ForwardChunk(ctx, kMicroBatch, c);
    if (stage.ends_model(c)) {
      logits = &output;
    } else {
      pp_.Send(output, (stage.rank + 1) % stage.stages);
    }
  }
  model_.EndMicroBatch(kMicroBatch);
  return logits;
}

std::vector<ssa::TemperatureStatistics> PipelineRunner::GatherTemperatureStatistics(
    const std::vector<ssa::TemperatureStatistics>& local) {
  if (local.empty() || pp_.size() == 1) return local;  // one stage holds every layer in order
  const models::LlamaStageLayout& stage = model_.stage();
  const int64_t layers = model_.config().num_layers;
  const int64_t heads = static_cast<int64_t>(local.front().sigma_alpha.size());
  const int64_t width = 2 * kSummaryFields + heads;
  Tensor table = Tensor::ZerosCpu({layers, width}, DType::kF64);  // [L, width], this stage's rows
  size_t i = 0;
  for (const models::LlamaStageLayout::Chunk& chunk : stage.chunks) {
    for (int64_t l = chunk.layer_begin; l < chunk.layer_end; ++l, ++i) {
      double* row = table.data<double>() + l * width;
      Encode(local[i].query, row);
      Encode(local[i].value, row + kSummaryFields);
      for (int64_t h = 0; h < heads; ++h) row[2 * kSummaryFields + h] = local[i].sigma_alpha[h];
    }
  }
  pp_.AllReduce(table, parallel::ReduceOp::kSum);
  std::vector<ssa::TemperatureStatistics> all(static_cast<size_t>(layers));
  for (int64_t l = 0; l < layers; ++l) {
    const double* row = table.data<double>() + l * width;
    all[l].query = Decode(row);
    all[l].value = Decode(row + kSummaryFields);
    all[l].sigma_alpha.assign(row + 2 * kSummaryFields, row + width);
  }
  return all;
}

}  // namespace kelvin::training
