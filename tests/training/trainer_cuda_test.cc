// The trainer on CUDA (skipped without a device): the demo job with SSA in bf16 (f32 master
// weights) follows the f32 CPU run of the same job within bf16 tolerances, and its checkpoint (the
// f32 masters, copied from and back to the device) resumes the master weights bit for bit.
#include <gtest/gtest.h>

#include <filesystem>

#include "absl/strings/match.h"
#include "launcher/config/job_config.h"
#include "tests/testing/backends.h"
#include "tests/testing/compare.h"
#include "tests/testing/tolerance.h"
#include "training/trainer.h"

namespace kelvin::training {
namespace {

namespace fs = std::filesystem;

// The demo job with SSA, 3 steps, head dim 64 (a size the CUDA kernel runs), on `device`.
config::JobConfig SmallJob(const std::string& device, const std::string& checkpoint_dir = "") {
  const std::string demo = (fs::path(KELVIN_FIXTURES_DIR).parent_path().parent_path() / "configs" /
                            "passkey_tiny_cpu.textproto")
                               .string();
  std::vector<std::string> overrides = {
      "model.ssa.enabled=true",       "model.architecture.hidden_size=256",
      "model.precision=AUTO",         "training.device=" + device,
      "lr_schedule.warmup_steps=1",   "training.steps=3",
      "training.seq_length=128",      "training.micro_batch_size=2",
      "training.global_batch_size=4", "training.eval_interval=3",
      "training.eval_steps=1",        "training.export_hf_dir=\"\"",
      "logging.log_interval=1",       "optimizer.lr=1e-3"};
  if (!checkpoint_dir.empty()) overrides.push_back("checkpoint.dir=\"" + checkpoint_dir + "\"");
  absl::StatusOr<config::JobConfig> job = launcher::LoadJobConfig(demo, overrides);
  EXPECT_TRUE(job.ok()) << job.status();
  return job.value_or(config::JobConfig());
}

std::unique_ptr<Trainer> RunOrDie(const config::JobConfig& job) {
  absl::StatusOr<std::unique_ptr<Trainer>> trainer = Trainer::Create(job);
  EXPECT_TRUE(trainer.ok()) << trainer.status();
  if (!trainer.ok()) return nullptr;
  const absl::Status run = (*trainer)->Run();
  EXPECT_TRUE(run.ok()) << run;
  return std::move(*trainer);
}

TEST(TrainerCuda, DemoInBf16FollowsTheF32CpuRun) {
  KELVIN_SKIP_WITHOUT_CUDA(Device::Cuda());
  const std::unique_ptr<Trainer> cpu = RunOrDie(SmallJob("CPU"));
  const std::unique_ptr<Trainer> gpu = RunOrDie(SmallJob("CUDA"));
  ASSERT_NE(cpu, nullptr);
  ASSERT_NE(gpu, nullptr);
  EXPECT_EQ(gpu->model().dtype(), DType::kBF16);
  EXPECT_TRUE(gpu->model().context().is_cuda());
  ASSERT_EQ(gpu->history().size(), cpu->history().size());
  for (size_t i = 0; i < cpu->history().size(); ++i) {
    const StepStats &expected = cpu->history()[i], &got = gpu->history()[i];
    EXPECT_NEAR(got.loss, expected.loss, testing::kBf16TrainingLossRelTol * expected.loss)
        << "step " << i + 1;
    EXPECT_NEAR(got.grad_norm, expected.grad_norm,
                testing::kBf16TrainingGradNormRelTol * expected.grad_norm)
        << "step " << i + 1;
    ASSERT_EQ(got.temperatures.size(), expected.temperatures.size());
    for (size_t layer = 0; layer < expected.temperatures.size(); ++layer) {
      const ssa::TemperatureStatistics &cpu_tau = expected.temperatures[layer],
                                       &gpu_tau = got.temperatures[layer];
      EXPECT_NEAR(gpu_tau.query.mean, cpu_tau.query.mean, testing::kBf16TrainingTemperatureAbsTol)
          << "step " << i + 1;
      EXPECT_NEAR(gpu_tau.value.mean, cpu_tau.value.mean, testing::kBf16TrainingTemperatureAbsTol)
          << "step " << i + 1;
      EXPECT_NEAR(gpu_tau.query.std, cpu_tau.query.std, testing::kBf16TrainingTemperatureAbsTol)
          << "step " << i + 1;
      EXPECT_NEAR(gpu_tau.value.std, cpu_tau.value.std, testing::kBf16TrainingTemperatureAbsTol)
          << "step " << i + 1;
    }
  }
  ASSERT_EQ(gpu->evaluations().size(), 1u);
  const double expected_eval = cpu->evaluations().front().loss;
  EXPECT_NEAR(gpu->evaluations().front().loss, expected_eval,
              testing::kBf16TrainingLossRelTol * expected_eval);
  // The SSA read-outs are held to kBf16TrainedReadoutRelTol (they start at 0: see tolerance.h),
  // and the temperatures they produce to the CPU run's statistics above.
  ParameterSet& trained = gpu->model().parameters();
  for (const ParameterSet::Entry& e : cpu->model().parameters().entries()) {
    const bool readout = absl::StrContains(e.name, "_readout");
    EXPECT_TRUE(testing::AllClose(
        trained.MasterOnHost(e.name), e.value,
        readout ? testing::kBf16TrainedReadoutRelTol : testing::kBf16TrainedWeightRelTol, e.name));
  }
  // The memory plan of bf16 training is what the device holds: bf16 activations and parameters,
  // f32 masters, gradients and moments.
  const models::MemoryPlan plan = gpu->MemoryPlanOf(0, 0);
  const models::LlamaModel::BufferBytes allocated = gpu->model().AllocatedBufferBytes();
  EXPECT_EQ(plan.activations, allocated.activations);
  EXPECT_EQ(plan.logits, allocated.logits);
  EXPECT_EQ(plan.backward_scratch, allocated.backward_scratch);
  EXPECT_EQ(plan.parameters, trained.NumElements() * 2);
  EXPECT_EQ(plan.master_weights, trained.NumElements() * 4);
  EXPECT_EQ(plan.gradients, trained.NumElements() * 4);
  EXPECT_EQ(plan.optimizer_state, gpu->OptimizerStateBytes());
}

TEST(TrainerCuda, CheckpointRestoresTheF32MastersOnTheDevice) {
  KELVIN_SKIP_WITHOUT_CUDA(Device::Cuda());
  const std::string dir = (fs::path(::testing::TempDir()) / "kelvin_cuda_checkpoint").string();
  fs::remove_all(dir);
  const std::unique_ptr<Trainer> trained = RunOrDie(SmallJob("CUDA", dir));
  ASSERT_NE(trained, nullptr);
  absl::StatusOr<std::unique_ptr<Trainer>> resumed = Trainer::Create(SmallJob("CUDA", dir));
  ASSERT_TRUE(resumed.ok()) << resumed.status();
  EXPECT_EQ((*resumed)->start_step(), 3);
  ParameterSet& expected = trained->model().parameters();
  ParameterSet& got = (*resumed)->model().parameters();
  for (const ParameterSet::Entry& e : got.entries()) {
    EXPECT_TRUE(testing::BitIdentical(got.MasterOnHost(e.name), expected.MasterOnHost(e.name),
                                      e.name + " master"));
    EXPECT_TRUE(testing::BitIdentical(e.value, expected.value(e.name), e.name + " model copy"));
  }
}

}  // namespace
}  // namespace kelvin::training
