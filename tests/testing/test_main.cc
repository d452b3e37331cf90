// main() of every Kelvin test program: thread-safe death tests (OpenMP threads exist) and a line
// saying whether CUDA cases will run.
#include <gtest/gtest.h>

#include <cstdio>

#include "core/device.h"

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  if (kelvin::CudaAvailable()) {
    std::printf("CUDA: %d device(s); CUDA cases run\n", kelvin::CudaDeviceCount());
  } else {
    std::printf("CUDA: unavailable (%s); CUDA cases skip\n",
                kelvin::CudaUnavailableReason().c_str());
  }
  return RUN_ALL_TESTS();
}
