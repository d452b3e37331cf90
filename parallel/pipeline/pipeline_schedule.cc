// The pipeline schedules (one warm-up / steady / cool-down skeleton for all three kinds), the
// placement of their blocking transfers by an ideal timed run, and the rendezvous simulator.
#include "parallel/pipeline/pipeline_schedule.h"

#include <algorithm>
#include <tuple>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/check.h"
#include "core/status.h"

namespace kelvin::parallel {
namespace {

// Durations of the ideal run that orders the transfers. Any positive durations give a program
// that cannot deadlock; these follow a real step (a backward costs about two forwards).
constexpr int64_t kForwardTime = 1;
constexpr int64_t kBackwardTime = 2;

absl::Status ScheduleError(PipelineScheduleKind kind, const std::string& problem) {
  return absl::InvalidArgumentError(absl::StrCat("invalid pipeline schedule ",
                                                 std::string(PipelineScheduleKindName(kind)),
                                                 " (parallel.pipeline_schedule): ", problem));
}

absl::Status ValidateSchedule(PipelineScheduleKind kind, int stages, int rank, int micro_batches,
                              int virtual_stages) {
  if (stages < 1) {
    return ScheduleError(kind,
                         absl::StrCat("parallel.pipeline_parallel=", stages, ": must be >= 1"));
  }
  if (rank < 0 || rank >= stages) {
    return ScheduleError(kind, absl::StrCat("pipeline rank ", rank, " is outside [0, ", stages,
                                            ") for parallel.pipeline_parallel=", stages));
  }
  if (micro_batches < 1) {
    return ScheduleError(kind, absl::StrCat("training.gradient_accumulation_steps=", micro_batches,
                                            " micro-batches per step: must be >= 1"));
  }
  const bool interleaved = kind == PipelineScheduleKind::kInterleaved1F1B;
  if (virtual_stages < 1) {
    return ScheduleError(
        kind, absl::StrCat("parallel.virtual_pipeline_stages=", virtual_stages, ": must be >= 1"));
  }
  if (kind == PipelineScheduleKind::kOneForwardOneBackward && virtual_stages != 1) {
    return ScheduleError(
        kind, absl::StrCat("parallel.virtual_pipeline_stages=", virtual_stages,
                           ": this schedule runs one model chunk per rank; set it to 1, or use "
                           "INTERLEAVED_1F1B"));
  }
  if ((interleaved || virtual_stages > 1) && stages < 2) {
    return ScheduleError(kind, absl::StrCat("parallel.pipeline_parallel=", stages,
                                            ": interleaving model chunks needs >= 2 stages; use "
                                            "virtual_pipeline_stages=1 and ONE_F_ONE_B"));
  }
  if (interleaved && virtual_stages < 2) {
    return ScheduleError(kind, absl::StrCat("parallel.virtual_pipeline_stages=", virtual_stages,
                                            ": interleaving needs >= 2 model chunks per rank; "
                                            "set it, or use ONE_F_ONE_B"));
  }
  if (kind != PipelineScheduleKind::kAllForwardAllBackward && micro_batches < stages) {
    return ScheduleError(
        kind, absl::StrCat("training.gradient_accumulation_steps=", micro_batches,
                           " micro-batches per step is fewer than parallel.pipeline_parallel=",
                           stages, " stages; use >= ", stages,
                           " micro-batches (global_batch_size / (micro_batch_size x data-parallel "
                           "size)), or ALL_FORWARD_ALL_BACKWARD"));
  }
  if (virtual_stages > 1 && micro_batches % stages != 0) {
    const int below = micro_batches / stages * stages;
    return ScheduleError(
        kind, absl::StrCat(
                  "training.gradient_accumulation_steps=", micro_batches,
                  " micro-batches per step is not divisible by parallel.pipeline_parallel=", stages,
                  " (each model chunk runs micro-batches in groups of ", stages,
                  ", Megatron's rule); use ", below, " or ", below + stages, " micro-batches"));
  }
  return absl::OkStatus();
}

// The k-th forward or backward of a rank (k in [0, M V)): micro-batches in groups of P per chunk,
// chunks ascending for forwards and descending for backwards. With V = 1: micro-batch k, chunk 0.
PipelineAction KthAction(PipelineAction::Kind kind, int k, int stages, int virtual_stages) {
  const int group = k / stages % virtual_stages;
  return PipelineAction{kind, k / (stages * virtual_stages) * stages + k % stages,
                        kind == PipelineAction::kForward ? group : virtual_stages - 1 - group};
}

// One rank's compute actions of a validated schedule: `warmup` forwards, then one forward and one
// backward while forwards remain, then the remaining backwards.
std::vector<PipelineAction> ScheduleOf(PipelineScheduleKind kind, int stages, int rank,
                                       int micro_batches, int virtual_stages) {
  const int count = micro_batches * virtual_stages;  // forwards, and backwards, of the rank
  int warmup = count;                                // all-forward-all-backward
  if (kind == PipelineScheduleKind::kOneForwardOneBackward) warmup = stages - rank - 1;
  if (kind == PipelineScheduleKind::kInterleaved1F1B) {
    warmup = std::min((stages - rank - 1) * 2 + (virtual_stages - 1) * stages, count);
  }
  std::vector<PipelineAction> actions;
  actions.reserve(2 * count);
  for (int k = 0; k < warmup; ++k) {
    actions.push_back(KthAction(PipelineAction::kForward, k, stages, virtual_stages));
  }
  for (int k = 0; k < count - warmup; ++k) {
    actions.push_back(KthAction(PipelineAction::kForward, warmup + k, stages, virtual_stages));
    actions.push_back(KthAction(PipelineAction::kBackward, k, stages, virtual_stages));
  }
  for (int k = count - warmup; k < count; ++k) {
    actions.push_back(KthAction(PipelineAction::kBackward, k, stages, virtual_stages));
  }
  return actions;
}

// When each (kind, virtual stage, micro-batch) action of an ideal run of every rank's schedule
// finishes; -1 while unknown.
class IdealRun {
 public:
  IdealRun(const std::vector<std::vector<PipelineAction>>& schedules, int micro_batches,
           int virtual_stages)
      : stages_(static_cast<int>(schedules.size())),
        last_stage_(stages_ * virtual_stages - 1),
        micro_batches_(micro_batches),
        finish_(2 * static_cast<size_t>(last_stage_ + 1) * micro_batches, -1),
        start_(schedules.size()) {
    std::vector<size_t> next(schedules.size(), 0);
    std::vector<int64_t> rank_free(schedules.size(), 0);
    for (bool progress = true; progress;) {
      progress = false;
      for (int rank = 0; rank < stages_; ++rank) {
        while (next[rank] < schedules[rank].size() &&
               TryRun(rank, schedules[rank][next[rank]], rank_free[rank])) {
          ++next[rank];
          progress = true;
        }
      }
    }
    for (int rank = 0; rank < stages_; ++rank) {
      KELVIN_CHECK(next[rank] == schedules[rank].size())
          << "pipeline schedule with a dependency cycle: rank " << rank << " stuck at action "
          << next[rank];
    }
  }

