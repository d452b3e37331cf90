// What a job needs before it runs, from its config alone (no MPI, no allocation): the layout on a
// given number of processes (the grid spec, validated against the model and the batch) and each
// rank's memory plan. `kelvin plan` prints it, `kelvin launch` checks it before submitting, and the
// trainer logs the plan of its own layout at the start.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "configs/kelvin.pb.h"
#include "core/dtype.h"
#include "models/llama/llama_config.h"
#include "models/llama/memory_plan.h"
#include "parallel/process_grid.h"

namespace kelvin::training {

// parallel.data_parallel, or when 0 derived: world_size / (TP x CP x PP), at least 1.
int DataParallelOf(const config::ParallelConfig& parallel, int world_size);

// parallel.* on `world_size` processes: data parallel derived when 0 (world size / TP x CP x PP),
// gradient accumulation from the batch; errors are ValidateGridSpec's.
absl::StatusOr<parallel::GridSpec> GridSpecOf(const config::JobConfig& job,
                                              const models::LlamaConfig& arch, int world_size);

// A job's layout on `world_size` processes training on CUDA (`cuda`) or the CPU.
struct JobLayout {
  parallel::GridSpec spec;
  DType dtype = DType::kF32;           // the model's (ResolveModelDType)
  bool separate_master = false;        // f32 master weights beside a bf16 model
  bool distributed_optimizer = false;  // asked for, and more than one gradient replica (DP x CP)
  // A forward-only model of the layout (`kelvin eval JOB`): its values alone, one micro-batch in
  // flight, nothing recomputed (models::MemoryPlanOptions::forward_only).
  bool forward_only = false;
};
absl::StatusOr<JobLayout> PlanJobLayout(const config::JobConfig& job,
                                        const models::LlamaConfig& arch, int world_size, bool cuda);
// The forward-only model of a training layout (`kelvin eval JOB` on it): the same grid and dtype,
// no master weights, no optimizer to distribute.
JobLayout ForwardOnlyLayout(const JobLayout& layout);

// The memory plan of the rank at (tensor_rank, pipeline_rank) of `layout`: its pipeline schedule
// gives the micro-batches it holds at once.
absl::StatusOr<models::MemoryPlan> PlanRankMemory(const config::JobConfig& job,
                                                  const models::LlamaConfig& arch,
                                                  const JobLayout& layout, int tensor_rank,
                                                  int pipeline_rank);

// The largest plan over the ranks: the pipeline stage and tensor rank whose total is largest.
struct PeakMemory {
  models::MemoryPlan plan;
  int tensor_rank = 0, pipeline_rank = 0;
};
absl::StatusOr<PeakMemory> PlanPeakMemory(const config::JobConfig& job,
                                          const models::LlamaConfig& arch, const JobLayout& layout);

// The settings not yet in use that shrink every rank's activations: recompute, a smaller
// micro-batch.
std::vector<std::string> ActivationMemoryRemedies(const config::JobConfig& job);

// With launch.gpu_memory_gib set and the layout on CUDA: an error when the largest rank's plan
// exceeds it, naming the rank, the bytes and the settings not yet in use that shrink them (of a
// forward-only layout: more model parallelism, a smaller micro-batch).
absl::Status CheckPlanFitsGpu(const config::JobConfig& job, const JobLayout& layout,
                              const PeakMemory& peak);

// What one checkpoint of `layout` writes (training/checkpoint/checkpoint.h): the master weights
// and AdamW moments of the whole model's trainable parameters (a frozen base is not written),
// each element once, and the largest part (one process's file):
// tensor rank 0 and data-parallel rank 0 of a pipeline stage, which writes its shards' weights and
// moments, with the distributed optimizer its 1/(DP x CP) of them.
struct CheckpointBytes {
  int64_t total = 0;
  int64_t largest_part = 0;
  int largest_part_stage = 0;  // its pipeline stage
};
CheckpointBytes PlanCheckpointBytes(const models::LlamaConfig& arch, const JobLayout& layout);

// The whole model's parameters (LoRA adapters included) that train and that are frozen
// (models::LlamaConfig::trainable).
struct ParameterCounts {
  int64_t trainable = 0, frozen = 0;
};
ParameterCounts CountParameters(const models::LlamaConfig& arch);

// The layout in short, as checkpoints record it and logs print it: "tp2 sp cp2 pp2 vp1 dp4 zero1".
std::string LayoutName(const parallel::GridSpec& spec, bool distributed_optimizer);

// A duration as the plan and the progress lines print it: "0.9s", "4m07s", "28h25m", "2d03h".
std::string FormatDuration(double seconds);

// The report of `kelvin plan`: the model, the layout, the batch, the memory plan of every
// pipeline stage (its largest tensor rank) in GiB, the largest rank's total and the size of a
// checkpoint.
absl::StatusOr<std::string> FormatJobPlan(const config::JobConfig& job,
                                          const models::LlamaConfig& arch, const JobLayout& layout);

// The report of `kelvin plan --forward-only`: the model `kelvin eval JOB` builds on a forward-only
// layout (ForwardOnlyLayout): the model, the layout, the micro-batch, each pipeline stage's memory
// plan (its largest tensor rank) and the largest rank's total.
absl::StatusOr<std::string> FormatForwardPlan(const config::JobConfig& job,
                                              const models::LlamaConfig& arch,
                                              const JobLayout& layout);

}  // namespace kelvin::training
