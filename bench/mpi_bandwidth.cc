// MPI collective bandwidth per rank, as the step-time model of `kelvin plan` uses it (a CPU's
// launch.hardware.intra_node_gbps): MPI_Allreduce and MPI_Allgather of f32 buffers, reported as
// ring "bus bandwidth" (all-reduce 2 (n-1)/n x bytes / time, all-gather (n-1)/n x bytes / time).
// Usage: mpirun -np N mpi_bandwidth [BYTES ...]   (default: 512 KiB and 8 MiB; bytes of the whole
// buffer). Rank 0 prints one JSON line per size: the median of 20 timed calls after 3 warm-ups.
#include <mpi.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

namespace {

// The median seconds of `calls` runs of `collective` (each timed between barriers, the slowest
// rank's time).
template <typename Collective>
double MedianSeconds(Collective collective, int calls) {
  std::vector<double> seconds;
  for (int i = 0; i < calls; ++i) {
    MPI_Barrier(MPI_COMM_WORLD);
    const double start = MPI_Wtime();
    collective();
    double mine = MPI_Wtime() - start, slowest = 0;
    MPI_Allreduce(&mine, &slowest, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    seconds.push_back(slowest);
  }
  std::sort(seconds.begin(), seconds.end());
  return seconds[seconds.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  std::vector<long> sizes;
  for (int i = 1; i < argc; ++i) sizes.push_back(std::strtol(argv[i], nullptr, 10));
  if (sizes.empty()) sizes = {512L << 10, 8L << 20};
  for (const long bytes : sizes) {
    const int elements = static_cast<int>(bytes / 4 / size * size);  // f32, a whole chunk each
    std::vector<float> buffer(static_cast<size_t>(elements), 1.0f), out(buffer.size());
    const int chunk = elements / size;
    const auto all_reduce = [&] {
      MPI_Allreduce(buffer.data(), out.data(), elements, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    };
    const auto all_gather = [&] {
      MPI_Allgather(buffer.data(), chunk, MPI_FLOAT, out.data(), chunk, MPI_FLOAT, MPI_COMM_WORLD);
    };
    for (int i = 0; i < 3; ++i) all_reduce(), all_gather();
    const double reduce_s = MedianSeconds(all_reduce, 20), gather_s = MedianSeconds(all_gather, 20);
    const double whole = 4.0 * elements, ring = (size - 1.0) / size;
    if (rank == 0) {
      std::printf(
          "{\"ranks\": %d, \"bytes\": %.0f, \"all_reduce_seconds\": %.6g, "
          "\"all_reduce_bus_gbps\": %.3f, \"all_gather_seconds\": %.6g, "
          "\"all_gather_bus_gbps\": %.3f}\n",
          size, whole, reduce_s, 2 * ring * whole / reduce_s / 1e9, gather_s,
          ring * whole / gather_s / 1e9);
    }
  }
  MPI_Finalize();
  return 0;
}
