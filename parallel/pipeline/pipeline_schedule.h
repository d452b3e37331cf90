// Pipeline-parallel schedules: the order of one rank's forward and backward compute actions in a
// training step (all-forward-all-backward, Megatron's 1F1B and interleaved 1F1B), the blocking
// point-to-point transfers placed between them so that the pipeline cannot deadlock, and a
// simulator of every rank at once (rendezvous Send/Recv) that proves both.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace kelvin::parallel {

// Letters used below: P pipeline stages (ranks of the pipeline group), V virtual stages (model
// chunks per rank), M micro-batches per training step (per data-parallel rank).
//
// Megatron's interleaved layout: chunk c of pipeline rank r is virtual stage c * P + r, so the
// P * V virtual stages run on ranks 0, 1, ..., P-1, 0, 1, ... and virtual stage s holds layers
// [s * L / (P V), (s + 1) * L / (P V)). Virtual stage 0 starts with the embedding, the last one
// ends with the LM head and the loss. With V = 1 the virtual stage is the rank.
enum class PipelineScheduleKind {
  kAllForwardAllBackward,  // GPipe: every forward, then every backward (the reference)
  kOneForwardOneBackward,  // Megatron's 1F1B: warm-up forwards, then one forward one backward
  kInterleaved1F1B,        // Megatron's 1F1B over V >= 2 model chunks per rank
};
// "all-forward-all-backward", "1F1B", "interleaved 1F1B".
std::string_view PipelineScheduleKindName(PipelineScheduleKind kind);

int VirtualStageOf(int chunk, int rank, int stages);  // chunk * stages + rank

// One compute action: the forward or backward of this rank's model chunk on one micro-batch.
struct PipelineAction {
  enum Kind { kForward, kBackward };
  Kind kind;
  int micro_batch;  // in [0, M)
  int chunk;        // this rank's model chunk, in [0, V)
  bool operator==(const PipelineAction&) const = default;
};

// What travels between neighbouring virtual stages s and s + 1 for one micro-batch, same shape
// both ways: the activation (s's forward output, s + 1's forward input) and its gradient (s + 1's
// backward output, s's backward input).
enum class PipelineTensor { kActivation, kGradient };

// One blocking Send or Recv on the pipeline communicator (peer: a pipeline rank, never this one).
// A sent tensor is the output of this rank's `chunk` on `micro_batch` (the activation of a
// forward, the gradient of a backward); a received one is that chunk's input for it (the
// activation for its forward, the gradient for its backward).
struct PipelineTransfer {
  enum Kind { kSend, kRecv };
  Kind kind;
  PipelineTensor tensor;
  int peer;
  int micro_batch;
  int chunk;
  bool operator==(const PipelineTransfer&) const = default;
};

// One step of a rank's program: a compute action or a blocking transfer.
using PipelineStep = std::variant<PipelineAction, PipelineTransfer>;

// The compute actions of pipeline rank `rank` for one training step, in order:
// - all-forward-all-backward (M >= 1; with V >= 2 chunks M divisible by P): every forward, then
//   every backward, each in the interleaved schedule's order below (with V = 1: micro-batches
//   0..M-1 both ways). Backwards in forward order, so parameter gradients accumulate over
//   micro-batches in the same order as under the 1F1B schedules and on one rank: the schedules
//   agree bit for bit;
// - 1F1B (V = 1, M >= P): P - rank - 1 warm-up forwards, then M - (P - rank - 1) pairs of one
//   forward and one backward, then the remaining backwards (Megatron's non-interleaved schedule);
// - interleaved 1F1B (P >= 2, V >= 2, M >= P and M divisible by P): Megatron's interleaved
//   schedule. The k-th forward (k in [0, M V)) runs chunk (k / P) % V on micro-batch
//   (k / (P V)) * P + k % P; the k-th backward the same micro-batch on chunk V - 1 - (k / P) % V.
//   Warm-up: min((P - rank - 1) * 2 + (V - 1) * P, M V) forwards, then pairs of one forward and
//   one backward, then the remaining backwards.
// Under every schedule each chunk runs its backwards in micro-batch order 0..M-1.
// Errors (InvalidArgument, naming the parallel.* or training.* config field): P < 1, rank outside
// [0, P), M < 1, V < 1, M < P for the 1F1B schedules, V != 1 for 1F1B, V < 2 or P < 2 for
// interleaved 1F1B, M not divisible by P when V >= 2.
absl::StatusOr<std::vector<PipelineAction>> BuildPipelineSchedule(PipelineScheduleKind kind,
                                                                  int stages, int rank,
                                                                  int micro_batches,
                                                                  int virtual_stages);