  int64_t Finish(PipelineAction::Kind kind, int stage, int micro_batch) const {
    return finish_[Index(kind, stage, micro_batch)];
  }
  // Start times of `rank`'s actions, in schedule order.
  const std::vector<int64_t>& Starts(int rank) const { return start_[rank]; }
  int last_stage() const { return last_stage_; }

 private:
  // Runs `action` of `rank` as early as the rank (free from `rank_free` on, then updated) and its
  // inputs allow, once the producers of its inputs have run (true).
  bool TryRun(int rank, const PipelineAction& action, int64_t& rank_free) {
    const int stage = VirtualStageOf(action.chunk, rank, stages_);
    const bool forward = action.kind == PipelineAction::kForward;
    std::vector<std::pair<PipelineAction::Kind, int>> producers;  // (kind, virtual stage)
    if (forward && stage > 0) producers.emplace_back(PipelineAction::kForward, stage - 1);
    if (!forward) producers.emplace_back(PipelineAction::kForward, stage);
    if (!forward && stage < last_stage_) {
      producers.emplace_back(PipelineAction::kBackward, stage + 1);
    }
    int64_t start = rank_free;
    for (const auto& [kind, producer_stage] : producers) {
      const int64_t ready = Finish(kind, producer_stage, action.micro_batch);
      if (ready < 0) return false;
      start = std::max(start, ready);
    }
    rank_free = start + (forward ? kForwardTime : kBackwardTime);
    finish_[Index(action.kind, stage, action.micro_batch)] = rank_free;
    start_[rank].push_back(start);
    return true;
  }

