// Pipeline schedules: exact small schedules and programs written out by hand, every schedule's
// programs run by the rendezvous simulator over a grid of P, M and V, the simulator's own
// deadlock and order-violation reports, in-flight bounds and the validation messages.
#include "parallel/pipeline/pipeline_schedule.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace kelvin::parallel {
namespace {

using ::testing::HasSubstr;
using Kind = PipelineScheduleKind;

PipelineAction F(int micro_batch, int chunk = 0) {
  return {PipelineAction::kForward, micro_batch, chunk};
}
PipelineAction B(int micro_batch, int chunk = 0) {
  return {PipelineAction::kBackward, micro_batch, chunk};
}
PipelineTransfer SendActivation(int peer, int micro_batch, int chunk = 0) {
  return {PipelineTransfer::kSend, PipelineTensor::kActivation, peer, micro_batch, chunk};
}
PipelineTransfer RecvActivation(int peer, int micro_batch, int chunk = 0) {
  return {PipelineTransfer::kRecv, PipelineTensor::kActivation, peer, micro_batch, chunk};
}
PipelineTransfer SendGradient(int peer, int micro_batch, int chunk = 0) {
  return {PipelineTransfer::kSend, PipelineTensor::kGradient, peer, micro_batch, chunk};
}
PipelineTransfer RecvGradient(int peer, int micro_batch, int chunk = 0) {
  return {PipelineTransfer::kRecv, PipelineTensor::kGradient, peer, micro_batch, chunk};
}

std::vector<PipelineAction> Schedule(Kind kind, int stages, int rank, int micro_batches,
                                     int virtual_stages = 1) {
  absl::StatusOr<std::vector<PipelineAction>> actions =
      BuildPipelineSchedule(kind, stages, rank, micro_batches, virtual_stages);
  EXPECT_TRUE(actions.ok()) << actions.status();
  return actions.ok() ? *actions : std::vector<PipelineAction>();
}

std::vector<PipelineStep> Program(Kind kind, int stages, int rank, int micro_batches,
                                  int virtual_stages = 1) {
  absl::StatusOr<std::vector<PipelineStep>> steps =
      BuildPipelineProgram(kind, stages, rank, micro_batches, virtual_stages);
  EXPECT_TRUE(steps.ok()) << steps.status();
  return steps.ok() ? *steps : std::vector<PipelineStep>();
}

std::string ScheduleError(Kind kind, int stages, int rank, int micro_batches, int virtual_stages) {
  const absl::Status status =
      BuildPipelineSchedule(kind, stages, rank, micro_batches, virtual_stages).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
  return std::string(status.message());
}

std::string SimulationError(const std::vector<std::vector<PipelineStep>>& programs,
                            int micro_batches, int virtual_stages = 1) {
  const absl::Status status = SimulatePipelinePrograms(programs, micro_batches, virtual_stages);
  EXPECT_EQ(status.code(), absl::StatusCode::kInternal) << status;
  return std::string(status.message());
}

TEST(PipelineScheduleTest, AllForwardAllBackwardRunsBackwardsInForwardOrder) {
  const std::vector<PipelineAction> expected = {F(0), F(1), F(2), B(0), B(1), B(2)};
  EXPECT_EQ(Schedule(Kind::kAllForwardAllBackward, 2, 0, 3), expected);
  EXPECT_EQ(Schedule(Kind::kAllForwardAllBackward, 2, 1, 3), expected);
  // Fewer micro-batches than stages is fine without 1F1B.
  EXPECT_EQ(Schedule(Kind::kAllForwardAllBackward, 4, 2, 1),
            (std::vector<PipelineAction>{F(0), B(0)}));
}

TEST(PipelineScheduleTest, OneForwardOneBackwardTwoStages) {
  // Rank 0: one warm-up forward, three forward+backward pairs, one cool-down backward.
  EXPECT_EQ(Schedule(Kind::kOneForwardOneBackward, 2, 0, 4),
            (std::vector<PipelineAction>{F(0), F(1), B(0), F(2), B(1), F(3), B(2), B(3)}));
  // The last rank has no warm-up.
  EXPECT_EQ(Schedule(Kind::kOneForwardOneBackward, 2, 1, 4),
            (std::vector<PipelineAction>{F(0), B(0), F(1), B(1), F(2), B(2), F(3), B(3)}));
}

TEST(PipelineScheduleTest, OneForwardOneBackwardFourStagesWarmsUpByRank) {
  EXPECT_EQ(
      Schedule(Kind::kOneForwardOneBackward, 4, 0, 5),
      (std::vector<PipelineAction>{F(0), F(1), F(2), F(3), B(0), F(4), B(1), B(2), B(3), B(4)}));
  EXPECT_EQ(
      Schedule(Kind::kOneForwardOneBackward, 4, 2, 5),
      (std::vector<PipelineAction>{F(0), F(1), B(0), F(2), B(1), F(3), B(2), F(4), B(3), B(4)}));
}

TEST(PipelineScheduleTest, InterleavedTwoStagesTwoChunks) {
  // Forwards: micro-batches in groups of P = 2 per chunk: (0,c0) (1,c0) (0,c1) (1,c1) (2,c0) ...
  // Rank 0 warms up with (2 - 0 - 1) * 2 + (2 - 1) * 2 = 4 forwards, rank 1 with 2.
  EXPECT_EQ(Schedule(Kind::kInterleaved1F1B, 2, 0, 4, 2),
            (std::vector<PipelineAction>{F(0, 0), F(1, 0), F(0, 1), F(1, 1), F(2, 0), B(0, 1),
                                         F(3, 0), B(1, 1), F(2, 1), B(0, 0), F(3, 1), B(1, 0),
                                         B(2, 1), B(3, 1), B(2, 0), B(3, 0)}));
  EXPECT_EQ(Schedule(Kind::kInterleaved1F1B, 2, 1, 4, 2),
            (std::vector<PipelineAction>{F(0, 0), F(1, 0), F(0, 1), B(0, 1), F(1, 1), B(1, 1),
                                         F(2, 0), B(0, 0), F(3, 0), B(1, 0), F(2, 1), B(2, 1),
                                         F(3, 1), B(3, 1), B(2, 0), B(3, 0)}));
}

TEST(PipelineScheduleTest, InterleavedWarmUpIsCappedAtEveryForward) {
  // P = M = 2, V = 3: rank 0 would warm up with 2 + 4 = 6 = M V forwards: all of them.
  const std::vector<PipelineAction> actions = Schedule(Kind::kInterleaved1F1B, 2, 0, 2, 3);
  ASSERT_EQ(actions.size(), 12u);
  for (int i = 0; i < 6; ++i) EXPECT_EQ(actions[i].kind, PipelineAction::kForward) << i;
  EXPECT_EQ(PeakInFlightMicroBatches(actions), 6);
}

TEST(PipelineScheduleTest, OneForwardOneBackwardProgramsTwoStages) {
  // Ideal run (forward 1, backward 2 time units): every transfer at its producer's finishing
  // time, so rank 1 posts the Recv of micro-batch 1's activation before its first backward.
  EXPECT_EQ(Program(Kind::kOneForwardOneBackward, 2, 0, 4),
            (std::vector<PipelineStep>{F(0), SendActivation(1, 0), F(1), SendActivation(1, 1),
                                       RecvGradient(1, 0), B(0), F(2), SendActivation(1, 2),
                                       RecvGradient(1, 1), B(1), F(3), SendActivation(1, 3),
                                       RecvGradient(1, 2), B(2), RecvGradient(1, 3), B(3)}));
  EXPECT_EQ(Program(Kind::kOneForwardOneBackward, 2, 1, 4),
            (std::vector<PipelineStep>{RecvActivation(0, 0), F(0), RecvActivation(0, 1), B(0),
                                       SendGradient(0, 0), F(1), B(1), RecvActivation(0, 2),
                                       SendGradient(0, 1), F(2), B(2), RecvActivation(0, 3),
                                       SendGradient(0, 2), F(3), B(3), SendGradient(0, 3)}));
}

TEST(PipelineScheduleTest, OneStageProgramHasNoTransfers) {
  EXPECT_EQ(Program(Kind::kOneForwardOneBackward, 1, 0, 3),
            (std::vector<PipelineStep>{F(0), B(0), F(1), B(1), F(2), B(2)}));
}

// The program's compute steps, in order.
std::vector<PipelineAction> ActionsOf(const std::vector<PipelineStep>& program) {
  std::vector<PipelineAction> actions;
  for (const PipelineStep& step : program) {
    if (const auto* action = std::get_if<PipelineAction>(&step)) actions.push_back(*action);
  }
  return actions;
}

struct GridCase {
  Kind kind;
  int stages, micro_batches, virtual_stages;
};

// P in 1..4; M in P..3P plus odd counts (all M from 1 for all-forward-all-backward); V in 1..3
// where the schedule allows it (V >= 2: P >= 2 and M a multiple of P; interleaved: V >= 2).
std::vector<GridCase> ScheduleGrid() {
  std::vector<GridCase> cases;
  for (int stages = 1; stages <= 4; ++stages) {
    for (int micro_batches = 1; micro_batches <= 3 * stages + 3; ++micro_batches) {
      const bool odd_extra = micro_batches > 3 * stages && micro_batches % 2 == 1;
      if (micro_batches > 3 * stages && !odd_extra) continue;
      cases.push_back({Kind::kAllForwardAllBackward, stages, micro_batches, 1});
      if (micro_batches >= stages) {
        cases.push_back({Kind::kOneForwardOneBackward, stages, micro_batches, 1});
      }
      if (stages >= 2 && micro_batches >= stages && micro_batches % stages == 0) {
        for (int virtual_stages = 2; virtual_stages <= 3; ++virtual_stages) {
          cases.push_back({Kind::kInterleaved1F1B, stages, micro_batches, virtual_stages});
          cases.push_back({Kind::kAllForwardAllBackward, stages, micro_batches, virtual_stages});
        }
      }
    }
  }
  return cases;
}

TEST(PipelineScheduleTest, EveryScheduleCompletesWithBlockingTransfers) {
  int simulated = 0;
  for (const GridCase& c : ScheduleGrid()) {
    EXPECT_TRUE(SimulatePipelineSchedules(c.kind, c.stages, c.micro_batches, c.virtual_stages).ok())
        << SimulatePipelineSchedules(c.kind, c.stages, c.micro_batches, c.virtual_stages);
    ++simulated;
  }
  EXPECT_EQ(simulated, 102);  // P=1: 8, P=2: 27, P=3: 30, P=4: 37
}

TEST(PipelineScheduleTest, ProgramsRunTheScheduleAndBackwardsInMicroBatchOrder) {
  for (const GridCase& c : ScheduleGrid()) {
    for (int rank = 0; rank < c.stages; ++rank) {
      const std::vector<PipelineAction> actions =
          Schedule(c.kind, c.stages, rank, c.micro_batches, c.virtual_stages);
      EXPECT_EQ(ActionsOf(Program(c.kind, c.stages, rank, c.micro_batches, c.virtual_stages)),
                actions);
      // Parameter gradients of each chunk accumulate over micro-batches 0, 1, ..., M-1 under
      // every schedule, so the schedules give bit-identical gradients.
      std::vector<int> next_backward(c.virtual_stages, 0);
      for (const PipelineAction& action : actions) {
        if (action.kind != PipelineAction::kBackward) continue;
        EXPECT_EQ(action.micro_batch, next_backward[action.chunk]++)
            << PipelineScheduleKindName(c.kind) << " P=" << c.stages << " rank " << rank;
      }
    }
  }
}

TEST(PipelineScheduleTest, PeakInFlightMicroBatches) {
  for (int stages = 1; stages <= 4; ++stages) {
    for (int rank = 0; rank < stages; ++rank) {
      EXPECT_EQ(PeakInFlightMicroBatches(Schedule(Kind::kAllForwardAllBackward, stages, rank, 7)),
                7);
      EXPECT_EQ(PeakInFlightMicroBatches(Schedule(Kind::kOneForwardOneBackward, stages, rank, 7)),
                stages - rank);
    }
  }
  // Interleaved: warm-up + 1, far below all-forward-all-backward's M V = 32.
  EXPECT_EQ(PeakInFlightMicroBatches(Schedule(Kind::kInterleaved1F1B, 2, 0, 4, 2)), 5);
  EXPECT_EQ(PeakInFlightMicroBatches(Schedule(Kind::kInterleaved1F1B, 2, 1, 4, 2)), 3);
  EXPECT_EQ(PeakInFlightMicroBatches(Schedule(Kind::kInterleaved1F1B, 4, 0, 16, 2)), 11);
  EXPECT_EQ(PeakInFlightMicroBatches(Schedule(Kind::kInterleaved1F1B, 4, 3, 16, 2)), 5);
}

// Recv before and Send after each action: the obvious order, which deadlocks under 1F1B.
std::vector<PipelineStep> NaiveProgram(int stages, int rank, int micro_batches) {
  std::vector<PipelineStep> program;
  for (const PipelineAction& action :
       Schedule(Kind::kOneForwardOneBackward, stages, rank, micro_batches)) {
    const bool forward = action.kind == PipelineAction::kForward;
    const int input_peer = forward ? rank - 1 : rank + 1;
    const int output_peer = forward ? rank + 1 : rank - 1;
    if (input_peer >= 0 && input_peer < stages) {
      program.push_back(forward ? RecvActivation(input_peer, action.micro_batch)
                                : RecvGradient(input_peer, action.micro_batch));
    }
    program.push_back(action);
    if (output_peer >= 0 && output_peer < stages) {
      program.push_back(forward ? SendActivation(output_peer, action.micro_batch)
                                : SendGradient(output_peer, action.micro_batch));
    }
  }
  return program;
}

TEST(PipelineSimulationTest, ReportsTheDeadlockOfTheNaiveOrder) {
  EXPECT_EQ(SimulationError({NaiveProgram(2, 0, 4), NaiveProgram(2, 1, 4)}, 4),
            "deadlock: rank 0 step 3 (Send activation(micro-batch 1, virtual stage 0) to rank 1) "
            "of 16 waits; rank 1 step 3 (Send gradient(micro-batch 0, virtual stage 1) to rank 0) "
            "of 16 waits");
}

TEST(PipelineSimulationTest, ReportsARankWaitingForAFinishedOne) {
  EXPECT_EQ(SimulationError({{F(0)}, {RecvActivation(0, 0), F(0), B(0)}}, 1),
            "deadlock: rank 0 has finished; rank 1 step 0 (Recv activation(micro-batch 0, "
            "virtual stage 1) from rank 0) of 3 waits");
}

TEST(PipelineSimulationTest, ReportsActionOrderViolations) {
  EXPECT_EQ(SimulationError({{B(0), F(0)}}, 1),
            "rank 0 step 0 (backward(micro-batch 0, virtual stage 0)): runs before its forward");
  EXPECT_EQ(SimulationError({{F(0), F(0), B(0)}}, 1),
            "rank 0 step 1 (forward(micro-batch 0, virtual stage 0)): runs a second time");
  EXPECT_EQ(SimulationError({{F(0), B(0)}}, 2),
            "rank 0 never ran forward(micro-batch 1, virtual stage 0)");
  EXPECT_EQ(SimulationError({{F(2), B(2)}}, 2),
            "rank 0 step 0 (forward(micro-batch 2, virtual stage 0)): micro-batch 2 is outside "
            "[0, 2)");
  // Rank 1 computes before receiving.
  EXPECT_EQ(SimulationError({{F(0), SendActivation(1, 0), RecvGradient(1, 0), B(0)},
                             {F(0), RecvActivation(0, 0), B(0), SendGradient(0, 0)}},
                            1),
            "rank 1 step 0 (forward(micro-batch 0, virtual stage 1)): runs before receiving its "
            "input activation from virtual stage 0");
  // Chunk 1 of rank 0 is virtual stage 2: its forward needs virtual stage 1's activation.
  EXPECT_THAT(SimulationError({{F(0, 1), B(0, 1)}, {}}, 1, 2),
              HasSubstr("runs before receiving its input activation from virtual stage 1"));
}

TEST(PipelineSimulationTest, ReportsMismatchedTransfers) {
  EXPECT_EQ(SimulationError({{F(0), SendActivation(1, 0), RecvGradient(1, 0), B(0)},
                             {RecvGradient(0, 0), F(0), B(0), SendGradient(0, 0)}},
                            1),
            "rank 0 step 1 (Send activation(micro-batch 0, virtual stage 0) to rank 1) meets "
            "rank 1 step 0 (Recv gradient(micro-batch 0, virtual stage 1) from rank 0): they do "
            "not match (an activation goes from virtual stage s to s + 1 and its gradient back, "
            "for the same micro-batch)");
  EXPECT_THAT(SimulationError({{SendActivation(1, 0), F(0), RecvGradient(1, 0), B(0)},
                               {RecvActivation(0, 0), F(0), B(0), SendGradient(0, 0)}},
                              1),
              HasSubstr("sent before the forward producing it ran"));
  EXPECT_EQ(SimulationError({{F(0), SendActivation(0, 0), B(0)}}, 1),
            "rank 0 step 1 (Send activation(micro-batch 0, virtual stage 0) to rank 0): peer 0 is "
            "not another rank in [0, 1)");
}

TEST(PipelineScheduleTest, StepTextNamesVirtualStages) {
  EXPECT_EQ(PipelineStepText(F(3, 1), 2, 4), "forward(micro-batch 3, virtual stage 6)");
  EXPECT_EQ(PipelineStepText(B(0), 1, 2), "backward(micro-batch 0, virtual stage 1)");
  EXPECT_EQ(PipelineStepText(SendGradient(0, 2, 1), 1, 2),
            "Send gradient(micro-batch 2, virtual stage 3) to rank 0");
  EXPECT_EQ(PipelineStepText(RecvActivation(3, 1), 0, 4),
            "Recv activation(micro-batch 1, virtual stage 0) from rank 3");
}

TEST(PipelineScheduleTest, RejectsInvalidArguments) {
  EXPECT_EQ(ScheduleError(Kind::kOneForwardOneBackward, 0, 0, 4, 1),
            "invalid pipeline schedule 1F1B (parallel.pipeline_schedule): "
            "parallel.pipeline_parallel=0: must be >= 1");
  EXPECT_THAT(ScheduleError(Kind::kOneForwardOneBackward, 2, 2, 4, 1),
              HasSubstr("pipeline rank 2 is outside [0, 2) for parallel.pipeline_parallel=2"));
  EXPECT_THAT(ScheduleError(Kind::kAllForwardAllBackward, 2, 0, 0, 1),
              HasSubstr("training.gradient_accumulation_steps=0 micro-batches per step: must be "
                        ">= 1"));
  EXPECT_EQ(ScheduleError(Kind::kOneForwardOneBackward, 2, 0, 4, 2),
            "invalid pipeline schedule 1F1B (parallel.pipeline_schedule): "
            "parallel.virtual_pipeline_stages=2: this schedule runs one model chunk per rank; set "
            "it to 1, or use INTERLEAVED_1F1B");
  EXPECT_THAT(ScheduleError(Kind::kAllForwardAllBackward, 2, 0, 3, 2),
              HasSubstr("training.gradient_accumulation_steps=3 micro-batches per step is not "
                        "divisible by parallel.pipeline_parallel=2"));
  EXPECT_EQ(ScheduleError(Kind::kOneForwardOneBackward, 4, 1, 3, 1),
            "invalid pipeline schedule 1F1B (parallel.pipeline_schedule): "
            "training.gradient_accumulation_steps=3 micro-batches per step is fewer than "
            "parallel.pipeline_parallel=4 stages; use >= 4 micro-batches (global_batch_size / "
            "(micro_batch_size x data-parallel size)), or ALL_FORWARD_ALL_BACKWARD");
  EXPECT_THAT(ScheduleError(Kind::kInterleaved1F1B, 4, 0, 2, 2),
              HasSubstr("training.gradient_accumulation_steps=2 micro-batches per step is fewer "
                        "than parallel.pipeline_parallel=4 stages"));
  EXPECT_EQ(ScheduleError(Kind::kInterleaved1F1B, 4, 0, 10, 2),
            "invalid pipeline schedule interleaved 1F1B (parallel.pipeline_schedule): "
            "training.gradient_accumulation_steps=10 micro-batches per step is not divisible by "
            "parallel.pipeline_parallel=4 (each model chunk runs micro-batches in groups of 4, "
            "Megatron's rule); use 8 or 12 micro-batches");
  EXPECT_THAT(ScheduleError(Kind::kInterleaved1F1B, 2, 0, 4, 1),
              HasSubstr("parallel.virtual_pipeline_stages=1: interleaving needs >= 2 model chunks "
                        "per rank; set it, or use ONE_F_ONE_B"));
  EXPECT_THAT(ScheduleError(Kind::kInterleaved1F1B, 1, 0, 4, 2),
              HasSubstr("parallel.pipeline_parallel=1: interleaving model chunks needs >= 2 "
                        "stages; use virtual_pipeline_stages=1 and ONE_F_ONE_B"));
  // The program builder and the simulation validate the same way.
  EXPECT_EQ(BuildPipelineProgram(Kind::kInterleaved1F1B, 4, 0, 10, 2).status().message(),
            ScheduleError(Kind::kInterleaved1F1B, 4, 0, 10, 2));
  EXPECT_EQ(SimulatePipelineSchedules(Kind::kOneForwardOneBackward, 0, 4, 1).message(),
            ScheduleError(Kind::kOneForwardOneBackward, 0, 0, 4, 1));
}

}  // namespace
}  // namespace kelvin::parallel
