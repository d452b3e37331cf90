// RunMetrics: what a training run reports as it goes: the progress line (and the SSA temperature
// lines) in the log, and each step's and evaluation's scalars in logging.tensorboard_dir and
// logging.metrics_file (world rank 0's sinks; a failed write turns that sink off).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "configs/kelvin.pb.h"
#include "core/device.h"
#include "inference/held_out_evaluation.h"
#include "models/llama/llama_config.h"
#include "parallel/comm/communicator.h"
#include "training/metrics/metrics_file.h"
#include "training/metrics/tensorboard_writer.h"
#include "training/training_step.h"

namespace kelvin::training {

class RunMetrics {
 public:
  // Opens logging.tensorboard_dir on world rank 0 (`logging_rank`); `job` and `arch` outlive the
  // metrics. `world_size` and `data_parallel`: the layout's processes and replicas; `device`: the
  // training device, whose allocator's peak the lines report.
  static absl::StatusOr<std::unique_ptr<RunMetrics>> Create(const config::JobConfig& job,
                                                            const models::LlamaConfig& arch,
                                                            int world_size, int data_parallel,
                                                            bool logging_rank, Device device);

  // logging.metrics_file on world rank 0, keeping the records up to
  // `resumed_steps` (training only: `kelvin eval` builds a Trainer too and must leave the file
  // alone). Collective over `world`.
  absl::Status OpenMetricsFile(int64_t resumed_steps, parallel::Communicator& world);

  // Whether `step` (0-based) writes a progress line: every logging.log_interval-th and the last.
  bool LogsProgress(int64_t step) const;
  // Whether `step`'s SSA temperature statistics are reported (StepStats::temperatures, else
  // empty): every step's with a metrics file or TensorBoard, else those of the progress lines
  // (model.ssa.log_statistics). The same on every rank (the statistics are merged over them).
  bool ReportsTemperatures(int64_t step) const;

  // The step's scalars (loss, lr, grad norm, throughput, communication share, SSA temperatures)
  // to the sinks; a no-op without them.
  void RecordStep(const StepStats& stats);
  // The progress line of `stats` (and, with model.ssa.log_statistics, one line per layer):
  // `tokens` of every replica trained in `elapsed` seconds since the run's step `start_step`.
  void LogProgress(const StepStats& stats, int64_t start_step, int64_t tokens,
                   double elapsed) const;
  // An evaluation's line and scalars; `name` "": the main evaluation (eval/loss, ...), else
  // data.also_eval's (eval/<name>/loss).
  void RecordEvaluation(const inference::EvalStats& eval, const std::string& name);

 private:
  RunMetrics(const config::JobConfig& job, const models::LlamaConfig& arch, int world_size,
             int data_parallel, bool logging_rank, Device device)
      : job_(job),
        arch_(arch),
        world_size_(world_size),
        data_parallel_(data_parallel),
        logging_rank_(logging_rank),
        device_(device) {}
  // Model FLOPs per second and process (models/llama/model_flops.h) at a global rate of
  // `tokens_per_second`, and their share of logging.peak_tflops (0 without one).
  struct Throughput {
    double tflops_per_process = 0;
    double mfu = 0;
  };
  Throughput ThroughputOf(double tokens_per_second) const;
  // The most tensor memory this process has held at once on the training device (the allocator's
  // peak), in GiB.
  double PeakMemoryGiB() const;
  // Scalars of `step` to TensorBoard and the metrics file; a failed write (rank 0's alone) is a
  // warning and turns that sink off, so that no rank stops while the others wait for it.
  void RecordScalars(int64_t step, const std::vector<std::pair<std::string, double>>& scalars);

  const config::JobConfig& job_;
  const models::LlamaConfig& arch_;
  int world_size_ = 1;
  int data_parallel_ = 1;
  bool logging_rank_ = false;  // world rank 0, which holds the sinks
  Device device_;
  std::unique_ptr<TensorBoardWriter> tensorboard_;  // on world rank 0 with tensorboard_dir
  std::unique_ptr<MetricsFile> metrics_file_;       // on world rank 0 with metrics_file
};

}  // namespace kelvin::training
