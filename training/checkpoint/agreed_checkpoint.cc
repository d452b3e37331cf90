// The checkpoint every rank reads: listed by each (or by rank 0 and broadcast), then agreed.
#include "training/checkpoint/agreed_checkpoint.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "parallel/comm/communicator.h"

namespace kelvin::training {
namespace {

// Every rank found the same checkpoint (a shared filesystem may show one late): an error on every
// rank when not.
absl::Status CheckSameCheckpointEverywhere(parallel::Communicator& world, const std::string& dir,
                                           const std::optional<std::string>& found) {
  const int64_t step = found.has_value() ? CheckpointStepOf(*found).value_or(-1) : -1;
  Tensor range = Tensor::Empty({2}, DType::kI64);  // [max step, -min step] over the ranks
  range.data<int64_t>()[0] = step;
  range.data<int64_t>()[1] = -step;
  world.AllReduce(range, parallel::ReduceOp::kMax);
  const int64_t newest = range.data<int64_t>()[0], oldest = -range.data<int64_t>()[1];
  if (newest == oldest) return absl::OkStatus();
  return absl::FailedPreconditionError(absl::StrCat(
      "the ranks found different checkpoints in checkpoint.dir=\"", dir, "\" (steps ", oldest,
      " to ", newest,
      "; -1: none): the shared filesystem shows the latest save late; run the job again"));
}

}  // namespace

absl::StatusOr<std::optional<std::string>> AgreedCheckpoint(parallel::Communicator& world,
                                                            const std::string& dir,
                                                            const CheckpointChoice& choice) {
  const absl::StatusOr<std::optional<std::string>> found = ChooseCheckpoint(dir, choice);
  KELVIN_RETURN_IF_ERROR(
      parallel::AgreeOnStatus(world, found.status(), "listing checkpoint.dir=" + dir));
  KELVIN_RETURN_IF_ERROR(CheckSameCheckpointEverywhere(world, dir, *found));
  return *found;
}

absl::StatusOr<std::vector<int64_t>> AgreedCheckpointSteps(parallel::Communicator& world,
                                                           const std::string& dir,
                                                           absl::string_view consequence) {
  absl::StatusOr<std::vector<int64_t>> listed = CompleteCheckpointSteps(dir);
  KELVIN_RETURN_IF_ERROR(
      parallel::AgreeOnStatus(world, listed.status(), "listing checkpoint.dir=" + dir));
  std::vector<int64_t> steps = *std::move(listed);
  // Rank 0's list everywhere: each restore then agrees on its step.
  Tensor count = Tensor::Empty({1}, DType::kI64);
  count.data<int64_t>()[0] = static_cast<int64_t>(steps.size());
  world.Broadcast(count, 0);
  steps.resize(static_cast<size_t>(count.data<int64_t>()[0]));
  if (!steps.empty()) {
    Tensor values = Tensor::Empty({static_cast<int64_t>(steps.size())}, DType::kI64);
    std::copy(steps.begin(), steps.end(), values.data<int64_t>());
    world.Broadcast(values, 0);
    std::copy_n(values.data<int64_t>(), steps.size(), steps.begin());
  }
  if (steps.empty()) return NoCompleteCheckpointError(dir, consequence);
  return steps;
}

}  // namespace kelvin::training