  size_t Index(PipelineAction::Kind kind, int stage, int micro_batch) const {
    return (static_cast<size_t>(kind) * (last_stage_ + 1) + stage) * micro_batches_ + micro_batch;
  }

  int stages_;
  int last_stage_;
  int micro_batches_;
  std::vector<int64_t> finish_;  // [2 kinds, P V stages, M]
  std::vector<std::vector<int64_t>> start_;
};

int VirtualStageOfStep(const PipelineStep& step, int rank, int stages) {
  return std::visit([&](const auto& s) { return VirtualStageOf(s.chunk, rank, stages); }, step);
}

}  // namespace

std::string_view PipelineScheduleKindName(PipelineScheduleKind kind) {
  switch (kind) {
    case PipelineScheduleKind::kAllForwardAllBackward:
      return "all-forward-all-backward";
    case PipelineScheduleKind::kOneForwardOneBackward:
      return "1F1B";
    case PipelineScheduleKind::kInterleaved1F1B:
      return "interleaved 1F1B";
  }
  KELVIN_FATAL() << "unknown pipeline schedule kind " << static_cast<int>(kind);
}

int VirtualStageOf(int chunk, int rank, int stages) { return chunk * stages + rank; }

absl::StatusOr<std::vector<PipelineAction>> BuildPipelineSchedule(PipelineScheduleKind kind,
                                                                  int stages, int rank,
                                                                  int micro_batches,
                                                                  int virtual_stages) {
  KELVIN_RETURN_IF_ERROR(ValidateSchedule(kind, stages, rank, micro_batches, virtual_stages));
  return ScheduleOf(kind, stages, rank, micro_batches, virtual_stages);
}

absl::StatusOr<std::vector<PipelineStep>> BuildPipelineProgram(PipelineScheduleKind kind,
                                                               int stages, int rank,
                                                               int micro_batches,
                                                               int virtual_stages) {
  KELVIN_RETURN_IF_ERROR(ValidateSchedule(kind, stages, rank, micro_batches, virtual_stages));
  std::vector<std::vector<PipelineAction>> schedules;
  for (int r = 0; r < stages; ++r) {
    schedules.push_back(ScheduleOf(kind, stages, r, micro_batches, virtual_stages));
  }
  const IdealRun run(schedules, micro_batches, virtual_stages);

  // Every step of the rank with its place in the one global order: (time, 0 for a transfer and
  // 1 for an action, then for a transfer its tensor, producing virtual stage and micro-batch; for
  // an action its position in the schedule).
  using Order = std::tuple<int64_t, int, int, int, int>;
  std::vector<std::pair<Order, PipelineStep>> steps;
  const auto add_transfer = [&](PipelineTransfer::Kind direction, PipelineTensor tensor,
                                int peer_stage, int producer_stage, const PipelineAction& action) {
    const PipelineAction::Kind producer_kind = tensor == PipelineTensor::kActivation
                                                   ? PipelineAction::kForward
                                                   : PipelineAction::kBackward;
    const Order order{run.Finish(producer_kind, producer_stage, action.micro_batch), 0,
                      static_cast<int>(tensor), producer_stage, action.micro_batch};
    steps.emplace_back(order, PipelineTransfer{direction, tensor, peer_stage % stages,
                                               action.micro_batch, action.chunk});
  };
  const std::vector<PipelineAction>& actions = schedules[rank];
  for (size_t i = 0; i < actions.size(); ++i) {
    const PipelineAction& action = actions[i];
    const int stage = VirtualStageOf(action.chunk, rank, stages);
    steps.emplace_back(Order{run.Starts(rank)[i], 1, static_cast<int>(i), 0, 0}, action);
    if (action.kind == PipelineAction::kForward) {
      if (stage > 0) {
        add_transfer(PipelineTransfer::kRecv, PipelineTensor::kActivation, stage - 1, stage - 1,
                     action);
      }
      if (stage < run.last_stage()) {
        add_transfer(PipelineTransfer::kSend, PipelineTensor::kActivation, stage + 1, stage,
                     action);
      }
    } else {
      if (stage < run.last_stage()) {
        add_transfer(PipelineTransfer::kRecv, PipelineTensor::kGradient, stage + 1, stage + 1,
                     action);
      }
      if (stage > 0) {
        add_transfer(PipelineTransfer::kSend, PipelineTensor::kGradient, stage - 1, stage, action);
      }
    }
  }
  std::sort(steps.begin(), steps.end(),
            [](const auto& a, const auto& b) { return a.first < b.first; });
  std::vector<PipelineStep> program;
  program.reserve(steps.size());
  for (auto& [order, step] : steps) program.push_back(std::move(step));
  return program;
}

int64_t PeakInFlightMicroBatches(const std::vector<PipelineAction>& actions) {
  int64_t in_flight = 0;
  int64_t peak = 0;
  for (const PipelineAction& action : actions) {
    in_flight += action.kind == PipelineAction::kForward ? 1 : -1;
    peak = std::max(peak, in_flight);
  }
  return peak;
}

std::string PipelineStepText(const PipelineStep& step, int rank, int stages) {
  const std::string where =
      absl::StrCat("(micro-batch ", std::visit([](const auto& s) { return s.micro_batch; }, step),
                   ", virtual stage ", VirtualStageOfStep(step, rank, stages), ")");
  if (const auto* action = std::get_if<PipelineAction>(&step)) {
    return absl::StrCat(action->kind == PipelineAction::kForward ? "forward" : "backward", where);
  }
  const auto& transfer = std::get<PipelineTransfer>(step);
  const bool send = transfer.kind == PipelineTransfer::kSend;
  return absl::StrCat(send ? "Send " : "Recv ",
                      transfer.tensor == PipelineTensor::kActivation ? "activation" : "gradient",
                      where, send ? " to rank " : " from rank ", transfer.peer);
}

namespace {

// The rendezvous run of every rank's program (SimulatePipelinePrograms).
class Simulation {
 public:
  Simulation(const std::vector<std::vector<PipelineStep>>& programs, int micro_batches,
             int virtual_stages)
      : programs_(programs),
        stages_(static_cast<int>(programs.size())),
        micro_batches_(micro_batches),
        virtual_stages_(virtual_stages),
        ranks_(programs.size(), RankState(static_cast<size_t>(micro_batches) * virtual_stages)) {}

