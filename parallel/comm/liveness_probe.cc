// Liveness probes over their own communicator (see liveness_probe.h): a probe is one int sent
// with kProbeTag, answered with kAnswerTag by whichever wait loop of the peer runs next.
#include "parallel/comm/liveness_probe.h"

#include <algorithm>
#include <thread>

#include "core/mpi_check.h"

namespace kelvin::parallel {
namespace {

constexpr int kProbeTag = 11;
constexpr int kAnswerTag = 12;

// The process's probes (MPI is used from one thread: MPI_THREAD_FUNNELED).
std::vector<LivenessProbe*>& Probes() {
  static std::vector<LivenessProbe*> probes;
  return probes;
}

}  // namespace

LivenessProbe::LivenessProbe(MPI_Comm comm) : comm_(comm) {
  PostReceive();
  Probes().push_back(this);
}

LivenessProbe::~LivenessProbe() {
  std::vector<LivenessProbe*>& probes = Probes();
  probes.erase(std::remove(probes.begin(), probes.end(), this), probes.end());
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized) return;
  MPI_Cancel(&incoming_);
  MPI_Wait(&incoming_, MPI_STATUS_IGNORE);
  for (MPI_Request& answer : answers_) MPI_Request_free(&answer);
}

void LivenessProbe::PostReceive() {
  KELVIN_MPI_CHECK(
      MPI_Irecv(&incoming_buffer_, 1, MPI_INT, MPI_ANY_SOURCE, kProbeTag, comm_, &incoming_));
}

void LivenessProbe::Serve() {
  for (;;) {
    int arrived = 0;
    MPI_Status status;
    KELVIN_MPI_CHECK(MPI_Test(&incoming_, &arrived, &status));
    if (!arrived) break;
    static const int kAnswer = 1;
    KELVIN_MPI_CHECK(MPI_Isend(&kAnswer, 1, MPI_INT, status.MPI_SOURCE, kAnswerTag, comm_,
                               &answers_.emplace_back()));
    PostReceive();
  }
  // Sent answers are done with once delivered.
  answers_.erase(std::remove_if(answers_.begin(), answers_.end(),
                                [](MPI_Request& answer) {
                                  int done = 0;
                                  KELVIN_MPI_CHECK(MPI_Test(&answer, &done, MPI_STATUS_IGNORE));
                                  return done != 0;
                                }),
                 answers_.end());
}

std::vector<int> LivenessProbe::Unresponsive(const std::vector<int>& peers,
                                             std::chrono::steady_clock::duration grace) {
  static const int kProbe = 1;
  std::vector<int> answers(peers.size());
  std::vector<MPI_Request> sent(peers.size()), received(peers.size());
  for (size_t i = 0; i < peers.size(); ++i) {
    KELVIN_MPI_CHECK(MPI_Isend(&kProbe, 1, MPI_INT, peers[i], kProbeTag, comm_, &sent[i]));
    KELVIN_MPI_CHECK(MPI_Irecv(&answers[i], 1, MPI_INT, peers[i], kAnswerTag, comm_, &received[i]));
  }
  std::vector<bool> answered(peers.size(), false);
  const auto deadline = std::chrono::steady_clock::now() + grace;
  while (std::chrono::steady_clock::now() < deadline &&
         std::count(answered.begin(), answered.end(), false) > 0) {
    for (size_t i = 0; i < peers.size(); ++i) {
      int done = 0;
      if (!answered[i]) KELVIN_MPI_CHECK(MPI_Test(&received[i], &done, MPI_STATUS_IGNORE));
      if (done) answered[i] = true;
    }
    ServeEveryProbe();  // peers probing at the same time
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  std::vector<int> silent;
  for (size_t i = 0; i < peers.size(); ++i) {
    if (!answered[i]) silent.push_back(peers[i]);
  }
  // The job aborts after this: the requests of silent peers are left to MPI_Abort.
  return silent;
}

void ServeEveryProbe() {
  for (LivenessProbe* probe : Probes()) probe->Serve();
}

void ServeProbesFor(std::chrono::steady_clock::duration duration) {
  const auto end = std::chrono::steady_clock::now() + duration;
  while (std::chrono::steady_clock::now() < end) {
    ServeEveryProbe();
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
}

}  // namespace kelvin::parallel
