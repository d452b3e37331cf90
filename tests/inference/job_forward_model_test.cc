// The forward-only model `kelvin eval JOB` scores the held-out sets on: what it allocates once it
// has evaluated is what its memory plan says, category by category, byte for byte, with no
// gradients, master weights or optimizer state; the training plan of the same job is larger by
// those.
#include "inference/job_forward_model.h"

#include <gtest/gtest.h>

#include "inference/held_out_evaluation.h"
#include "launcher/config/job_config.h"
#include "tests/testing/files.h"
#include "training/job/data_sources.h"
#include "training/job/job_plan.h"
#include "training/job/job_setup.h"

namespace kelvin::inference {
namespace {

TEST(JobForwardModel, AllocatesWhatItsMemoryPlanSays) {
  const absl::StatusOr<config::JobConfig> job = launcher::LoadJobConfig(
      testing::DemoJobPath(), {"training.eval_steps=1", "training.export_hf_dir=\"\""});
  ASSERT_TRUE(job.ok()) << job.status();
  const absl::StatusOr<models::LlamaConfig> arch = training::ResolveModelArchitecture(job->model());
  ASSERT_TRUE(arch.ok()) << arch.status();
  absl::StatusOr<std::unique_ptr<JobForwardModel>> built =
      JobForwardModel::Build(*job, *arch, MPI_COMM_WORLD);
  ASSERT_TRUE(built.ok()) << built.status();
  JobForwardModel& forward = **built;
  absl::StatusOr<training::DataSources> data = training::BuildDataSources(*job, *arch);
  ASSERT_TRUE(data.ok()) << data.status();
  HeldOutEvaluation evaluation(*job, forward.scored(), *data);
  const absl::StatusOr<EvalStats> evaluated = evaluation.Evaluate(0);
  ASSERT_TRUE(evaluated.ok()) << evaluated.status();
  EXPECT_GT(evaluated->labelled_tokens, 0);

  const models::LlamaModel& model = forward.model();
  EXPECT_TRUE(model.parameters().forward_only());
  const models::MemoryPlan& plan = forward.memory_plan();
  const models::LlamaModel::BufferBytes allocated = model.AllocatedBufferBytes();
  EXPECT_GT(allocated.activations, 0);
  EXPECT_EQ(plan.activations, allocated.activations);
  EXPECT_EQ(plan.logits, allocated.logits);
  EXPECT_EQ(plan.backward_scratch, allocated.backward_scratch);
  EXPECT_EQ(plan.parameters,
            model.parameters().NumElements() * static_cast<int64_t>(DTypeSize(model.dtype())));
  EXPECT_EQ(plan.gradients, 0);
  EXPECT_EQ(plan.master_weights, 0);
  EXPECT_EQ(plan.optimizer_state, 0);

  // The trainer's plan of the same job adds the f32 gradients and the two AdamW moments (the
  // demo trains in f32 on the CPU: its values are its masters).
  training::JobLayout layout{.spec = forward.grid().spec(), .dtype = model.dtype()};
  const absl::StatusOr<models::MemoryPlan> training_plan =
      training::PlanRankMemory(*job, *arch, layout, 0, 0);
  ASSERT_TRUE(training_plan.ok()) << training_plan.status();
  EXPECT_EQ(training_plan->gradients, plan.parameters);
  EXPECT_EQ(training_plan->optimizer_state, 2 * plan.parameters);
  EXPECT_GT(training_plan->Total(), plan.Total());
}

}  // namespace
}  // namespace kelvin::inference