  absl::Status Run() {
    for (bool progress = true; progress;) {
      progress = false;
      for (int rank = 0; rank < stages_; ++rank) {
        while (const PipelineStep* step = Current(rank)) {
          if (const auto* action = std::get_if<PipelineAction>(step)) {
            KELVIN_RETURN_IF_ERROR(Compute(rank, *action));
            ++ranks_[rank].next;
          } else {
            KELVIN_ASSIGN_OR_RETURN(const bool met, Meet(rank, std::get<PipelineTransfer>(*step)));
            if (!met) break;
          }
          progress = true;
        }
      }
    }
    KELVIN_RETURN_IF_ERROR(DeadlockError());
    return MissingActionError();
  }

 private:
  struct RankState {
    explicit RankState(size_t slots)
        : forward_done(slots), backward_done(slots), activation_in(slots), gradient_in(slots) {}
    size_t next = 0;  // index of the step the rank is at
    // By (chunk, micro-batch) of the rank: [V * M].
    std::vector<char> forward_done, backward_done, activation_in, gradient_in;
  };

  const PipelineStep* Current(int rank) const {
    const size_t next = ranks_[rank].next;
    return next < programs_[rank].size() ? &programs_[rank][next] : nullptr;
  }

  std::string Where(int rank) const {
    return absl::StrCat("rank ", rank, " step ", ranks_[rank].next, " (",
                        PipelineStepText(*Current(rank), rank, stages_), ")");
  }

