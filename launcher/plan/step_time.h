// The step-time model of `kelvin plan`: one training step of a job's layout on launch.hardware,
// from the FLOPs each rank computes at Kelvin's measured rates, every collective by the ring
// formulas at NVLink or InfiniBand bandwidth, the pipeline bubble, and what the overlapped
// gradient reduction and parameter gather hide. Formulas, not a trace: FormatStepTime names what
// the model does not see.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "configs/kelvin.pb.h"
#include "models/llama/llama_config.h"
#include "training/job/job_plan.h"

namespace kelvin::launcher {

// A ring all-reduce of `bytes` over `ranks` at `bytes_per_second` per rank and direction:
// 2 (n-1)/n x bytes / bandwidth.
double RingAllReduceSeconds(double bytes, int ranks, double bytes_per_second);
// A ring reduce-scatter or all-gather, `bytes` the whole (gathered) buffer: (n-1)/n x bytes /
// bandwidth.
double RingGatherSeconds(double bytes, int ranks, double bytes_per_second);

// Whether a group of `size` ranks `stride` apart holds ranks of two nodes, for any of its copies
// in a grid of `world_size` ranks that fill nodes of `devices_per_node` in rank order
// (parallel/process_grid.h: tensor stride 1, context TP, data-parallel replicas (CP x DP) TP,
// pipeline TP x CP x DP).
bool GroupSpansNodes(int stride, int size, int world_size, int devices_per_node);

// The idle time of a pipeline of p stages with v chunks each over m micro-batches that computes
// for `busy_seconds`: (p-1)/(v m) x busy, so that idle / step = (p-1)/(v m + p-1).
double PipelineBubbleSeconds(double busy_seconds, int stages, int chunks, int64_t micro_batches);

// Collectives started as compute produces their inputs, one at a time in order: collective i
// starts at ready[i] (seconds into the compute) or when collective i-1 ends, whichever is later,
// and takes seconds[i]. What runs past `compute_end` (overlapped gradient reduction: the buckets
// of the last micro-batch's backward).
double ExposedAfterCompute(const std::vector<double>& ready, const std::vector<double>& seconds,
                           double compute_end);
// Collectives all started at time 0, one at a time in order, collective i needed before compute
// segment i starts; segments run in order. The time compute waits (overlapped parameter gather:
// each bucket before its first layer's forward).
double ExposedBeforeCompute(const std::vector<double>& seconds, const std::vector<double>& compute);

// The rates the model divides by (per device), with where they come from.
struct HardwareRates {
  double peak_flops = 0;       // launch.hardware.peak_tflops
  double gemm_flops = 0;       // attained by GEMMs
  double attention_flops = 0;  // attained by the attention core, forward + backward
  double memory_bytes_per_second = 0;
  double intra_node_bytes_per_second = 0, inter_node_bytes_per_second = 0;
  int devices_per_node = 1;
  std::string gemm_source, attention_source;
};

// One kind of communication over a step, on the pipeline stage that sets the step.
struct CommTime {
  std::string kind;  // e.g. "tensor-parallel all-reduce"
  int ranks = 1;
  bool spans_nodes = false;
  double seconds = 0;   // all of it
  double exposed = 0;   // what the step waits for, with the job's overlap settings
  std::string overlap;  // how it is hidden ("" when it is not)
};

struct StepTime {
  std::string not_predicted;  // why there is no prediction ("" when there is)
  HardwareRates rates;
  int slowest_stage = 0;  // the pipeline stage whose micro-batches take longest
  // Over the step, on the slowest stage:
  double gemm_seconds = 0, attention_seconds = 0;
  double memory_bound_seconds = 0;  // norms, residuals, RoPE/SSA, SwiGLU, the loss
  std::vector<CommTime> comms;      // tensor, context and pipeline parallel; then DP / ZeRO-1
  double bubble_seconds = 0;
  double optimizer_seconds = 0;  // AdamW over the rank's shard, memory-bound
  double step_seconds = 0;
  double step_seconds_without_overlap = 0;  // every collective exposed
  double tokens_per_second_per_device = 0;
  double mfu = 0;  // model FLOPs per step / (step x processes x peak)
};

// The step of `layout` (training on CUDA when `cuda`) on the job's launch.hardware. No prediction
// (not_predicted says why) without launch.hardware, or with a GPU preset for a CPU plan.
StepTime PredictStepTime(const config::JobConfig& job, const models::LlamaConfig& arch,
                         const training::JobLayout& layout, bool cuda);

// The breakdown `kelvin plan` prints: the rates and their sources, compute, each communication
// kind (exposed and hidden), the bubble, the optimizer, the step, tokens/s per device and MFU with
// its formula, and what the model is blind to; or one line saying why there is no prediction.
std::string FormatStepTime(const config::JobConfig& job, const training::JobLayout& layout,
                           const StepTime& step);

}  // namespace kelvin::launcher
