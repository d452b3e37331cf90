// Liveness probes: while any MPI communicator of the process waits, it answers "are you there?"
// questions, so that a rank whose collective is about to time out can name the processes that do
// not answer (stopped by SIGSTOP or a debugger, hung outside communication) instead of blaming
// MPI, the network, or a member that is itself waiting for them. Questions are asked without
// waiting and their answers read later: the asking fits inside the collective's timeout.
#pragma once

#include <mpi.h>

#include <chrono>
#include <map>
#include <vector>

namespace kelvin::parallel {

class LivenessProbe {
 public:
  // Probes over `comm` (a communicator of its own: the probe's tags are unique on it), whose group
  // rank r is world rank `world_ranks[r]`.
  LivenessProbe(MPI_Comm comm, std::vector<int> world_ranks);
  ~LivenessProbe();
  LivenessProbe(const LivenessProbe&) = delete;
  LivenessProbe& operator=(const LivenessProbe&) = delete;

  // Answers the questions that came (non-blocking).
  void Serve();
  // Asks every other member whether it is there (non-blocking); a member that has not answered an
  // earlier question is not asked again: its answer to that one counts.
  void AskEveryMember();
  // The world ranks of the members asked that have not answered yet (ascending).
  std::vector<int> Unanswered();
  int size() const { return static_cast<int>(world_ranks_.size()); }

 private:
  void PostReceive();
  // Drops the questions answered by now.
  void ForgetAnswered();

  MPI_Comm comm_;
  std::vector<int> world_ranks_;             // [size] by group rank
  MPI_Request incoming_ = MPI_REQUEST_NULL;  // a question from any member
  int incoming_buffer_ = 0;
  std::vector<MPI_Request> answers_;  // answers being sent
  // The questions asked and not yet found answered, by group rank: the receive of the answer and
  // its buffer (a map's values stay where they are while MPI writes them).
  struct Question {
    MPI_Request answer = MPI_REQUEST_NULL;
    int buffer = 0;
  };
  std::map<int, Question> questions_;
};

// Serves every LivenessProbe of this process: called by each wait loop.
void ServeEveryProbe();
// Serves them for `duration`: a rank about to abort lingers so that the members still asking get
// its answer (an abort of mpirun's job also wakes stopped members, which would then answer the
// slower askers and hide what stopped the job).
void ServeProbesFor(std::chrono::steady_clock::duration duration);

// Asks, through `own` (a communicator's probe) and through the probe of this process's widest
// group (the job's world, when its communicator exists), every other process whether it is there:
// a member that waits for another answers, the one that stopped does not. Non-blocking.
void AskAround(LivenessProbe& own);
// The world ranks asked by AskAround that have not answered yet (ascending, each once).
std::vector<int> UnansweredAround(LivenessProbe& own);

}  // namespace kelvin::parallel
