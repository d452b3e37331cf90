// Building the job's process grid.
#include "training/job/parallel_setup.h"

#include <mpi.h>

#include "absl/strings/str_cat.h"
#include "core/device.h"
#include "core/logging.h"
#include "core/mpi_check.h"
#include "training/job/job_plan.h"

namespace kelvin::training {

NodePlace NodePlaceOf(MPI_Comm world) {
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (!initialized) return {};
  MPI_Comm node;
  KELVIN_MPI_CHECK(MPI_Comm_split_type(world, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node));
  NodePlace place;
  KELVIN_MPI_CHECK(MPI_Comm_rank(node, &place.rank));
  KELVIN_MPI_CHECK(MPI_Comm_size(node, &place.size));
  KELVIN_MPI_CHECK(MPI_Comm_free(&node));
  return place;
}

absl::StatusOr<parallel::CommBackend> ResolveBackend(const config::ParallelConfig& parallel,
                                                     const Context& ctx, int node_processes) {
  const int gpus = ctx.is_cuda() ? CudaDeviceCount() : 0;
  switch (parallel.communication_backend()) {
    case config::ParallelConfig::MPI:
      return parallel::CommBackend::kMpi;
    case config::ParallelConfig::NCCL:
      if (!ctx.is_cuda()) {
        return absl::InvalidArgumentError(
            "parallel.communication_backend=NCCL needs training on CUDA, but this job trains on "
            "the CPU (training.device): use AUTO or MPI");
      }
      if (node_processes > gpus) {
        return absl::InvalidArgumentError(absl::StrCat(
            "parallel.communication_backend=NCCL needs a GPU per process, but ", node_processes,
            " processes share this node's ", gpus, " GPU(s): start at most ", gpus,
            " per node, or use MPI (device tensors staged through host memory)"));
      }
      return parallel::CommBackend::kNccl;
    default:
      return ctx.is_cuda() && node_processes <= gpus ? parallel::CommBackend::kNccl
                                                     : parallel::CommBackend::kMpi;
  }
}

absl::StatusOr<std::unique_ptr<parallel::ProcessGrid>> BuildProcessGrid(
    const config::JobConfig& job, const models::LlamaConfig& arch, MPI_Comm world,
    const Context& ctx, int node_processes) {
  const config::ParallelConfig& p = job.parallel();
  int mpi_initialized = 0, world_size = 1;
  MPI_Initialized(&mpi_initialized);
  if (mpi_initialized) MPI_Comm_size(world, &world_size);
  const int processes = p.tensor_parallel() * p.pipeline_parallel() * p.context_parallel() *
                        DataParallelOf(p, world_size);
  if (processes == 1 && world_size == 1) {
    KELVIN_ASSIGN_OR_RETURN(const parallel::GridSpec spec, GridSpecOf(job, arch, 1));
    return parallel::ProcessGrid::Single(spec, ctx);
  }
  if (!mpi_initialized) {
    return absl::FailedPreconditionError(
        absl::StrCat("parallel: the layout needs ", processes,
                     " processes but kelvin runs as one: start it with mpirun -np ", processes,
                     " kelvin train ... (or srun inside an allocation)"));
  }
  KELVIN_ASSIGN_OR_RETURN(const parallel::GridSpec spec, GridSpecOf(job, arch, world_size));
  KELVIN_ASSIGN_OR_RETURN(const parallel::CommBackend backend,
                          ResolveBackend(p, ctx, node_processes));
  KLOG_RANK0(INFO) << "communicators: "
                   << (backend == parallel::CommBackend::kNccl
                           ? "NCCL (one GPU per process)"
                           : (ctx.is_cuda() ? "MPI (device tensors staged through host memory)"
                                            : "MPI"));
  parallel::CommunicatorOptions options;
  options.timeout_seconds = p.collective_timeout_seconds();
  return parallel::ProcessGrid::Create(spec, world, backend, options, ctx);
}

parallel::PipelineScheduleKind ScheduleKindOf(config::ParallelConfig::PipelineSchedule schedule) {
  switch (schedule) {
    case config::ParallelConfig::ALL_FORWARD_ALL_BACKWARD:
      return parallel::PipelineScheduleKind::kAllForwardAllBackward;
    case config::ParallelConfig::INTERLEAVED_1F1B:
      return parallel::PipelineScheduleKind::kInterleaved1F1B;
    default:
      return parallel::PipelineScheduleKind::kOneForwardOneBackward;
  }
}

bool MayTrainOnCuda(const config::JobConfig& job) {
  return job.training().device() == config::TrainingConfig::CUDA ||
         (job.training().device() == config::TrainingConfig::AUTO && CudaAvailable());
}

models::LlamaParallelism LlamaParallelismOf(parallel::ProcessGrid& grid) {
  const parallel::GridSpec& spec = grid.spec();
  models::LlamaParallelism parallelism;
  parallelism.tp = &grid.tp();
  parallelism.cp = &grid.cp();
  parallelism.pp = &grid.pp();
  parallelism.sequence_parallel = spec.sequence_parallel;
  parallelism.virtual_stages = spec.pipeline_parallel > 1 ? spec.virtual_pipeline_stages : 1;
  parallelism.embedding = grid.embedding();
  return parallelism;
}

}  // namespace kelvin::training
