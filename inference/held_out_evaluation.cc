// The held-out evaluation: batches scored forward-only through the pipeline program, the sums
// agreed over the replicas and the pipeline stages.
#include "inference/held_out_evaluation.h"

#include <algorithm>
#include <optional>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/ops/cross_entropy.h"
#include "core/profile_range.h"
#include "data/tasks/passkey_task.h"
#include "parallel/loss/lm_loss.h"

namespace kelvin::inference {

std::string FormatEvalStats(const EvalStats& eval) {
  return absl::StrFormat("loss %.4f | token accuracy %.1f%%", eval.loss,
                         100 * eval.token_accuracy) +
         (eval.retrieval_accuracy >= 0
              ? absl::StrFormat(" | passkey retrieval %.1f%%", 100 * eval.retrieval_accuracy)
              : "");
}

absl::StatusOr<std::vector<std::pair<std::string, EvalStats>>>
HeldOutEvaluation::EvaluateFurtherSets(int64_t step) {
  std::vector<std::pair<std::string, EvalStats>> evaluated;
  for (training::NamedEvalSource& also : data_.also_eval) {
    KELVIN_ASSIGN_OR_RETURN(const EvalStats eval,
                            EvaluateOn(*also.source, /*passkey=*/false, step));
    evaluated.emplace_back(also.name, eval);
  }
  return evaluated;
}

absl::StatusOr<EvalStats> HeldOutEvaluation::Evaluate(int64_t step) {
  if (data_.eval == nullptr && job_.data().has_passkey()) {
    return absl::FailedPreconditionError(
        "the job has no held-out data: data.passkey draws held-out samples only with "
        "training.eval_interval > 0; set it (e.g. --set training.eval_interval=50)");
  }
  if (data_.eval == nullptr) {
    return absl::FailedPreconditionError(
        "the job has no held-out data: use data.passkey, or give a corpus data.eval_fraction or "
        "a data.eval corpus");
  }
  return EvaluateOn(*data_.eval, data_.passkey, step);
}

absl::StatusOr<EvalStats> HeldOutEvaluation::EvaluateOn(data::BatchSource& source, bool passkey,
                                                        int64_t step) {
  const ProfileRange range(absl::StrCat("evaluation at step ", step));
  const Context& ctx = scored_.ctx;
  parallel::ProcessGrid& grid = scored_.grid;
  models::LlamaModel& model = scored_.model;
  const int data_parallel = grid.spec().data_parallel;
  EvalStats stats{step, 0, passkey ? 0.0 : -1.0};
  int64_t labelled = 0, rows = 0, retrieved = 0, correct = 0;
  // Each data-parallel replica scores every DP-th batch (the same set on every layout); the sums
  // span the replicas.
  // The micro-batches: training.eval_steps global batches (the same rows at every evaluation), or
  // with training.eval_whole_set every row of the held-out data, B at a time.
  const config::TrainingConfig& t = job_.training();
  const std::optional<int64_t> whole_set =
      t.eval_whole_set() ? source.FixedRowCount() : std::nullopt;
  const int64_t micro_batch_count =
      whole_set.has_value() ? (*whole_set + t.micro_batch_size() - 1) / t.micro_batch_size()
                            : t.eval_steps() * (t.global_batch_size() / t.micro_batch_size());
  absl::Status read = absl::OkStatus();
  for (int64_t i = grid.dp_rank(); i < micro_batch_count; i += data_parallel) {
    const absl::StatusOr<data::Batch> next = whole_set.has_value()
                                                 ? source.FixedRowsAt(i * t.micro_batch_size())
                                                 : source.BatchAt({i, 0, 1, 0, 1});
    if (!next.ok()) {  // at the same batch on every rank of this replica
      read = next.status();
      break;
    }
    const data::Batch& batch = *next;
    const parallel::ContextSplit split = ContextSplitOf(grid, batch);
    const Tensor labels = split.Local(batch.labels);  // [N] this rank's tokens
    labelled += ops::CountNonIgnored(Context::Cpu(), labels);
    rows += batch.rows();
    const Tensor* logits = scored_.pipeline.Forward(ctx, {batch.tokens, batch.positions});
    if (logits == nullptr) continue;  // a pipeline stage before the last
    Tensor predictions = Tensor::Empty({logits->dim(0)}, DType::kI32);  // [N]
    stats.loss += parallel::CrossEntropySum(ctx, model.tp(), *logits, labels,
                                            model.layout().vocab_begin, &predictions);
    correct += parallel::CountCorrectPredictions(labels, predictions);
    if (passkey) {
      Tensor all = Tensor::Empty(batch.tokens.shape(), DType::kI32);  // [B, T] every rank's tokens
      Tensor scratch = Tensor::Empty({all.numel()}, DType::kI32);
      split.Gather(Context::Cpu(), predictions, scratch, all);
      retrieved += data::CountRetrieved(batch, all);
    }
  }
  KELVIN_RETURN_IF_ERROR(
      parallel::AgreeOnStatus(grid.world(), read, "reading the held-out batches"));
  labelled = static_cast<int64_t>(SumOverReplicas(grid, static_cast<double>(labelled)));
  stats.loss = FromLastStage(grid, SumOverReplicas(grid, stats.loss)) /
               static_cast<double>(std::max<int64_t>(labelled, 1));
  stats.labelled_tokens = labelled;
  stats.correct_tokens = static_cast<int64_t>(
      FromLastStage(grid, SumOverReplicas(grid, static_cast<double>(correct))));
  stats.token_accuracy = static_cast<double>(stats.correct_tokens) /
                         static_cast<double>(std::max<int64_t>(labelled, 1));
  if (passkey) {  // whole rows: the context-parallel ranks count the same ones
    const auto over_data_parallel = [&](double value) {
      return grid.dp().AllReduceScalar(value, parallel::ReduceOp::kSum);
    };
    stats.retrieval_accuracy =
        FromLastStage(grid, over_data_parallel(static_cast<double>(retrieved))) /
        over_data_parallel(static_cast<double>(rows));
  }
  return stats;
}

}  // namespace kelvin::inference
