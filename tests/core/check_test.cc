// Check macros and logging: each macro's failure message names file:line, the rank, the failed
// call or condition and the decoded error; user-facing Status propagation helpers. (The MPI
// check macro is tested in mpi_check_test.cc, a program of its own that links MPI.)
#include "core/check.h"

#include <gtest/gtest.h>

#include <cstdlib>

#include "core/logging.h"
#include "core/status.h"
#if KELVIN_WITH_CUDA
#include "core/cuda/cuda_check.h"
#endif

namespace kelvin {
namespace {

TEST(CheckDeathTest, CheckPrintsConditionMessageFileLineAndRank) {
  SetLogRank(3);
  EXPECT_DEATH(KELVIN_CHECK(1 + 1 == 3) << "arithmetic is "
                                        << "broken",
               "Kelvin check failed on rank 3 at .*check_test.cc:[0-9]+: 1 \\+ 1 == 3 "
               "arithmetic is broken");
  SetLogRank(-1);
}

TEST(CheckDeathTest, CheckNamesTheFileFromTheSourceRoot) {
  // Absolute when compiled directly; relative to the build folder through ccache (its
  // CCACHE_BASEDIR), where the message drops the leading "../" steps.
  EXPECT_DEATH(KELVIN_CHECK(false), "at (/[^ ]*/)?tests/core/check_test\\.cc:[0-9]+: false");
}

TEST(CheckDeathTest, ComparisonChecksPrintBothOperands) {
  const int64_t rows = 6, heads = 4;
  EXPECT_DEATH(KELVIN_CHECK_EQ(rows, heads) << "when splitting",
               "rows == heads \\(6 vs 4\\) when splitting");
  EXPECT_DEATH(KELVIN_CHECK_LT(rows, heads), "rows < heads \\(6 vs 4\\)");
  EXPECT_DEATH(KELVIN_CHECK_GE(heads, rows), "heads >= rows \\(4 vs 6\\)");
}

TEST(CheckDeathTest, FatalNeedsNoCondition) {
  EXPECT_DEATH(KELVIN_FATAL() << "unsupported dtype bf17",
               "check_test.cc:[0-9]+: unsupported dtype bf17");
}

TEST(Check, PassingChecksEvaluateOperandsOnce) {
  int calls = 0;
  auto next = [&] { return ++calls; };
  KELVIN_CHECK_EQ(next(), 1);
  KELVIN_CHECK(next() == 2);
  EXPECT_EQ(calls, 2);
}

TEST(Check, FormatCheckFailureWithUnknownRank) {
  SetLogRank(-1);
  const std::string text = internal::FormatCheckFailure("a/b.cc", 7, "x > 0", "x is -1");
  EXPECT_NE(text.find("Kelvin check failed on rank ? at a/b.cc:7: x > 0 x is -1"),
            std::string::npos)
      << text;
}

#if KELVIN_WITH_CUDA
TEST(DeviceCheckDeathTest, PrintsTheCallAndTheDecodedRuntimeError) {
  // Fails with or without a GPU: no machine has device 9999.
  EXPECT_DEATH(KELVIN_CUDA_CHECK(cudaSetDevice(9999)),
               "cudaSetDevice\\(9999\\) returned cuda(ErrorInvalidDevice|ErrorInsufficientDriver|"
               "ErrorNoDevice): ");
}

TEST(DeviceCheckDeathTest, PrintsTheDecodedCublasStatus) {
  EXPECT_DEATH(KELVIN_CUBLAS_CHECK(CUBLAS_STATUS_INVALID_VALUE),
               "CUBLAS_STATUS_INVALID_VALUE returned CUBLAS_STATUS_INVALID_VALUE: .+");
}

TEST(DeviceCheckDeathTest, PrintsTheDecodedNcclResult) {
  EXPECT_DEATH(KELVIN_NCCL_CHECK(ncclInvalidArgument),
               "ncclInvalidArgument returned ncclInvalidArgument: invalid argument");
}
#endif

TEST(Logging, PrefixCarriesSeverityRankAndLocation) {
  SetLogRank(5);
  EXPECT_EQ(LogPrefix(LogSeverity::kWarning, "dir/trainer.cc", 42).substr(0, 6), "[W r5 ");
  EXPECT_NE(LogPrefix(LogSeverity::kInfo, "dir/trainer.cc", 42).find(" trainer.cc:42] "),
            std::string::npos);
  SetLogRank(-1);
  EXPECT_EQ(LogPrefix(LogSeverity::kInfo, "x.cc", 1).substr(0, 6), "[I r? ");
}

TEST(Logging, SeverityFilterDropsLowerLevels) {
  SetMinLogSeverity(LogSeverity::kError);
  EXPECT_FALSE(ShouldLog(LogSeverity::kWarning));
  EXPECT_TRUE(ShouldLog(LogSeverity::kError));
  ::testing::internal::CaptureStderr();
  KLOG(INFO) << "dropped";
  KLOG(ERROR) << "kept " << 7;
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(err.find("dropped"), std::string::npos);
  EXPECT_NE(err.find("kept 7"), std::string::npos);
  SetMinLogSeverity(LogSeverity::kInfo);
}

TEST(Logging, RankZeroOnlyLinesAreSilentOnOtherRanks) {
  SetLogRank(1);
  ::testing::internal::CaptureStderr();
  KLOG_RANK0(INFO) << "progress";
  EXPECT_EQ(::testing::internal::GetCapturedStderr(), "");
  SetLogRank(0);
  ::testing::internal::CaptureStderr();
  KLOG_RANK0(INFO) << "progress";
  EXPECT_NE(::testing::internal::GetCapturedStderr().find("progress"), std::string::npos);
  SetLogRank(-1);
}

absl::StatusOr<int> ParsePositive(int v) {
  if (v <= 0) return absl::InvalidArgumentError("value " + std::to_string(v) + " must be > 0");
  return v;
}

absl::Status UseTwice(int a, int b, int* sum) {
  KELVIN_ASSIGN_OR_RETURN(const int x, ParsePositive(a));
  KELVIN_ASSIGN_OR_RETURN(const int y, ParsePositive(b));
  *sum = x + y;
  KELVIN_RETURN_IF_ERROR(absl::OkStatus());
  return absl::OkStatus();
}

TEST(Status, MacrosPropagateTheFirstError) {
  int sum = 0;
  EXPECT_TRUE(UseTwice(2, 3, &sum).ok());
  EXPECT_EQ(sum, 5);
  const absl::Status status = UseTwice(2, -4, &sum);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(status.message(), "value -4 must be > 0");
}

}  // namespace
}  // namespace kelvin
