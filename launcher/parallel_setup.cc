// Building the job's process grid.
#include "launcher/parallel_setup.h"

#include <mpi.h>

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace kelvin::launcher {

absl::StatusOr<std::unique_ptr<parallel::ProcessGrid>> BuildProcessGrid(
    const config::JobConfig& job, const models::LlamaConfig& arch, MPI_Comm world,
    const Context& ctx) {
  const config::ParallelConfig& p = job.parallel();
  int mpi_initialized = 0, world_size = 1;
  MPI_Initialized(&mpi_initialized);
  if (mpi_initialized) MPI_Comm_size(world, &world_size);
  const int model_parallel = p.tensor_parallel() * p.pipeline_parallel() * p.context_parallel();
  const int data_parallel =
      p.data_parallel() > 0 ? p.data_parallel() : std::max(world_size / model_parallel, 1);
  if (model_parallel * data_parallel == 1 && world_size == 1) return nullptr;
  if (!mpi_initialized) {
    return absl::FailedPreconditionError(absl::StrCat(
        "parallel: the layout needs ", model_parallel * data_parallel,
        " processes but kelvin runs as one: start it with mpirun -np ",
        model_parallel * data_parallel, " kelvin train ... (or srun inside an allocation)"));
  }
  const config::TrainingConfig& t = job.training();
  parallel::GridSpec spec;
  spec.world_size = world_size;
  spec.tensor_parallel = p.tensor_parallel();
  spec.context_parallel = p.context_parallel();
  spec.data_parallel = data_parallel;
  spec.pipeline_parallel = p.pipeline_parallel();
  spec.virtual_pipeline_stages = p.virtual_pipeline_stages();
  spec.sequence_parallel = p.sequence_parallel();
  spec.num_attention_heads = arch.num_attention_heads;
  spec.num_key_value_heads = arch.num_key_value_heads;
  spec.num_layers = arch.num_layers;
  spec.seq_length = t.seq_length();
  spec.micro_batch_size = t.micro_batch_size();
  spec.gradient_accumulation_steps =
      t.gradient_accumulation_steps() > 0
          ? t.gradient_accumulation_steps()
          : t.global_batch_size() / std::max<int64_t>(t.micro_batch_size() * data_parallel, 1);
  spec.global_batch_size = t.global_batch_size();
  parallel::CommunicatorOptions options;
  options.timeout_seconds = p.collective_timeout_seconds();
  return parallel::ProcessGrid::Create(spec, world, parallel::CommBackend::kMpi, options, ctx);
}

}  // namespace kelvin::launcher
