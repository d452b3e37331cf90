// main() of the MPI test programs (run under mpirun -np N): MPI around GoogleTest. Rank 0 prints
// the usual report; the other ranks print only their failures, prefixed with their rank.
// mpirun exits non-zero when any rank fails.
#include <gtest/gtest.h>
#include <mpi.h>

#include <cstdio>

#include "core/device.h"
#include "core/logging.h"

namespace {

class FailurePrinter : public ::testing::EmptyTestEventListener {
 public:
  explicit FailurePrinter(int rank) : rank_(rank) {}
  void OnTestPartResult(const ::testing::TestPartResult& result) override {
    if (!result.failed()) return;
    std::fprintf(stderr, "[rank %d] %s:%d: Failure\n%s\n", rank_,
                 result.file_name() ? result.file_name() : "?", result.line_number(),
                 result.message());
  }

 private:
  int rank_;
};

}  // namespace

int main(int argc, char** argv) {
  int threading = 0;  // FUNNELED: the trainer's background checkpoint writer never calls MPI
  MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &threading);
  int rank = 0, size = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  kelvin::SetLogRank(rank);
  ::testing::InitGoogleTest(&argc, argv);
  if (rank == 0) {
    std::printf("MPI: %d ranks; CUDA: %s\n", size,
                kelvin::CudaAvailable() ? "available" : kelvin::CudaUnavailableReason().c_str());
  } else {
    ::testing::TestEventListeners& listeners = ::testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
    listeners.Append(new FailurePrinter(rank));
  }
  const int result = RUN_ALL_TESTS();
  MPI_Finalize();
  return result;
}
