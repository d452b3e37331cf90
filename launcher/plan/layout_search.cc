// Enumerating, planning and ordering a job's layouts (see layout_search.h).
#include "launcher/plan/layout_search.h"

#include <algorithm>
#include <tuple>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "core/status.h"
#include "training/job/job_setup.h"

namespace kelvin::launcher {
namespace {

constexpr double kGiB = 1 << 30;

// The job's parallel section for tensor x context x pipeline (x `chunks` per stage) x data.
config::ParallelConfig ParallelSection(const config::ParallelConfig& job_parallel, int tensor,
                                       int context, int pipeline, int chunks, int data) {
  config::ParallelConfig p = job_parallel;
  p.set_tensor_parallel(tensor);
  p.set_context_parallel(context);
  p.set_pipeline_parallel(pipeline);
  p.set_virtual_pipeline_stages(chunks);
  p.set_data_parallel(data);
  p.set_sequence_parallel(tensor > 1);
  p.set_distributed_optimizer(data * context > 1);
  p.set_pipeline_schedule(chunks > 1 ? config::ParallelConfig::INTERLEAVED_1F1B
                                     : config::ParallelConfig::ONE_F_ONE_B);
  return p;
}

int ModelParallel(const LayoutCandidate& c) {
  const parallel::GridSpec& g = c.layout.spec;
  return g.tensor_parallel * g.context_parallel * g.pipeline_parallel;
}

// The order of layout_search.h: true when `a` comes before `b`.
bool Better(const LayoutCandidate& a, const LayoutCandidate& b) {
  const auto key = [](const LayoutCandidate& c) {
    return std::make_tuple(!c.fits, c.step_time.step_seconds, ModelParallel(c),
                           !c.tensor_parallel_in_node, c.pipeline_bubble, c.peak.plan.Total(),
                           training::LayoutName(c.layout.spec, c.layout.distributed_optimizer));
  };
  return key(a) < key(b);
}

}  // namespace

absl::StatusOr<LayoutSearch> SearchLayouts(const config::JobConfig& job,
                                           const models::LlamaConfig& arch, int world_size,
                                           bool cuda) {
  KELVIN_RETURN_IF_ERROR(training::CheckSequenceLength(job, arch));
  LayoutSearch search;
  const int node_size = job.launch().processes_per_node();
  for (int tensor = 1; tensor <= world_size; tensor *= 2) {
    for (int context = 1; tensor * context <= world_size; context *= 2) {
      for (int pipeline = 1; tensor * context * pipeline <= world_size; ++pipeline) {
        const int model_parallel = tensor * context * pipeline;
        if (world_size % model_parallel != 0) continue;
        for (const int chunks : pipeline > 1 ? std::vector<int>{1, 2} : std::vector<int>{1}) {
          LayoutCandidate c;
          config::JobConfig candidate_job = job;
          c.parallel = ParallelSection(job.parallel(), tensor, context, pipeline, chunks,
                                       world_size / model_parallel);
          *candidate_job.mutable_parallel() = c.parallel;
          // A split the job cannot run (its layout, or its pipeline schedule with too few
          // micro-batches) is left out and counted, with its reason.
          const auto invalid = [&search](const absl::Status& status) {
            ++search.invalid;
            const std::string reason(status.message());
            if (std::find(search.invalid_reasons.begin(), search.invalid_reasons.end(), reason) ==
                search.invalid_reasons.end()) {
              search.invalid_reasons.push_back(reason);
            }
          };
          absl::StatusOr<training::JobLayout> layout =
              training::PlanJobLayout(candidate_job, arch, world_size, cuda);
          if (!layout.ok()) {
            invalid(layout.status());
            continue;
          }
          c.layout = *layout;
          absl::StatusOr<training::PeakMemory> peak =
              training::PlanPeakMemory(candidate_job, arch, c.layout);
          if (!peak.ok()) {
            invalid(peak.status());
            continue;
          }
          c.peak = *std::move(peak);
          const parallel::GridSpec& g = c.layout.spec;
          const double p = g.pipeline_parallel;
          c.pipeline_bubble = (p - 1) / (g.virtual_pipeline_stages *
                                             static_cast<double>(g.gradient_accumulation_steps) +
                                         p - 1);
          c.tensor_parallel_in_node = node_size <= 0 || tensor <= node_size;
          c.fits = training::CheckPlanFitsGpu(candidate_job, c.layout, c.peak).ok();
          c.step_time = PredictStepTime(candidate_job, arch, c.layout, cuda);
          search.candidates.push_back(std::move(c));
        }
      }
    }
  }
  std::sort(search.candidates.begin(), search.candidates.end(), Better);
  return search;
}

std::vector<std::string> LayoutOverrides(const LayoutCandidate& c) {
  const config::ParallelConfig& p = c.parallel;
  return {
      absl::StrCat("parallel.tensor_parallel=", p.tensor_parallel()),
      absl::StrCat("parallel.sequence_parallel=", p.sequence_parallel() ? "true" : "false"),
      absl::StrCat("parallel.context_parallel=", p.context_parallel()),
      absl::StrCat("parallel.pipeline_parallel=", p.pipeline_parallel()),
      absl::StrCat("parallel.virtual_pipeline_stages=", p.virtual_pipeline_stages()),
      absl::StrCat("parallel.pipeline_schedule=",
                   config::ParallelConfig::PipelineSchedule_Name(p.pipeline_schedule())),
      absl::StrCat("parallel.data_parallel=", p.data_parallel()),
      absl::StrCat("parallel.distributed_optimizer=", p.distributed_optimizer() ? "true" : "false"),
  };
}

std::string FormatLayoutSearch(const config::JobConfig& job, const LayoutSearch& search,
                               int world_size, int shown) {
  const int64_t gpu_gib = job.launch().gpu_memory_gib();
  const config::ModelConfig& m = job.model();
  const bool timed =
      !search.candidates.empty() && search.candidates.front().step_time.not_predicted.empty();
  std::string out = absl::StrFormat(
      "layouts of job %s on %d processes, keeping micro-batch %d x %d tokens, "
      "recompute_attention %s, recompute_mlp %s%s:\n",
      job.name(), world_size, job.training().micro_batch_size(), job.training().seq_length(),
      m.recompute_attention() ? "on" : "off", m.recompute_mlp() ? "on" : "off",
      gpu_gib > 0 ? absl::StrFormat("; fit: largest rank <= launch.gpu_memory_gib=%d", gpu_gib)
                  : "");
  absl::StrAppendFormat(&out, "  %3s  %-32s %14s  %-4s  %-15s%s\n", "#", "layout", "largest rank",
                        "fits", "pipeline bubble",
                        timed ? absl::StrFormat("  %10s  %14s", "step", "tokens/s/device") : "");
  int fitting = 0;
  for (const LayoutCandidate& c : search.candidates) fitting += c.fits ? 1 : 0;
  for (int i = 0; i < std::min<int>(shown, static_cast<int>(search.candidates.size())); ++i) {
    const LayoutCandidate& c = search.candidates[static_cast<size_t>(i)];
    const std::string bubble = c.layout.spec.pipeline_parallel > 1
                                   ? absl::StrFormat("%.1f%%", 100 * c.pipeline_bubble)
                                   : "-";
    const StepTime& t = c.step_time;
    const std::string time = timed ? absl::StrFormat("  %8.1f ms  %14.0f", 1e3 * t.step_seconds,
                                                     t.tokens_per_second_per_device)
                                   : "";
    absl::StrAppend(
        &out,
        absl::StrFormat("  %3d  %-32s %10.2f GiB  %-4s  ", i + 1,
                        training::LayoutName(c.layout.spec, c.layout.distributed_optimizer) +
                            (c.tensor_parallel_in_node ? "" : " (tp across nodes)"),
                        static_cast<double>(c.peak.plan.Total()) / kGiB, c.fits ? "yes" : "no"),
        timed ? absl::StrFormat("%-15s", bubble) : bubble, time, "\n");
  }
  if (static_cast<int>(search.candidates.size()) > shown) {
    absl::StrAppend(&out, "  ... ", search.candidates.size() - static_cast<size_t>(shown),
                    " more\n");
  }
  absl::StrAppendFormat(&out, "%d of %d valid layouts fit", fitting, search.candidates.size());
  if (search.invalid > 0) {
    absl::StrAppend(&out, "; ", search.invalid,
                    search.invalid == 1 ? " other split is" : " other splits are",
                    " invalid for this job, e.g. ", search.invalid_reasons.front());
  }
  absl::StrAppend(
      &out, "\norder: fits, then ",
      timed ? "the shortest predicted step (launch.hardware; kelvin plan with the first's flags "
              "prints its breakdown), then "
            : "",
      "the least model parallelism (tensor x context x pipeline: the fewest activations "
      "exchanged per token), tensor parallel inside a node (launch.processes_per_node=",
      job.launch().processes_per_node(),
      "), the smallest pipeline bubble ((p-1)/(v m + p-1) of a step idle), the most headroom\n");
  if (!search.candidates.empty() && search.candidates.front().fits) {
    std::vector<std::string> flags;
    for (const std::string& o : LayoutOverrides(search.candidates.front())) {
      flags.push_back("--set " + o);
    }
    absl::StrAppend(&out, "the first: ", absl::StrJoin(flags, " "), "\n");
  }
  if (!timed && !search.candidates.empty()) {
    absl::StrAppend(&out, search.candidates.front().step_time.not_predicted, "\n");
  }
  return out;
}

}  // namespace kelvin::launcher
