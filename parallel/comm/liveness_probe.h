// Liveness probes: while any MPI communicator of the process waits, it answers "are you there?"
// messages, so that a rank whose collective times out although every member arrived can name the
// members that do not answer (stopped by SIGSTOP or a debugger, hung outside communication)
// instead of blaming MPI or the network.
#pragma once

#include <mpi.h>

#include <chrono>
#include <vector>

namespace kelvin::parallel {

class LivenessProbe {
 public:
  // Probes over `comm` (a communicator of its own: the probe's tags are unique on it).
  explicit LivenessProbe(MPI_Comm comm);
  ~LivenessProbe();
  LivenessProbe(const LivenessProbe&) = delete;
  LivenessProbe& operator=(const LivenessProbe&) = delete;

  // Answers the probes that came (non-blocking).
  void Serve();
  // The group ranks of `peers` that do not answer a probe within `grace`, the probes of others
  // answered meanwhile.
  std::vector<int> Unresponsive(const std::vector<int>& peers,
                                std::chrono::steady_clock::duration grace);

 private:
  void PostReceive();

  MPI_Comm comm_;
  MPI_Request incoming_ = MPI_REQUEST_NULL;  // a probe from any member
  int incoming_buffer_ = 0;
  std::vector<MPI_Request> answers_;  // answers being sent
};

// Serves every LivenessProbe of this process: called by each wait loop.
void ServeEveryProbe();
// Serves them for `duration`: a rank about to abort lingers so that the members still probing
// get its answer (an abort of mpirun's job also wakes stopped members, which would then answer
// the slower probers and hide what stopped the job).
void ServeProbesFor(std::chrono::steady_clock::duration duration);

}  // namespace kelvin::parallel
