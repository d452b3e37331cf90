// One pipeline rank's program, run on the model's chunk steps.
#include "launcher/pipeline_runner.h"

#include <variant>

#include "core/logging.h"

namespace kelvin::launcher {
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
    : kind_(kind), program_(std::move(program)), model_(model), pp_(pp) {
  std::vector<parallel::PipelineAction> actions;
  for (const parallel::PipelineStep& step : program_) {
    if (const auto* action = std::get_if<parallel::PipelineAction>(&step)) {
      actions.push_back(*action);
    }
  }
  peak_in_flight_ = parallel::PeakInFlightMicroBatches(actions);
}

std::vector<double> PipelineRunner::RunStep(const Context& ctx,
                                            const std::vector<data::Batch>& batches,
                                            const LossFunction& loss) {
  std::vector<double> losses(batches.size(), 0.0);
  const models::LlamaStageLayout& stage = model_.stage();
  // A micro-batch takes its slot at its first use on this rank: its first forward, or the
  // receipt of that forward's input.
  auto begin = [&](int m) {
    if (!model_.HoldsMicroBatch(m))
      model_.BeginMicroBatch(m, batches[m].tokens, batches[m].positions);
  };
  for (const parallel::PipelineStep& step : program_) {
    if (const auto* action = std::get_if<parallel::PipelineAction>(&step)) {
      const int m = action->micro_batch, c = action->chunk;
      if (action->kind == parallel::PipelineAction::kForward) {
        begin(m);
        Tensor& output = model_.ForwardChunk(ctx, m, c);
        if (stage.ends_model(c)) losses[m] = loss(output, m);
      } else {
        model_.BackwardChunk(ctx, m, c);
        // Its last use here, unless chunk 0's input gradient is still to be sent.
        if (stage.starts_model(c)) model_.EndMicroBatch(m);
      }
      continue;
    }
    const auto& transfer = std::get<parallel::PipelineTransfer>(step);
    const int m = transfer.micro_batch, c = transfer.chunk;
    const bool activation = transfer.tensor == parallel::PipelineTensor::kActivation;
    if (transfer.kind == parallel::PipelineTransfer::kRecv) {
      begin(m);
      pp_.Recv(activation ? model_.ChunkInput(m, c) : model_.ChunkGradient(m, c), transfer.peer);
      continue;
    }
    pp_.Send(activation ? model_.ChunkOutput(m, c) : model_.ChunkGradient(m, c), transfer.peer);
    if (!activation && c == 0) model_.EndMicroBatch(m);
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
  if (local.empty()) return {};
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

}  // namespace kelvin::launcher
