// Building a training job's model, layout and optimizer, and the sums over the ranks sharing it.
#include "training/model_and_optimizer.h"

#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "core/allocator.h"
#include "core/logging.h"
#include "core/optim/adamw_optimizer.h"
#include "parallel/distributed_adamw.h"
#include "training/job/job_plan.h"
#include "training/job/parallel_setup.h"

namespace kelvin::training {
absl::StatusOr<std::unique_ptr<ModelAndOptimizer>> ModelAndOptimizer::Build(
    const config::JobConfig& job, const models::LlamaConfig& arch, MPI_Comm world,
    bool separate_master) {
  std::unique_ptr<ModelAndOptimizer> built(new ModelAndOptimizer());
  // The node's processes pick their GPUs (a collective over `world`, only where CUDA may be used).
  const NodePlace node = MayTrainOnCuda(job) ? NodePlaceOf(world) : NodePlace{};
  KELVIN_ASSIGN_OR_RETURN(TrainingPlacement placement, ResolvePlacement(job, node.rank));
  placement.separate_master = placement.separate_master || separate_master;
  built->ctx_ = placement.ctx;
  KELVIN_ASSIGN_OR_RETURN(built->grid_,
                          BuildProcessGrid(job, arch, world, placement.ctx, node.size));
  parallel::ProcessGrid* grid = built->grid_.get();
  const parallel::GridSpec& spec = grid->spec();
  const models::LlamaParallelism parallelism = LlamaParallelismOf(*grid);
  built->micro_batches_ = spec.gradient_accumulation_steps;
  // Every layout runs a pipeline program, one stage's each micro-batch's forward then its
  // backward. Built before the model: its errors come first.
  const bool pipelined = spec.pipeline_parallel > 1;
  const parallel::PipelineScheduleKind schedule =
      pipelined ? ScheduleKindOf(job.parallel().pipeline_schedule())
                : parallel::PipelineScheduleKind::kOneForwardOneBackward;
  KELVIN_ASSIGN_OR_RETURN(
      std::vector<parallel::PipelineStep> program,
      parallel::BuildPipelineProgram(schedule, spec.pipeline_parallel, grid->pp_rank(),
                                     static_cast<int>(built->micro_batches_),
                                     pipelined ? spec.virtual_pipeline_stages : 1));
  const bool distributed_optimizer =
      job.parallel().distributed_optimizer() && built->GradientReplicas() > 1;
  // Before anything is allocated: a plan beyond the device is a message, not bad_alloc.
  KELVIN_RETURN_IF_ERROR(built->CheckPlanFitsDevice(job, arch, placement, distributed_optimizer));
  KELVIN_ASSIGN_OR_RETURN(built->model_,
                          BuildModel(job, arch, parallelism, placement,
                                     distributed_optimizer ? built->GradientReplicas() : 1));
  built->pipeline_ = std::make_unique<parallel::PipelineRunner>(schedule, std::move(program),
                                                                *built->model_, grid->pp());
  built->BuildOptimizer(job, arch, distributed_optimizer);
  return built;
}

void ModelAndOptimizer::BuildOptimizer(const config::JobConfig& job,
                                       const models::LlamaConfig& arch,
                                       bool distributed_optimizer) {
  const config::OptimizerConfig& opt = job.optimizer();
  const AdamWSettings settings{opt.beta1(), opt.beta2(), opt.eps(), opt.weight_decay(),
                               arch.ssa.has_value() ? arch.ssa->temperature_lr_scale : 1.0};
  ParameterSet& params = model_->parameters();
  parallel::Communicator& replicas = grid_->dp_cp();
  parallel::DistributedAdamW* zero = nullptr;
  if (distributed_optimizer) {
    auto sharded = std::make_unique<parallel::DistributedAdamW>(params, settings, replicas);
    zero = sharded.get();
    optimizer_ = std::move(sharded);
  } else {
    optimizer_ = std::make_unique<AdamWOptimizer>(params, settings);
  }
  if (replicas.size() > 1) {
    gradient_buckets_ = std::make_unique<parallel::GradientBuckets>(
        params, replicas,
        parallel::PlanGradientBuckets(params, model_->gradient_units().parameters,
                                      job.parallel().grad_bucket_elements()),
        job.parallel().overlap_grad_reduce(), zero);
    model_->ReportFinishedGradients(
        static_cast<int>(micro_batches_),
        [buckets = gradient_buckets_.get()](int unit) { buckets->Finished(unit); });
  }
  if (zero != nullptr && job.parallel().overlap_param_gather()) {
    parameter_gather_ = std::make_unique<parallel::ParameterGather>(
        params, replicas, gradient_buckets_->buckets(), *zero);
    model_->WaitForParametersWith(
        [gather = parameter_gather_.get()](int unit) { gather->WaitFor(unit); });
  }
}

absl::Status ModelAndOptimizer::CheckPlanFitsDevice(const config::JobConfig& job,
                                                    const models::LlamaConfig& arch,
                                                    const TrainingPlacement& placement,
                                                    bool distributed_optimizer) const {
  JobLayout layout;
  layout.spec = grid_->spec();
  layout.dtype = placement.dtype;
  layout.separate_master = placement.separate_master || placement.dtype != DType::kF32;
  layout.distributed_optimizer = distributed_optimizer;
  KELVIN_ASSIGN_OR_RETURN(const models::MemoryPlan plan,
                          PlanRankMemory(job, arch, layout, grid_->tp_rank(), grid_->pp_rank()));
  const int64_t available = DeviceMemoryBytes(placement.ctx.device());
  if (available <= 0 || plan.Total() <= available) return absl::OkStatus();
  std::vector<std::string> remedies = ActivationMemoryRemedies(job);
  remedies.push_back("spread the model over more processes (parallel.*; kelvin plan --layouts)");
  const auto gib = [](int64_t bytes) { return static_cast<double>(bytes) / (1 << 30); };
  return absl::ResourceExhaustedError(absl::StrFormat(
      "this rank's memory plan needs %.2f GiB (%s), more than the %.2f GiB of %s: %s",
      gib(plan.Total()), plan.ToString(), gib(available), placement.ctx.device().ToString(),
      absl::StrJoin(remedies, ", or ")));
}

models::MemoryPlan ModelAndOptimizer::MemoryPlanOf(const config::JobConfig& job,
                                                   const models::LlamaConfig& arch, int tensor_rank,
                                                   int pipeline_rank) const {
  JobLayout layout;
  layout.spec = grid_->spec();
  layout.dtype = model_->dtype();
  layout.separate_master = model_->parameters().has_model_copy();
  layout.distributed_optimizer = optimizer_->ShardsState();
  const absl::StatusOr<models::MemoryPlan> plan =
      PlanRankMemory(job, arch, layout, tensor_rank, pipeline_rank);
  KELVIN_CHECK(plan.ok()) << plan.status();  // this rank's pipeline program was built the same way
  return *plan;
}

void ModelAndOptimizer::SettleParameters() {
  if (parameter_gather_ != nullptr) parameter_gather_->WaitAll();
}

bool ModelAndOptimizer::GatheringParameters() const {
  return parameter_gather_ != nullptr && parameter_gather_->in_flight();
}

void ModelAndOptimizer::FinishGradientReduction() {
  model_->FinishGradients();
  if (gradient_buckets_ != nullptr) gradient_buckets_->Wait();
}

}  // namespace kelvin::training
