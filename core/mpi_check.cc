// Decoding of MPI error codes for KELVIN_MPI_CHECK.
#include "core/mpi_check.h"

namespace kelvin::internal {

std::string DescribeMpiError(int code) {
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (!initialized || finalized) {
    // MPI may not decode codes outside an initialised session (OpenMPI aborts instead).
    return "MPI error " + std::to_string(code) + " (MPI not initialised; code not decoded)";
  }
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  int error_class = code;
  MPI_Error_class(code, &error_class);
  std::string result = "MPI error " + std::to_string(code);
  if (MPI_Error_string(code, text, &length) == MPI_SUCCESS) {
    result += ": " + std::string(text, static_cast<size_t>(length));
  }
  if (error_class != code) result += " (class " + std::to_string(error_class) + ")";
  return result;
}

}  // namespace kelvin::internal
