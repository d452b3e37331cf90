// Check macro for MPI calls: on failure prints file:line, the rank, the call and MPI's own error
// text, then aborts. (Kelvin sets MPI_ERRORS_RETURN on its communicators so errors reach here.)
#pragma once

#include <mpi.h>

#include <string>

#include "core/check.h"

namespace kelvin::internal {
std::string DescribeMpiError(int code);  // "MPI error 5 (MPI_ERR_COMM): invalid communicator"
}  // namespace kelvin::internal

#define KELVIN_MPI_CHECK(call)                                                      \
  do {                                                                              \
    const int kelvin_mpi_code_ = (call);                                            \
    if (kelvin_mpi_code_ != MPI_SUCCESS) {                                          \
      ::kelvin::internal::CheckFailure(__FILE__, __LINE__, #call).stream()          \
          << "returned " << ::kelvin::internal::DescribeMpiError(kelvin_mpi_code_); \
    }                                                                               \
  } while (0)
