// The progress and evaluation lines, and the scalars behind them in TensorBoard and the metrics
// file.
#include "training/metrics/run_metrics.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/allocator.h"
#include "core/logging.h"
#include "models/llama/model_flops.h"
#include "training/job/job_plan.h"

namespace kelvin::training {
namespace {

// One line per layer: tau^q and tau^v as mean +- std [min, max], and the range of sigma(alpha)
// over the heads (docs/ssa.md, "Statistics").
void LogTemperatureStatistics(const std::vector<ssa::TemperatureStatistics>& layers) {
  auto summary = [](const ssa::TemperatureSummary& s) {
    return s.count == 0 ? std::string("off")
                        : absl::StrFormat("%.4f +- %.4f [%.4f, %.4f]", s.mean, s.std, s.min, s.max);
  };
  for (size_t l = 0; l < layers.size(); ++l) {
    const ssa::TemperatureStatistics& t = layers[l];
    std::string alpha = "off";
    if (!t.sigma_alpha.empty()) {
      const auto [lo, hi] = std::minmax_element(t.sigma_alpha.begin(), t.sigma_alpha.end());
      alpha = absl::StrFormat("[%.3g, %.3g]", *lo, *hi);
    }
    KLOG_RANK0(INFO) << absl::StrFormat("  ssa layer %d | tau^q %s | tau^v %s | sigma(alpha) %s", l,
                                        summary(t.query), summary(t.value), alpha);
  }
}

}  // namespace

absl::StatusOr<std::unique_ptr<RunMetrics>> RunMetrics::Create(const config::JobConfig& job,
                                                               const models::LlamaConfig& arch,
                                                               int world_size, int data_parallel,
                                                               bool logging_rank, Device device) {
  std::unique_ptr<RunMetrics> metrics(
      new RunMetrics(job, arch, world_size, data_parallel, logging_rank, device));
  if (!job.logging().tensorboard_dir().empty() && logging_rank) {
    KELVIN_ASSIGN_OR_RETURN(metrics->tensorboard_,
                            TensorBoardWriter::Open(job.logging().tensorboard_dir()));
  }
  return metrics;
}

absl::Status RunMetrics::OpenMetricsFile(int64_t resumed_steps, parallel::Communicator& world) {
  if (job_.logging().metrics_file().empty()) return absl::OkStatus();
  absl::Status opened = absl::OkStatus();
  if (logging_rank_) {  // from the step the run resumed at
    absl::StatusOr<MetricsFile> metrics =
        MetricsFile::Open(job_.logging().metrics_file(), resumed_steps);
    if (metrics.ok()) metrics_file_ = std::make_unique<MetricsFile>(std::move(*metrics));
    opened = metrics.status();
  }
  return parallel::AgreeOnStatus(world, opened, "opening logging.metrics_file");
}

bool RunMetrics::LogsProgress(int64_t step) const {
  return (step + 1) % job_.logging().log_interval() == 0 || step + 1 == job_.training().steps();
}

bool RunMetrics::ReportsTemperatures(int64_t step) const {
  if (!arch_.ssa.has_value()) return false;
  const config::LoggingConfig& logging = job_.logging();
  if (!logging.metrics_file().empty() || !logging.tensorboard_dir().empty()) return true;
  return job_.model().ssa().log_statistics() && LogsProgress(step);
}

void RunMetrics::LogProgress(const StepStats& stats, int64_t start_step, int64_t tokens,
                             double elapsed) const {
  const int64_t steps = job_.training().steps();
  const int64_t step = stats.step;
  const double eta = elapsed / static_cast<double>(step + 1 - start_step) * (steps - step - 1);
  const Throughput rate = ThroughputOf(tokens / elapsed);
  KLOG_RANK0(INFO) << absl::StrFormat(
                          "step %d/%d | loss %.4f | lr %.2e | grad norm %.3f | %.0f tok/s | "
                          "%.3g TFLOP/s per process%s | peak mem %.2f GiB | ETA %s",
                          step + 1, steps, stats.loss, stats.lr, stats.grad_norm, tokens / elapsed,
                          rate.tflops_per_process,
                          rate.mfu > 0 ? absl::StrFormat(" (MFU %.1f%%)", 100 * rate.mfu) : "",
                          PeakMemoryGiB(), FormatDuration(eta))
                   << (world_size_ > 1
                           ? absl::StrFormat(" | comm %.0f%%",
                                             100 * stats.communication_seconds / stats.seconds)
                           : "");
  if (arch_.ssa.has_value() && job_.model().ssa().log_statistics()) {
    LogTemperatureStatistics(stats.temperatures);
  }
}

void RunMetrics::RecordEvaluation(const inference::EvalStats& eval, const std::string& name) {
  const std::string prefix = name.empty() ? "eval/" : absl::StrCat("eval/", name, "/");
  std::vector<std::pair<std::string, double>> scalars = {
      {prefix + "loss", eval.loss}, {prefix + "token_accuracy", eval.token_accuracy}};
  if (eval.retrieval_accuracy >= 0) {
    scalars.emplace_back(prefix + "passkey_retrieval", eval.retrieval_accuracy);
  }
  RecordScalars(eval.step, scalars);
  KLOG_RANK0(INFO) << "eval" << (name.empty() ? "" : " of " + name) << " at step " << eval.step
                   << " | " << inference::FormatEvalStats(eval);
}

void RunMetrics::RecordScalars(int64_t step,
                               const std::vector<std::pair<std::string, double>>& scalars) {
  // Rank 0's alone: on a write error training goes on (the others would wait for it).
  if (metrics_file_ != nullptr) {
    const absl::Status appended = metrics_file_->Append(step, scalars);
    if (!appended.ok()) {
      KLOG(WARNING) << "the metrics file stops here: " << appended;
      metrics_file_.reset();
    }
  }
  if (tensorboard_ == nullptr) return;
  for (const auto& [tag, value] : scalars) {
    const absl::Status added = tensorboard_->AddScalar(tag, step, value);
    if (!added.ok()) {
      KLOG(WARNING) << "TensorBoard logging stops here: " << added;
      tensorboard_.reset();
      return;
    }
  }
}

RunMetrics::Throughput RunMetrics::ThroughputOf(double tokens_per_second) const {
  const double flops = models::TrainingFlopsPerToken(arch_, job_.training().seq_length()) *
                       tokens_per_second / static_cast<double>(world_size_);
  const double peak = job_.logging().peak_tflops() * 1e12;
  return {flops / 1e12, peak > 0 ? flops / peak : 0.0};
}

double RunMetrics::PeakMemoryGiB() const {
  return static_cast<double>(AllocatorFor(device_).stats().peak_bytes_in_use) /
         static_cast<double>(1ull << 30);
}

void RunMetrics::RecordStep(const StepStats& stats) {
  if (tensorboard_ == nullptr && metrics_file_ == nullptr) return;
  const int64_t step = stats.step + 1;  // steps completed, as the progress lines count
  const double tokens_per_second = stats.tokens * data_parallel_ / stats.seconds;
  std::vector<std::pair<std::string, double>> scalars = {
      {"train/loss", stats.loss},
      {"train/learning_rate", stats.lr},
      {"train/grad_norm", stats.grad_norm},
      {"train/step_seconds", stats.seconds},
      {"train/tokens_per_second", tokens_per_second},
      {"train/peak_memory_gib", PeakMemoryGiB()}};
  const Throughput rate = ThroughputOf(tokens_per_second);
  scalars.emplace_back("train/tflops_per_process", rate.tflops_per_process);
  if (rate.mfu > 0) scalars.emplace_back("train/mfu", rate.mfu);
  if (world_size_ > 1) {
    scalars.emplace_back("train/communication_share", stats.communication_seconds / stats.seconds);
  }
  for (size_t l = 0; l < stats.temperatures.size(); ++l) {
    const ssa::TemperatureStatistics& t = stats.temperatures[l];
    const std::string layer = absl::StrCat("ssa/layer_", l, "/");
    if (t.query.count > 0) {
      scalars.emplace_back(layer + "tau_q_mean", t.query.mean);
      scalars.emplace_back(layer + "tau_q_std", t.query.std);
    }
    if (t.value.count > 0) {
      scalars.emplace_back(layer + "tau_v_mean", t.value.mean);
      scalars.emplace_back(layer + "tau_v_std", t.value.std);
    }
    if (!t.sigma_alpha.empty()) {
      const auto [lo, hi] = std::minmax_element(t.sigma_alpha.begin(), t.sigma_alpha.end());
      scalars.emplace_back(layer + "sigma_alpha_min", *lo);
      scalars.emplace_back(layer + "sigma_alpha_max", *hi);
    }
  }
  RecordScalars(step, scalars);
}

}  // namespace kelvin::training
