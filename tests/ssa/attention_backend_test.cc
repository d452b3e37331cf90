// The attention core choice on the host (ssa/attention_backend.h): AUTO's rule given timings, the
// names the log uses, and the cuDNN core's answer on the CPU.
#include "ssa/attention_backend.h"

#include <gtest/gtest.h>

#include "core/context.h"
#include "ssa/ssa_attention.h"

namespace kelvin::ssa {
namespace {

TEST(AttentionBackend, AutoKeepsTheFasterCore) {
  EXPECT_EQ(ChooseAttentionCore({.fused_ms = 2.0, .cudnn_ms = 1.5}), AttentionCore::kCudnn);
  EXPECT_EQ(ChooseAttentionCore({.fused_ms = 1.0, .cudnn_ms = 1.5}), AttentionCore::kFused);
}

TEST(AttentionBackend, AutoKeepsTheOwnKernelOnATieOrWithoutACudnnTime) {
  EXPECT_EQ(ChooseAttentionCore({.fused_ms = 1.0, .cudnn_ms = 1.0}), AttentionCore::kFused);
  EXPECT_EQ(ChooseAttentionCore({.fused_ms = 9.0, .cudnn_ms = std::nullopt}),
            AttentionCore::kFused);
}

TEST(AttentionBackend, Names) {
  EXPECT_EQ(AttentionBackendName(AttentionBackend::kAuto), "AUTO");
  EXPECT_EQ(AttentionBackendName(AttentionBackend::kFused), "FUSED");
  EXPECT_EQ(AttentionBackendName(AttentionBackend::kCudnn), "CUDNN");
  EXPECT_EQ(AttentionCoreName(AttentionCore::kFused), "fused");
  EXPECT_EQ(AttentionCoreName(AttentionCore::kCudnn), "cuDNN");
}

TEST(AttentionBackend, TheCudnnCoreNeverRunsOnTheCpu) {
  const std::string why = CudnnCoreUnavailableReason(Context::Cpu());
  EXPECT_FALSE(why.empty());
  std::printf("  cuDNN core on the CPU: %s (built: %s)\n", why.c_str(),
              CudnnCoreBuilt() ? "yes" : "no");
}

}  // namespace
}  // namespace kelvin::ssa
