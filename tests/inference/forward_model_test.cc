// Where the forward-only commands run a model (--device, else the job's training.device): the CPU
// in f32 whatever model.precision says, CUDA asked for where none is usable (or for a head dim its
// attention does not run) is an error naming who asked and what to do, and AUTO stays on the CPU
// then. The cases that need a GPU, or its absence, skip saying so.
#include "inference/forward_model.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "core/device.h"

namespace kelvin::inference {
namespace {

using ::testing::HasSubstr;

// A job of the tiny preset (head dim 32) set to train on `device` in bf16.
config::JobConfig JobOn(config::TrainingConfig::Device device) {
  config::JobConfig job;
  job.mutable_model()->set_preset("tiny");
  job.mutable_model()->set_precision(config::ModelConfig::BF16);
  job.mutable_training()->set_device(device);
  return job;
}

TEST(InferencePlacement, TheCpuRunsF32WhateverTheJobTrainsOn) {
  for (const auto device :
       {config::TrainingConfig::CPU, config::TrainingConfig::CUDA, config::TrainingConfig::AUTO}) {
    absl::StatusOr<training::TrainingPlacement> placement =
        ResolveInferencePlacement(JobOn(device), InferenceDevice::kCpu, 0);
    ASSERT_TRUE(placement.ok()) << placement.status();
    EXPECT_TRUE(placement->ctx.device().is_cpu());
    EXPECT_EQ(placement->dtype, DType::kF32);
  }
}

TEST(InferencePlacement, AGpuAskedForWithoutOneIsAnErrorSayingWhatToDo) {
  if (CudaAvailable()) GTEST_SKIP() << "a GPU is usable here: the refusal needs a machine without";
  EXPECT_THAT(std::string(ResolveInferencePlacement(JobOn(config::TrainingConfig::CPU),
                                                    InferenceDevice::kCuda, 0)
                              .status()
                              .message()),
              HasSubstr("--device cuda, but no CUDA device is usable here (" +
                        CudaUnavailableReason() + "): run on a machine with a GPU"));
  EXPECT_THAT(std::string(ResolveInferencePlacement(JobOn(config::TrainingConfig::CUDA),
                                                    InferenceDevice::kJob, 0)
                              .status()
                              .message()),
              HasSubstr("training.device=CUDA, but no CUDA device is usable here"));
  EXPECT_THAT(std::string(ResolveInferencePlacement(JobOn(config::TrainingConfig::CUDA),
                                                    InferenceDevice::kJob, 0)
                              .status()
                              .message()),
              HasSubstr("or give --device cpu"));
  absl::StatusOr<training::TrainingPlacement> automatic =
      ResolveInferencePlacement(JobOn(config::TrainingConfig::AUTO), InferenceDevice::kJob, 0);
  ASSERT_TRUE(automatic.ok()) << automatic.status();
  EXPECT_TRUE(automatic->ctx.device().is_cpu());
  EXPECT_EQ(automatic->dtype, DType::kF32);
}

TEST(InferencePlacementCuda, Bf16OnTheGpuAndHeadDimsTheKernelsDoNotRunOnTheCpu) {
  if (!CudaAvailable()) GTEST_SKIP() << "no CUDA device: " << CudaUnavailableReason();
  config::JobConfig job = JobOn(config::TrainingConfig::CPU);
  job.mutable_model()->set_preset("small-25m");  // head dim 64
  absl::StatusOr<training::TrainingPlacement> gpu =
      ResolveInferencePlacement(job, InferenceDevice::kCuda, 0);
  ASSERT_TRUE(gpu.ok()) << gpu.status();
  EXPECT_TRUE(gpu->ctx.device().is_cuda());
  EXPECT_EQ(gpu->dtype, DType::kBF16);
  // The tiny preset's head dim 32: refused when asked for, the CPU under AUTO.
  EXPECT_THAT(std::string(ResolveInferencePlacement(JobOn(config::TrainingConfig::CPU),
                                                    InferenceDevice::kCuda, 0)
                              .status()
                              .message()),
              HasSubstr("--device cuda: the model's head_dim=32 is not one the CUDA attention "
                        "kernels run (64, 128); give --device cpu"));
  absl::StatusOr<training::TrainingPlacement> automatic =
      ResolveInferencePlacement(JobOn(config::TrainingConfig::AUTO), InferenceDevice::kJob, 0);
  ASSERT_TRUE(automatic.ok()) << automatic.status();
  EXPECT_TRUE(automatic->ctx.device().is_cpu());
}

}  // namespace
}  // namespace kelvin::inference
