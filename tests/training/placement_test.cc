// Where a job trains: training.device and model.precision resolve to a device and a model dtype,
// parallel.communication_backend to a communicator library, and the combinations Kelvin cannot run
// are errors naming the fields.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "launcher/config/job_config.h"
#include "tests/testing/backends.h"
#include "training/job/job_setup.h"
#include "training/job/parallel_setup.h"

namespace kelvin::training {
namespace {

using ::testing::HasSubstr;

config::JobConfig Job(const std::string& device, const std::string& precision) {
  config::JobConfig job;
  EXPECT_TRUE(launcher::ApplyOverride("training.device=" + device, job).ok());
  EXPECT_TRUE(launcher::ApplyOverride("model.precision=" + precision, job).ok());
  return job;
}

TEST(Placement, CpuTrainsInF32) {
  for (const char* precision : {"AUTO", "FP32"}) {
    const absl::StatusOr<TrainingPlacement> placement = ResolvePlacement(Job("CPU", precision), 0);
    ASSERT_TRUE(placement.ok()) << placement.status();
    EXPECT_TRUE(placement->ctx.device().is_cpu());
    EXPECT_EQ(placement->dtype, DType::kF32);
  }
}

TEST(Placement, Bf16OnTheCpuIsAnErrorNamingTheFields) {
  const absl::StatusOr<TrainingPlacement> placement = ResolvePlacement(Job("CPU", "BF16"), 0);
  ASSERT_FALSE(placement.ok());
  EXPECT_THAT(std::string(placement.status().message()),
              HasSubstr("model.precision=BF16 with training on the CPU (training.device=CPU): the "
                        "CPU kernels run in f32; use FP32 or AUTO"));
}

// AUTO precision follows the device, on either device whatever this machine has: bf16 with f32
// masters on CUDA (the fused SSA kernel's precision), f32 on the CPU; FP32 on CUDA is refused.
TEST(Placement, AutoPrecisionIsBf16OnCudaAndF32OnTheCpu) {
  const absl::StatusOr<DType> on_cuda = ResolveModelDType(Job("AUTO", "AUTO"), /*cuda=*/true);
  ASSERT_TRUE(on_cuda.ok()) << on_cuda.status();
  EXPECT_EQ(*on_cuda, DType::kBF16);
  const absl::StatusOr<DType> on_cpu = ResolveModelDType(Job("AUTO", "AUTO"), /*cuda=*/false);
  ASSERT_TRUE(on_cpu.ok()) << on_cpu.status();
  EXPECT_EQ(*on_cpu, DType::kF32);
  const absl::StatusOr<DType> bf16_on_cuda = ResolveModelDType(Job("AUTO", "BF16"), true);
  ASSERT_TRUE(bf16_on_cuda.ok()) << bf16_on_cuda.status();
  EXPECT_EQ(*bf16_on_cuda, DType::kBF16);
  EXPECT_FALSE(ResolveModelDType(Job("AUTO", "FP32"), true).ok());
}

// AUTO trains where a device is usable (this machine's answer, stated by the CUDA runtime's
// probe), in AUTO precision for that device.
TEST(Placement, AutoPicksTheGpuOnlyWhereADeviceIsUsable) {
  const absl::StatusOr<TrainingPlacement> placement = ResolvePlacement(Job("AUTO", "AUTO"), 0);
  ASSERT_TRUE(placement.ok()) << placement.status();
  EXPECT_EQ(placement->ctx.is_cuda(), CudaAvailable());
  EXPECT_EQ(placement->dtype, *ResolveModelDType(Job("AUTO", "AUTO"), CudaAvailable()));
}

TEST(Placement, GpuTrainingWithoutADeviceOrInF32IsAnError) {
  const absl::StatusOr<TrainingPlacement> placement = ResolvePlacement(Job("CUDA", "FP32"), 0);
  ASSERT_FALSE(placement.ok());
  const std::string message(placement.status().message());
  if (CudaAvailable()) {
    EXPECT_THAT(message, HasSubstr("model.precision=FP32 with training on CUDA: the fused SSA "
                                   "attention kernel runs in bf16"));
  } else {
    EXPECT_THAT(message, HasSubstr("training.device=CUDA, but no CUDA device is usable here ("));
    EXPECT_THAT(message, HasSubstr(CudaUnavailableReason()));
  }
}

config::ParallelConfig Backend(const std::string& backend) {
  config::JobConfig job;
  EXPECT_TRUE(launcher::ApplyOverride("parallel.communication_backend=" + backend, job).ok());
  return job.parallel();
}

TEST(Placement, CpuTrainingCommunicatesOverMpi) {
  for (const char* backend : {"AUTO", "MPI"}) {
    const absl::StatusOr<parallel::CommBackend> resolved =
        ResolveBackend(Backend(backend), Context::Cpu(), 4);
    ASSERT_TRUE(resolved.ok()) << resolved.status();
    EXPECT_EQ(*resolved, parallel::CommBackend::kMpi) << backend;
  }
  const absl::StatusOr<parallel::CommBackend> nccl =
      ResolveBackend(Backend("NCCL"), Context::Cpu(), 1);
  ASSERT_FALSE(nccl.ok());
  EXPECT_THAT(std::string(nccl.status().message()),
              HasSubstr("parallel.communication_backend=NCCL needs training on CUDA"));
}

TEST(Placement, CudaNcclNeedsAGpuPerProcess) {
  KELVIN_SKIP_WITHOUT_CUDA(Device::Cuda());
  const Context ctx = Context::Cuda(0);
  const int gpus = CudaDeviceCount();
  const absl::StatusOr<parallel::CommBackend> fits = ResolveBackend(Backend("AUTO"), ctx, gpus);
  ASSERT_TRUE(fits.ok()) << fits.status();
  EXPECT_EQ(*fits, parallel::CommBackend::kNccl);
  const absl::StatusOr<parallel::CommBackend> shared =
      ResolveBackend(Backend("AUTO"), ctx, gpus + 1);
  ASSERT_TRUE(shared.ok()) << shared.status();
  EXPECT_EQ(*shared, parallel::CommBackend::kMpi);
  const absl::StatusOr<parallel::CommBackend> refused =
      ResolveBackend(Backend("NCCL"), ctx, gpus + 1);
  ASSERT_FALSE(refused.ok());
  EXPECT_THAT(std::string(refused.status().message()), HasSubstr("needs a GPU per process"));
}

}  // namespace
}  // namespace kelvin::training
