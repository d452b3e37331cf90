// A job in which one rank fails, for comm_failure_test.sh: the others must abort with a clear
// message within the timeout (2 s) instead of hanging. Usage: comm_failure_program MODE, run under
// mpirun; the last rank is the one that fails (the modes are listed above main).
#include <mpi.h>

#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <thread>

#include "core/logging.h"
#include "parallel/comm/communicator_factory.h"
#include "parallel/comm/stop_deadline.h"

namespace {

extern "C" void ArmOnSignal(int) { kelvin::parallel::ArmStopDeadline(); }

}  // namespace

// MODE, what the failing rank does:
//   skip      it sleeps 30 s instead of joining an AllReduce
//   kill      it dies (SIGKILL) instead of joining an AllReduce, after a first one succeeded
//   recv      rank 0 waits for a Send from it that never comes
//   mismatch  it calls Broadcast where the others call AllReduce
//   stop      it stops itself (SIGSTOP) while the ranks run large AllReduces: it arrived, but does
//             not finish and does not answer; the others name it
//   stop_signal  it dies (SIGKILL), the others receive SIGTERM as srun --kill-on-bad-exit sends
//             it, and end within the stop grace (1 s) although the collective timeout is 60 s
//   stop_tp_dp  4 ranks as tensor x data parallel groups (tensor {0,1} {2,3}, data {0,2} {1,3})
//             run a tensor then a data-parallel AllReduce per step, under a 4 s timeout; it stops
//             itself (SIGSTOP): rank 0 waits for rank 2, which waits for it; every rank must
//             name it
int main(int argc, char** argv) {
  using kelvin::parallel::ReduceOp;
  MPI_Init(&argc, &argv);
  int rank = 0, size = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  kelvin::SetLogRank(rank);
  const char* mode = argc > 1 ? argv[1] : "";
  kelvin::parallel::CommunicatorOptions options;
  kelvin::parallel::SetStopGraceSeconds(1);
  options.timeout_seconds = std::strcmp(mode, "stop_signal") == 0  ? 60
                            : std::strcmp(mode, "stop_tp_dp") == 0 ? 4
                                                                   : 2;
  auto comm =
      kelvin::parallel::CreateCommunicator(kelvin::parallel::CommBackend::kMpi, MPI_COMM_WORLD,
                                           "world", options, kelvin::Context::Cpu());
  KELVIN_CHECK(comm.ok()) << comm.status();
  kelvin::Tensor tensor = kelvin::Tensor::ZerosCpu({7}, kelvin::DType::kF32);  // [7]
  (*comm)->AllReduce(tensor, ReduceOp::kSum);  // collective #1: everyone is alive
  const bool failing = rank == size - 1;
  if (std::strcmp(mode, "skip") == 0) {
    if (failing) {
      std::this_thread::sleep_for(std::chrono::seconds(30));
    } else {
      (*comm)->AllReduce(tensor, ReduceOp::kSum);
    }
  } else if (std::strcmp(mode, "kill") == 0) {
    if (failing) std::raise(SIGKILL);
    (*comm)->AllReduce(tensor, ReduceOp::kSum);
  } else if (std::strcmp(mode, "recv") == 0) {
    if (rank == 0) {
      (*comm)->Recv(tensor, size - 1);
    } else {
      std::this_thread::sleep_for(std::chrono::seconds(30));
    }
  } else if (std::strcmp(mode, "mismatch") == 0) {
    if (failing) {
      (*comm)->Broadcast(tensor, 0);
    } else {
      (*comm)->AllReduce(tensor, ReduceOp::kSum);
    }
  } else if (std::strcmp(mode, "stop") == 0) {
    kelvin::Tensor large = kelvin::Tensor::ZerosCpu({1 << 22}, kelvin::DType::kF32);  // 16 MiB
    if (failing) {
      std::thread([] {
        std::this_thread::sleep_for(std::chrono::milliseconds(30));
        std::raise(SIGSTOP);  // the whole process, in whichever AllReduce it is
      }).detach();
    }
    for (int i = 0; i < 200; ++i) (*comm)->AllReduce(large, ReduceOp::kSum);
  } else if (std::strcmp(mode, "stop_tp_dp") == 0) {
    KELVIN_CHECK(size == 4) << "stop_tp_dp runs on 4 ranks";
    MPI_Comm tensor_comm = MPI_COMM_NULL, data_comm = MPI_COMM_NULL;
    MPI_Comm_split(MPI_COMM_WORLD, rank / 2, rank, &tensor_comm);
    MPI_Comm_split(MPI_COMM_WORLD, rank % 2, rank, &data_comm);
    auto tensor_group = kelvin::parallel::CreateCommunicator(
        kelvin::parallel::CommBackend::kMpi, tensor_comm, "tp", options, kelvin::Context::Cpu());
    auto data_group = kelvin::parallel::CreateCommunicator(
        kelvin::parallel::CommBackend::kMpi, data_comm, "dp", options, kelvin::Context::Cpu());
    KELVIN_CHECK(tensor_group.ok() && data_group.ok());
    kelvin::Tensor large = kelvin::Tensor::ZerosCpu({1 << 20}, kelvin::DType::kF32);  // 4 MiB
    if (failing) {
      std::thread([] {
        std::this_thread::sleep_for(std::chrono::milliseconds(30));
        std::raise(SIGSTOP);
      }).detach();
    }
    for (int i = 0; i < 400; ++i) {
      (*tensor_group)->AllReduce(large, ReduceOp::kSum);
      (*data_group)->AllReduce(large, ReduceOp::kSum);
    }
  } else if (std::strcmp(mode, "stop_signal") == 0) {
    if (failing) std::raise(SIGKILL);
    std::signal(SIGTERM, ArmOnSignal);
    std::raise(SIGTERM);  // what srun sends the survivors
    (*comm)->AllReduce(tensor, ReduceOp::kSum);
  } else {
    std::fprintf(stderr,
                 "usage: comm_failure_program skip|kill|recv|mismatch|stop|stop_signal|"
                 "stop_tp_dp\n");
    MPI_Abort(MPI_COMM_WORLD, 2);
  }
  std::fprintf(stderr, "rank %d: mode %s finished without failing\n", rank, mode);
  comm->reset();
  MPI_Finalize();
  return 0;
}
