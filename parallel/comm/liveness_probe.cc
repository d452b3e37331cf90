// Liveness probes over their own communicator (see liveness_probe.h): a question is one int sent
// with kProbeTag, answered with kAnswerTag by whichever wait loop of the peer runs next.
#include "parallel/comm/liveness_probe.h"

#include <algorithm>
#include <thread>
#include <utility>

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

// The probe of the process's widest group (the first of equal ones).
LivenessProbe* WidestProbe() {
  LivenessProbe* widest = nullptr;
  for (LivenessProbe* probe : Probes()) {
    if (widest == nullptr || probe->size() > widest->size()) widest = probe;
  }
  return widest;
}

}  // namespace

LivenessProbe::LivenessProbe(MPI_Comm comm, std::vector<int> world_ranks)
    : comm_(comm), world_ranks_(std::move(world_ranks)) {
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
  for (auto& [member, question] : questions_) {
    MPI_Cancel(&question.answer);
    MPI_Wait(&question.answer, MPI_STATUS_IGNORE);
  }
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

void LivenessProbe::ForgetAnswered() {
  for (auto it = questions_.begin(); it != questions_.end();) {
    int answered = 0;
    KELVIN_MPI_CHECK(MPI_Test(&it->second.answer, &answered, MPI_STATUS_IGNORE));
    it = answered ? questions_.erase(it) : std::next(it);
  }
}

void LivenessProbe::AskEveryMember() {
  ForgetAnswered();
  int self = 0;
  KELVIN_MPI_CHECK(MPI_Comm_rank(comm_, &self));
  static const int kQuestion = 1;
  for (int member = 0; member < size(); ++member) {
    if (member == self || questions_.count(member)) continue;
    Question& question = questions_[member];
    KELVIN_MPI_CHECK(
        MPI_Irecv(&question.buffer, 1, MPI_INT, member, kAnswerTag, comm_, &question.answer));
    MPI_Request sent = MPI_REQUEST_NULL;  // a small message: it leaves whether or not it is read
    KELVIN_MPI_CHECK(MPI_Isend(&kQuestion, 1, MPI_INT, member, kProbeTag, comm_, &sent));
    KELVIN_MPI_CHECK(MPI_Request_free(&sent));
  }
}

std::vector<int> LivenessProbe::Unanswered() {
  ForgetAnswered();
  std::vector<int> silent;
  for (const auto& [member, question] : questions_) {
    silent.push_back(world_ranks_[static_cast<size_t>(member)]);
  }
  std::sort(silent.begin(), silent.end());
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

void AskAround(LivenessProbe& own) {
  own.AskEveryMember();
  LivenessProbe* widest = WidestProbe();
  if (widest != &own) widest->AskEveryMember();
}

std::vector<int> UnansweredAround(LivenessProbe& own) {
  std::vector<int> silent = own.Unanswered();
  LivenessProbe* widest = WidestProbe();
  if (widest != &own) {
    const std::vector<int> more = widest->Unanswered();
    silent.insert(silent.end(), more.begin(), more.end());
    std::sort(silent.begin(), silent.end());
    silent.erase(std::unique(silent.begin(), silent.end()), silent.end());
  }
  return silent;
}

}  // namespace kelvin::parallel
