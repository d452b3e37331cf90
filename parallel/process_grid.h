// The process grid TP x CP x DP x PP in Megatron's order (tensor parallel fastest, then context,
// then data, then pipeline parallel): world rank = tp + TP * (cp + CP * (dp + DP * pp)). Validates
// the layout against the model and batch, then builds every group's communicator once.
#pragma once

#include <mpi.h>

#include <cstdint>
#include <memory>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "parallel/comm/communicator.h"
#include "parallel/comm/timed_communicator.h"

namespace kelvin::parallel {

// What the layout is checked against: sizes as the job config names them (parallel.*), the
// model's heads and layers, the training batch. Plain numbers, so tests and the launcher fill it
// from anything; resolved values (data_parallel and gradient_accumulation_steps derived, not 0).
// Every count must be >= 1.
struct GridSpec {
  int world_size = 1;
  int tensor_parallel = 1;
  int context_parallel = 1;
  int data_parallel = 1;
  int pipeline_parallel = 1;
  int virtual_pipeline_stages = 1;  // model chunks per pipeline rank
  bool sequence_parallel = false;
  int64_t num_attention_heads = 1;  // H
  int64_t num_key_value_heads = 1;  // G
  int64_t num_layers = 1;           // L
  int64_t seq_length = 1;           // tokens per sequence
  int64_t micro_batch_size = 1;
  int64_t gradient_accumulation_steps = 1;  // micro-batches per step per data-parallel rank
  int64_t global_batch_size = 1;
};

// Every problem of the layout at once: InvalidArgument "invalid parallel layout: <problem>" or
// "invalid parallel layout (N problems):\n  <problem>\n  <problem>". Problems: a count < 1; world
// size != TP x CP x DP x PP; H not divisible by TP; G neither divisible by TP nor dividing it (KV
// heads are replicated when TP > G, as in Megatron); L not divisible by PP x virtual stages;
// sequence not divisible by 2 x CP (context parallel), or sequence / CP by TP (sequence
// parallel); global batch != micro-batch x accumulation x DP.
absl::Status ValidateGridSpec(const GridSpec& spec);

// A rank's place in the grid.
struct GridCoordinates {
  int tp = 0, cp = 0, dp = 0, pp = 0;
};
GridCoordinates CoordinatesOf(int world_rank, const GridSpec& spec);
int WorldRankOf(const GridCoordinates& coordinates, const GridSpec& spec);

class ProcessGrid {
 public:
  // Validates `spec` (world_size must be `world`'s size), then builds the communicators:
  // collective over `world`, which the caller keeps. Sets the log rank to the world rank.
  static absl::StatusOr<std::unique_ptr<ProcessGrid>> Create(const GridSpec& spec, MPI_Comm world,
                                                             CommBackend backend,
                                                             const CommunicatorOptions& options,
                                                             const Context& ctx);
  // One process: every group is this process alone (parallel/comm/self_communicator.h), so that
  // code treats one process as any other layout. `spec` must be for world size 1; validated as
  // Create's.
  static absl::StatusOr<std::unique_ptr<ProcessGrid>> Single(const GridSpec& spec,
                                                             const Context& ctx);

  const GridSpec& spec() const { return spec_; }
  int world_rank() const { return world_rank_; }
  const GridCoordinates& coordinates() const { return coordinates_; }
  int tp_rank() const { return coordinates_.tp; }
  int cp_rank() const { return coordinates_.cp; }
  int dp_rank() const { return coordinates_.dp; }
  int pp_rank() const { return coordinates_.pp; }
  bool is_first_stage() const { return coordinates_.pp == 0; }
  bool is_last_stage() const { return coordinates_.pp == spec_.pipeline_parallel - 1; }

  Communicator& world() { return *world_; }
  Communicator& tp() { return *tp_; }  // ranks differing only in tp, by tp
  Communicator& cp() { return *cp_; }
  Communicator& dp() { return *dp_; }
  Communicator& pp() { return *pp_; }
  // Ranks differing only in (cp, dp), by cp + CP * dp: gradients are reduced over it.
  Communicator& dp_cp() { return *dp_cp_; }
  // The first and last pipeline stage of this (tp, cp, dp) (one rank when PP == 1), whose tied
  // embedding gradients are summed over it; nullptr on the stages in between.
  Communicator* embedding() { return embedding_.get(); }

  // Seconds this rank has spent in the calls of all its groups, and of the pipeline group alone
  // (waiting for the neighbouring stages included), since the grid was made.
  double CommunicationSeconds() const;
  double PipelineCommunicationSeconds() const { return pp_->seconds(); }

 private:
  ProcessGrid() = default;

  GridSpec spec_;
  int world_rank_ = 0;
  GridCoordinates coordinates_;
  std::unique_ptr<TimedCommunicator> world_, tp_, cp_, dp_, pp_, dp_cp_, embedding_;
};

}  // namespace kelvin::parallel
