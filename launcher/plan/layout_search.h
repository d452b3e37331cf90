// The layouts `kelvin plan --layouts` compares: every tensor x context x pipeline x data split of
// N processes that the job's model and batch allow, each with its largest rank's memory plan and
// (with launch.hardware) predicted step time, ranked by fit, then time, then as Megatron jobs
// are sized.
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "configs/kelvin.pb.h"
#include "launcher/plan/step_time.h"
#include "models/llama/llama_config.h"
#include "training/job/job_plan.h"

namespace kelvin::launcher {

struct LayoutCandidate {
  config::ParallelConfig parallel;  // the job's parallel section for this layout
  training::JobLayout layout;
  training::PeakMemory peak;            // its largest rank
  double pipeline_bubble = 0;           // idle share of a pipelined step: (p-1) / (v m + p-1)
  bool tensor_parallel_in_node = true;  // tensor_parallel <= launch.processes_per_node
  bool fits = true;    // the largest rank within launch.gpu_memory_gib (true when unset, or CPU)
  StepTime step_time;  // predicted from launch.hardware (not_predicted says why not)
};

struct LayoutSearch {
  std::vector<LayoutCandidate> candidates;   // best first
  int invalid = 0;                           // splits the job's model or batch does not allow
  std::vector<std::string> invalid_reasons;  // distinct reasons, in the order met
};

// Context parallelism runs in powers of two, pipelines in any divisor with 1 or 2 model chunks
// per stage; a job that sets training.gradient_accumulation_steps keeps it (which fixes the
// data-parallel size; leave it unset to compare them all). Sequence parallelism goes with tensor
// parallelism and the distributed optimizer with more than one gradient replica (each saves
// memory and moves the same bytes); the job's micro-batch, sequence length, recompute and overlap
// settings are kept. The order: fit the GPU, then the shortest predicted step (with
// launch.hardware), the least model parallelism, tensor parallelism inside a node, the smallest
// pipeline bubble, the most headroom.
// Every valid layout of `job` on `world_size` processes, ordered best first; an error only when
// the job itself cannot be planned (e.g. its sequence is longer than the model allows).
absl::StatusOr<LayoutSearch> SearchLayouts(const config::JobConfig& job,
                                           const models::LlamaConfig& arch, int world_size,
                                           bool cuda);

// The --set overrides that select `candidate` in the job.
std::vector<std::string> LayoutOverrides(const LayoutCandidate& candidate);

// The table `kelvin plan --layouts` prints: the first `shown` candidates (with launch.hardware
// their predicted step and tokens/s per device), how many fit, the invalid splits' reasons, the
// order's rule and the overrides of the first.
std::string FormatLayoutSearch(const config::JobConfig& job, const LayoutSearch& search,
                               int world_size, int shown);

}  // namespace kelvin::launcher
