// Test values, double <-> tensor conversion and the world group for the MPI test programs.
#include "tests/parallel/mpi/mpi_test_values.h"

#include <mpi.h>

#include "core/bf16.h"
#include "parallel/comm/communicator_factory.h"

namespace kelvin::parallel::testing {

double TestValue(DType dtype, int rank, int64_t index) {
  switch (dtype) {
    case DType::kF32:
    case DType::kF64:
    case DType::kBF16:
      return 1.0 + 0.375 * rank + 0.0625 * static_cast<double>(index % 7);
    case DType::kI32:
      return (rank + 1) * 100000.0 + static_cast<double>(index);
    case DType::kI64:
      return static_cast<double>((int64_t{rank + 1} << 34) + index);
  }
  KELVIN_FATAL() << "unknown dtype";
}

Tensor TensorOf(DType dtype, const std::vector<double>& values) {
  Tensor tensor = Tensor::Empty({static_cast<int64_t>(values.size())}, dtype);
  for (size_t i = 0; i < values.size(); ++i) {
    switch (dtype) {
      case DType::kF32:
        tensor.data<float>()[i] = static_cast<float>(values[i]);
        break;
      case DType::kF64:
        tensor.data<double>()[i] = values[i];
        break;
      case DType::kBF16:
        tensor.data<bf16>()[i] = bf16(static_cast<float>(values[i]));
        break;
      case DType::kI32:
        tensor.data<int32_t>()[i] = static_cast<int32_t>(values[i]);
        break;
      case DType::kI64:
        tensor.data<int64_t>()[i] = static_cast<int64_t>(values[i]);
        break;
    }
  }
  return tensor;
}

std::vector<double> ValuesOf(const Tensor& host) {
  std::vector<double> values(static_cast<size_t>(host.numel()));
  for (size_t i = 0; i < values.size(); ++i) {
    switch (host.dtype()) {
      case DType::kF32:
        values[i] = host.data<float>()[i];
        break;
      case DType::kF64:
        values[i] = host.data<double>()[i];
        break;
      case DType::kBF16:
        values[i] = static_cast<float>(host.data<bf16>()[i]);
        break;
      case DType::kI32:
        values[i] = host.data<int32_t>()[i];
        break;
      case DType::kI64:
        values[i] = static_cast<double>(host.data<int64_t>()[i]);
        break;
    }
  }
  return values;
}

std::unique_ptr<Communicator> World() {
  CommunicatorOptions options;
  options.timeout_seconds = 60;
  auto world =
      CreateCommunicator(CommBackend::kMpi, MPI_COMM_WORLD, "world", options, Context::Cpu());
  KELVIN_CHECK(world.ok()) << world.status();
  return *std::move(world);
}

}  // namespace kelvin::parallel::testing