  absl::Status Violation(int rank, const std::string& problem) const {
    return absl::InternalError(absl::StrCat(Where(rank), ": ", problem));
  }

  // Index of (chunk, micro-batch) in RankState's vectors, or an error if either is out of range.
  absl::StatusOr<size_t> Slot(int rank, int chunk, int micro_batch) const {
    if (chunk < 0 || chunk >= virtual_stages_) {
      return Violation(rank,
                       absl::StrCat("chunk ", chunk, " is outside [0, ", virtual_stages_, ")"));
    }
    if (micro_batch < 0 || micro_batch >= micro_batches_) {
      return Violation(
          rank, absl::StrCat("micro-batch ", micro_batch, " is outside [0, ", micro_batches_, ")"));
    }
    return static_cast<size_t>(chunk) * micro_batches_ + micro_batch;
  }

  int LastStage() const { return stages_ * virtual_stages_ - 1; }

  absl::Status Compute(int rank, const PipelineAction& action) {
    KELVIN_ASSIGN_OR_RETURN(const size_t slot, Slot(rank, action.chunk, action.micro_batch));
    RankState& state = ranks_[rank];
    const int stage = VirtualStageOf(action.chunk, rank, stages_);
    if (action.kind == PipelineAction::kForward) {
      if (state.forward_done[slot]) return Violation(rank, "runs a second time");
      if (stage > 0 && !state.activation_in[slot]) {
        return Violation(rank, absl::StrCat("runs before receiving its input activation from "
                                            "virtual stage ",
                                            stage - 1));
      }
      state.forward_done[slot] = true;
      return absl::OkStatus();
    }
    if (!state.forward_done[slot]) return Violation(rank, "runs before its forward");
    if (state.backward_done[slot]) return Violation(rank, "runs a second time");
    if (stage < LastStage() && !state.gradient_in[slot]) {
      return Violation(rank, absl::StrCat("runs before receiving its output gradient from virtual "
                                          "stage ",
                                          stage + 1));
    }
    state.backward_done[slot] = true;
    return absl::OkStatus();
  }

  // Completes `transfer` with its peer's current step if that is the counterpart (true), or
  // leaves `rank` waiting (false); an error if the two do not match.
  absl::StatusOr<bool> Meet(int rank, const PipelineTransfer& transfer) {
    if (transfer.peer < 0 || transfer.peer >= stages_ || transfer.peer == rank) {
      return Violation(
          rank, absl::StrCat("peer ", transfer.peer, " is not another rank in [0, ", stages_, ")"));
    }
    const PipelineStep* peer_step = Current(transfer.peer);
    const auto* counterpart = peer_step ? std::get_if<PipelineTransfer>(peer_step) : nullptr;
    if (!counterpart || counterpart->peer != rank || counterpart->kind == transfer.kind) {
      return false;
    }
    const bool send = transfer.kind == PipelineTransfer::kSend;
    const int sender = send ? rank : transfer.peer;
    const int receiver = send ? transfer.peer : rank;
    const PipelineTransfer& sent = send ? transfer : *counterpart;
    const PipelineTransfer& received = send ? *counterpart : transfer;
    KELVIN_ASSIGN_OR_RETURN(const size_t sent_slot, Slot(sender, sent.chunk, sent.micro_batch));
    KELVIN_ASSIGN_OR_RETURN(const size_t received_slot,
                            Slot(receiver, received.chunk, received.micro_batch));
    const bool activation = sent.tensor == PipelineTensor::kActivation;
    const int from_stage = VirtualStageOf(sent.chunk, sender, stages_);
    const int to_stage = VirtualStageOf(received.chunk, receiver, stages_);
    const std::string pair = absl::StrCat(Where(sender), " meets ", Where(receiver), ": ");
    if (sent.tensor != received.tensor || sent.micro_batch != received.micro_batch ||
        to_stage != from_stage + (activation ? 1 : -1)) {
      return absl::InternalError(absl::StrCat(
          pair,
          "they do not match (an activation goes from virtual stage s to s + 1 and its "
          "gradient back, for the same micro-batch)"));
    }
    const RankState& from = ranks_[sender];
    if (!(activation ? from.forward_done : from.backward_done)[sent_slot]) {
      return absl::InternalError(absl::StrCat(
          pair, "sent before the ", activation ? "forward" : "backward", " producing it ran"));
    }
    std::vector<char>& arrived =
        activation ? ranks_[receiver].activation_in : ranks_[receiver].gradient_in;
    if (arrived[received_slot]) {
      return absl::InternalError(absl::StrCat(pair, "received a second time"));
    }
    arrived[received_slot] = true;
    ++ranks_[sender].next;
    ++ranks_[receiver].next;
    return true;
  }

