// The job's process layout: the grid spec from parallel.* (data parallel derived from the world
// size when 0), validated against the model and batch, and the process grid built over
// MPI_COMM_WORLD (the size-1 grid for one process); the pipeline schedule of parallel.*.
#pragma once

#include <mpi.h>

#include <memory>

#include "configs/kelvin.pb.h"
#include "models/llama/llama_config.h"
#include "models/llama/llama_model.h"
#include "parallel/pipeline/pipeline_schedule.h"
#include "parallel/process_grid.h"

namespace kelvin::training {

// This process's place among the processes of its node in `world` (MPI_Comm_split_type
// SHARED; collective over `world`); rank 0 of 1 without MPI.
struct NodePlace {
  int rank = 0, size = 1;
};
NodePlace NodePlaceOf(MPI_Comm world);

// parallel.communication_backend on this rank's device: AUTO is NCCL when training on CUDA with a
// GPU for each of the node's `node_processes`, else MPI. NCCL on the CPU, or with more processes
// than GPUs on the node, is an error naming the field and the counts.
absl::StatusOr<parallel::CommBackend> ResolveBackend(const config::ParallelConfig& parallel,
                                                     const Context& ctx, int node_processes);

// The size-1 grid when the layout is one process and `world` (when MPI is initialised) has one;
// else the grid over `world` (MPI must be initialised: kelvin_main does it under mpirun/srun).
// Errors name the parallel.* fields, the world size and the launch command to use. The
// communicators work on ctx's device with ResolveBackend's library.
absl::StatusOr<std::unique_ptr<parallel::ProcessGrid>> BuildProcessGrid(
    const config::JobConfig& job, const models::LlamaConfig& arch, MPI_Comm world,
    const Context& ctx, int node_processes);

// Whether ResolvePlacement may pick CUDA for the job (then its processes need their node-local
// ranks, NodePlaceOf).
bool MayTrainOnCuda(const config::JobConfig& job);

// The model's parallel groups on this rank of `grid` (tensor, sequence, context, pipeline with its
// virtual stages, and the tied embeddings' group).
models::LlamaParallelism LlamaParallelismOf(parallel::ProcessGrid& grid);

// parallel.pipeline_schedule as the schedule builder's kind.
parallel::PipelineScheduleKind ScheduleKindOf(config::ParallelConfig::PipelineSchedule schedule);

}  // namespace kelvin::training
