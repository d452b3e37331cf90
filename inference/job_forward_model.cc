// The job's grid, this rank's forward-only model slice and its runner, built as the trainer builds
// its own but without anything a backward or an optimizer needs.
#include "inference/job_forward_model.h"

#include <optional>
#include <utility>

#include "absl/strings/str_format.h"
#include "core/device.h"
#include "core/logging.h"
#include "inference/checkpoint_weights.h"
#include "models/llama/hf_weight_check.h"
#include "training/job/job_plan.h"
#include "training/job/job_setup.h"
#include "training/job/parallel_setup.h"

namespace kelvin::inference {

absl::StatusOr<std::unique_ptr<JobForwardModel>> JobForwardModel::Build(
    const config::JobConfig& job, const models::LlamaConfig& arch, MPI_Comm world) {
  std::unique_ptr<JobForwardModel> built(new JobForwardModel());
  built->job_name_ = job.name();
  // The node's processes pick their GPUs (a collective over `world`, only where CUDA may be used).
  const training::NodePlace node =
      training::MayTrainOnCuda(job) ? training::NodePlaceOf(world) : training::NodePlace{};
  KELVIN_ASSIGN_OR_RETURN(const training::TrainingPlacement placement,
                          training::ResolvePlacement(job, node.rank));
  built->ctx_ = placement.ctx;
  KELVIN_ASSIGN_OR_RETURN(built->grid_,
                          training::BuildProcessGrid(job, arch, world, placement.ctx, node.size));
  parallel::ProcessGrid& grid = *built->grid_;
  const training::JobLayout layout =
      training::ForwardOnlyLayout({.spec = grid.spec(), .dtype = placement.dtype});
  KELVIN_ASSIGN_OR_RETURN(
      built->plan_, training::PlanRankMemory(job, arch, layout, grid.tp_rank(), grid.pp_rank()));
  const int64_t available = DeviceMemoryBytes(placement.ctx.device());
  if (available > 0 && built->plan_.Total() > available) {
    const auto gib = [](int64_t bytes) { return static_cast<double>(bytes) / (1 << 30); };
    return absl::ResourceExhaustedError(absl::StrFormat(
        "this rank's forward-only model needs %.2f GiB (%s), more than the %.2f GiB of %s: use a "
        "smaller training.micro_batch_size, or spread the model over more processes (parallel.*)",
        gib(built->plan_.Total()), built->plan_.ToString(), gib(available),
        placement.ctx.device().ToString()));
  }
  KELVIN_ASSIGN_OR_RETURN(const ssa::AttentionBackend backend,
                          training::AttentionBackendFor(job, placement.ctx));
  // model.hf_dir's weights checked against the config before the model's buffers exist.
  std::optional<io::HfCheckpoint> hf_weights;
  if (job.model().has_hf_dir()) {
    KELVIN_ASSIGN_OR_RETURN(hf_weights, models::OpenHfWeightsFor(job.model().hf_dir(), arch));
  }
  built->model_ = std::make_unique<models::LlamaModel>(
      arch, placement.dtype, training::LlamaParallelismOf(grid),
      // No backward reads the layers' activations: the fields a recompute would redo share one
      // layer's buffers, as in LoadInferenceModel (the plan, ForwardOnlyLayout's, counts the same).
      models::LlamaRecompute{.attention = true, .mlp = true},
      models::LlamaPlacement{
          .ctx = placement.ctx, .forward_only = true, .attention_backend = backend});
  if (hf_weights.has_value()) {
    KELVIN_RETURN_IF_ERROR(built->model_->LoadHfCheckpoint(*hf_weights));
  } else {
    built->model_->InitRandom(job.training().seed());
  }
  // Forward runs the stage's chunks in order, receiving from and sending to the neighbouring
  // stages: it needs no schedule's program.
  built->pipeline_ = std::make_unique<parallel::PipelineRunner>(
      parallel::PipelineScheduleKind::kOneForwardOneBackward, std::vector<parallel::PipelineStep>{},
      *built->model_, grid.pp());
  return built;
}

absl::Status JobForwardModel::ReadWeights(const std::string& path) {
  const absl::Status read = ReadCheckpointWeights(path, job_name_, *model_);
  // A damaged part may fail some ranks only: every rank takes the first failing rank's error.
  return parallel::ShareFirstFailure(grid_->world(), read);
}

}  // namespace kelvin::inference