  absl::Status DeadlockError() const {
    std::vector<std::string> ranks;
    bool stuck = false;
    for (int rank = 0; rank < stages_; ++rank) {
      if (Current(rank) == nullptr) {
        ranks.push_back(absl::StrCat("rank ", rank, " has finished"));
      } else {
        stuck = true;
        ranks.push_back(absl::StrCat(Where(rank), " of ", programs_[rank].size(), " waits"));
      }
    }
    if (!stuck) return absl::OkStatus();
    return absl::InternalError(absl::StrCat("deadlock: ", absl::StrJoin(ranks, "; ")));
  }

  absl::Status MissingActionError() const {
    for (int rank = 0; rank < stages_; ++rank) {
      for (int chunk = 0; chunk < virtual_stages_; ++chunk) {
        for (int micro_batch = 0; micro_batch < micro_batches_; ++micro_batch) {
          const size_t slot = static_cast<size_t>(chunk) * micro_batches_ + micro_batch;
          for (const PipelineAction::Kind kind :
               {PipelineAction::kForward, PipelineAction::kBackward}) {
            const bool done = kind == PipelineAction::kForward ? ranks_[rank].forward_done[slot]
                                                               : ranks_[rank].backward_done[slot];
            if (done) continue;
            return absl::InternalError(absl::StrCat(
                "rank ", rank, " never ran ",
                PipelineStepText(PipelineAction{kind, micro_batch, chunk}, rank, stages_)));
          }
        }
      }
    }
    return absl::OkStatus();
  }

  const std::vector<std::vector<PipelineStep>>& programs_;
  int stages_;
  int micro_batches_;
  int virtual_stages_;
  std::vector<RankState> ranks_;
};

}  // namespace

absl::Status SimulatePipelinePrograms(const std::vector<std::vector<PipelineStep>>& programs,
                                      int micro_batches, int virtual_stages) {
  KELVIN_CHECK(!programs.empty() && micro_batches >= 1 && virtual_stages >= 1)
      << programs.size() << " programs, " << micro_batches << " micro-batches, " << virtual_stages
      << " virtual stages";
  return Simulation(programs, micro_batches, virtual_stages).Run();
}

absl::Status SimulatePipelineSchedules(PipelineScheduleKind kind, int stages, int micro_batches,
                                       int virtual_stages) {
  KELVIN_RETURN_IF_ERROR(ValidateSchedule(kind, stages, 0, micro_batches, virtual_stages));
  std::vector<std::vector<PipelineStep>> programs;
  for (int rank = 0; rank < stages; ++rank) {
    KELVIN_ASSIGN_OR_RETURN(
        std::vector<PipelineStep> program,
        BuildPipelineProgram(kind, stages, rank, micro_batches, virtual_stages));
    programs.push_back(std::move(program));
  }
  const absl::Status status = SimulatePipelinePrograms(programs, micro_batches, virtual_stages);
  if (status.ok()) return status;
  return absl::Status(status.code(),
                      absl::StrCat(std::string(PipelineScheduleKindName(kind)), ", P=", stages,
                                   " M=", micro_batches, " V=", virtual_stages, ": ",
                                   std::string(status.message())));
}

}  // namespace kelvin::parallel
