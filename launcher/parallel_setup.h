// The job's process layout: the grid spec from parallel.* (data parallel derived from the world
// size when 0), validated against the model and batch, and the process grid built over
// MPI_COMM_WORLD. A one-process job gets no grid and makes no MPI call.
#pragma once

#include <mpi.h>

#include <memory>

#include "configs/kelvin.pb.h"
#include "models/llama/llama_config.h"
#include "parallel/process_grid.h"

namespace kelvin::launcher {

// nullptr when the layout is one process and `world` (when MPI is initialised) has one; else the
// grid over `world` (MPI must be initialised: kelvin_main does it under mpirun/srun). Errors name
// the parallel.* fields, the world size and the launch command to use. The communicators are MPI's,
// staging tensors on ctx's device through host memory.
absl::StatusOr<std::unique_ptr<parallel::ProcessGrid>> BuildProcessGrid(
    const config::JobConfig& job, const models::LlamaConfig& arch, MPI_Comm world,
    const Context& ctx);

}  // namespace kelvin::launcher