// The program of pipeline rank `rank`: its compute actions (BuildPipelineSchedule) with the
// blocking transfers of their inputs and outputs placed between them. The trainer runs the steps
// in order, nothing else on the pipeline communicator during them:
// - forward (micro-batch m, chunk c): input = the activation received for (m, c), or on virtual
//   stage 0 micro-batch m's tokens through the embedding; keep what the backward needs; output =
//   the activation to send for (m, c), or on the last virtual stage the loss of micro-batch m;
// - backward (m, c): output gradient = the one received for (m, c), or on the last virtual stage
//   the gradient of micro-batch m's loss; accumulate parameter gradients (+=), free (m, c)'s
//   saved activations; input gradient = the gradient to send for (m, c) (none on stage 0);
// - Send: Communicator::Send(the tensor named by (tensor, m, c), peer), returning once received;
// - Recv: Communicator::Recv into the buffer for (tensor, m, c) from peer.
// Every transfer precedes the action consuming it and follows the action producing it. Why it
// cannot deadlock: the actions are timed on an ideal pipeline (zero-time transfers, forward 1,
// backward 2 time units, each action as early as its inputs and rank allow), every transfer
// happens at its producer's finishing time, and every rank's steps follow one global order (time,
// then transfers before actions, then a fixed tie-break). So every rank meets its transfers in
// the one global order of transfers, and the earliest unfinished one always has both of its ranks
// waiting at it: it completes. Errors: those of BuildPipelineSchedule.
absl::StatusOr<std::vector<PipelineStep>> BuildPipelineProgram(PipelineScheduleKind kind,
                                                               int stages, int rank,
                                                               int micro_batches,
                                                               int virtual_stages);

// The most micro-batches whose forward has run and whose backward has not, over all chunks at
// any point of `actions` (the activation memory the schedule needs, in micro-batches of one
// chunk): M under all-forward-all-backward, P - rank under 1F1B.
int64_t PeakInFlightMicroBatches(const std::vector<PipelineAction>& actions);

// Runs `programs` (one per pipeline rank, P = programs.size()) together with blocking rendezvous
// Send/Recv: a transfer completes when both of its ranks have reached it, in order per pair of
// ranks. Checks that every transfer meets its counterpart (same tensor and micro-batch, from
// virtual stage s to s + 1 for an activation, s + 1 to s for a gradient, after its producer ran)
// and that every rank runs the forward and then the backward of every (micro-batch, chunk)
// exactly once, each after receiving its input. Internal error naming the ranks, their steps and
// what they are stuck at (deadlock), or the first violation.
absl::Status SimulatePipelinePrograms(const std::vector<std::vector<PipelineStep>>& programs,
                                      int micro_batches, int virtual_stages);

// Builds every rank's program for the schedule and runs SimulatePipelinePrograms on them; errors
// are prefixed with the schedule ("1F1B, P=2 M=4 V=1: ...").
absl::Status SimulatePipelineSchedules(PipelineScheduleKind kind, int stages, int micro_batches,
                                       int virtual_stages);

// "forward(micro-batch 1, virtual stage 2)", "Send activation(micro-batch 1, virtual stage 2) to
// rank 3", "Recv gradient(micro-batch 0, virtual stage 2) from rank 3": the step of pipeline rank
// `rank`, for logs and error messages.
std::string PipelineStepText(const PipelineStep& step, int rank, int stages);

}  // namespace kelvin::parallel
