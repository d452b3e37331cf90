// HeldOutEvaluation: the held-out loss, token accuracy and passkey retrieval of a model on the
// job's process grid (the trainer's own, evaluated every training.eval_interval steps, or the
// forward-only one of `kelvin eval JOB`: one loss path for both), on the job's held-out data and
// each data.also_eval set, split over the data-parallel replicas (the same batches on every
// layout).
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "configs/kelvin.pb.h"
#include "data/sampling/batch.h"
#include "inference/model_on_grid.h"
#include "training/job/data_sources.h"

namespace kelvin::inference {

struct EvalStats {
  int64_t step = 0;
  double loss = 0;
  double retrieval_accuracy = -1;  // passkey rows with all digits right; -1 when not passkey
  double token_accuracy = 0;       // correct_tokens / labelled_tokens
  // Over the evaluated batches: the tokens with a label, and those whose most likely prediction
  // (the argmax over the vocabulary) is the label.
  int64_t labelled_tokens = 0, correct_tokens = 0;
};

// "loss 1.2345 | token accuracy 61.2%" (and " | passkey retrieval 90.0%" for passkey), as the
// evaluation lines print it.
std::string FormatEvalStats(const EvalStats& eval);

class HeldOutEvaluation {
 public:
  // Every reference outlives the evaluation: the job (training.eval_steps, eval_whole_set and the
  // batch sizes), the model it scores (its parameters current whenever Evaluate is called) and
  // the job's data.
  HeldOutEvaluation(const config::JobConfig& job, const ModelOnGrid& scored,
                    training::DataSources& data)
      : job_(job), scored_(scored), data_(data) {}

  // Whether the job has held-out data (else Evaluate fails).
  bool HasHeldOutData() const { return data_.eval != nullptr; }
  // The held-out loss (and passkey retrieval) over training.eval_steps global batches (or every
  // held-out row with training.eval_whole_set), labelled `step`; an error naming the data fields
  // when the job has no held-out data. Collective.
  absl::StatusOr<EvalStats> Evaluate(int64_t step);
  // The same on each data.also_eval set: (name, its statistics), in the config's order.
  absl::StatusOr<std::vector<std::pair<std::string, EvalStats>>> EvaluateFurtherSets(int64_t step);

 private:
  // Evaluate on `source` (passkey rows score retrieval too).
  absl::StatusOr<EvalStats> EvaluateOn(data::BatchSource& source, bool passkey, int64_t step);

  const config::JobConfig& job_;
  ModelOnGrid scored_;
  training::DataSources& data_;
};

}  // namespace kelvin::inference
