// KELVIN_MPI_CHECK: the failed call and MPI's own error text, or a plain note when MPI is not
// initialised (OpenMPI aborts if asked to decode codes then).
#include "core/mpi_check.h"

#include <gtest/gtest.h>

namespace kelvin {
namespace {

TEST(MpiCheckDeathTest, PrintsTheCallAndMpisOwnErrorText) {
  EXPECT_DEATH(
      {
        MPI_Init(nullptr, nullptr);  // in the death-test child only: a singleton MPI process
        KELVIN_MPI_CHECK(MPI_ERR_COMM);
      },
      "MPI_ERR_COMM returned MPI error [0-9]+: .*communicator");
}

TEST(MpiCheckDeathTest, SaysWhenMpiIsNotInitialised) {
  EXPECT_DEATH(
      KELVIN_MPI_CHECK(MPI_ERR_COMM),
      "MPI_ERR_COMM returned MPI error [0-9]+ \\(MPI not initialised; code not decoded\\)");
}

}  // namespace
}  // namespace kelvin
