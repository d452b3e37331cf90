// Fuzzing the planner: 1000 jobs of random --set overrides and number edits of two ready configs,
// each planned on 1 to 64 processes: an error or byte counts >= 0, with no plan running away
// (30 s). In child processes (tests/testing/isolated_cases.h), so one run reports every kind of
// failure, with a repro.
#include <gtest/gtest.h>

#include <cctype>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <limits>
#include <map>
#include <random>
#include <regex>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "launcher/config/job_config.h"
#include "tests/testing/files.h"
#include "tests/testing/isolated_cases.h"
#include "training/job/job_plan.h"
#include "training/job/job_setup.h"

namespace kelvin::training {
namespace {

namespace fs = std::filesystem;

struct BaseJob {
  std::string file;                    // under configs/
  std::vector<std::string> overrides;  // always applied first
  std::string text;
};

// Numeric fields, set to the values that break arithmetic and to those at and past the limits.
const std::vector<std::string> kNumericFields = {
    "model.architecture.hidden_size",
    "model.architecture.intermediate_size",
    "model.architecture.num_layers",
    "model.architecture.num_attention_heads",
    "model.architecture.num_key_value_heads",
    "model.architecture.vocab_size",
    "model.architecture.max_position_embeddings",
    "model.architecture.rope_scaling.original_max_position_embeddings",
    "training.steps",
    "training.micro_batch_size",
    "training.global_batch_size",
    "training.gradient_accumulation_steps",
    "training.seq_length",
    "training.eval_interval",
    "training.eval_steps",
    "training.threads",
    "checkpoint.interval_steps",
    "checkpoint.keep_last",
    "logging.log_interval",
    "lr_schedule.warmup_steps",
    "lr_schedule.decay_steps",
    "parallel.tensor_parallel",
    "parallel.pipeline_parallel",
    "parallel.virtual_pipeline_stages",
    "parallel.context_parallel",
    "parallel.data_parallel",
    "launch.nodes",
    "launch.processes_per_node",
    "launch.gpus_per_node",
    "launch.gpu_memory_gib"};
const std::vector<std::string> kHugeValues = {"2147483648", "1099511627776", "4611686018427387904",
                                              "-1", "0"};
const std::vector<std::string> kShapeValues = {
    "1",         "2",     "3",      "4",          "8",
    "16",        "32",    "64",     "128",        "4096",
    "8192",      "65536", "131072", "1048576",    "16777216",
    "134217728", "4095",  "131073", "2147483647", "9223372036854775807"};
const std::vector<std::string> kDoubleFields = {"model.architecture.rope_theta",
                                                "model.architecture.rms_norm_eps",
                                                "model.architecture.rope_scaling.factor",
                                                "model.architecture.rope_scaling.low_freq_factor",
                                                "model.architecture.rope_scaling.high_freq_factor",
                                                "logging.peak_tflops",
                                                "optimizer.lr"};
const std::vector<std::string> kDoubleValues = {"0",        "-1",  "1e308", "1e-308",
                                                "4.9e-324", "nan", "inf",   "1e-300",
                                                "989.4",    "0.5", "1e400", "-0"};
const std::vector<std::string> kSwitches = {
    "parallel.sequence_parallel=true", "parallel.sequence_parallel=false",
    "parallel.distributed_optimizer=true", "parallel.distributed_optimizer=false",
    "model.recompute_attention=true", "model.recompute_mlp=true", "model.recompute_attention=false",
    "model.ssa.enabled=true", "model.ssa.enabled=false", "model.ssa.weight_sharing=false",
    "model.ssa.token_aware=false", "model.architecture.tie_word_embeddings=true",
    "parallel.pipeline_schedule=INTERLEAVED_1F1B",
    "parallel.pipeline_schedule=ALL_FORWARD_ALL_BACKWARD", "parallel.pipeline_schedule=ONE_F_ONE_B",
    "model.precision=AUTO", "model.precision=BF16", "model.precision=FP32", "training.device=AUTO",
    "training.device=CUDA", "training.device=CPU", "model.preset=tiny", "model.preset=llama3.1-8b",
    "model.preset=llama3.2-1b", "model.preset=small-25m",
    "model.architecture.rope_scaling.rope_type=llama3",
    "model.architecture.rope_scaling.rope_type=default",
    // Several overrides at once ('|'): a complete llama3 RoPE scaling, or a model split 16 ways.
    "model.architecture.rope_scaling.rope_type=llama3|model.architecture.rope_scaling.factor=8|"
    "model.architecture.rope_scaling.low_freq_factor=1|"
    "model.architecture.rope_scaling.high_freq_factor=4|"
    "model.architecture.rope_scaling.original_max_position_embeddings=8192",
    "parallel.tensor_parallel=4|parallel.pipeline_parallel=4|parallel.sequence_parallel=false",
    "parallel.pipeline_schedule=INTERLEAVED_1F1B|parallel.virtual_pipeline_stages=2048|"
    "model.architecture.num_layers=4096"};

template <typename T>
const T& Any(const std::vector<T>& from, std::mt19937_64& rng) {
  return from[rng() % from.size()];
}

struct JobCase {
  std::string text;
  std::vector<std::string> overrides;
  std::string edit;  // the text edit, if any
  std::string Repro(const BaseJob& base) const {
    std::string repro = absl::StrCat("kelvin plan configs/", base.file);
    for (const std::string& o : overrides) absl::StrAppend(&repro, " --set '", o, "'");
    if (!edit.empty()) absl::StrAppend(&repro, "  [job text edited: ", edit, "]");
    return repro;
  }
};

JobCase MakeCase(const BaseJob& base, std::mt19937_64& rng) {
  JobCase c{base.text, base.overrides, ""};
  if (rng() % 4 == 0) {  // a number of the text becomes a huge one (or a line goes)
    const std::string& text = base.text;
    std::vector<size_t> numbers;  // offsets of numbers after ": "
    for (size_t at = text.find(": "); at != std::string::npos; at = text.find(": ", at + 1)) {
      if (at + 2 < text.size() &&
          (std::isdigit(static_cast<unsigned char>(text[at + 2])) || text[at + 2] == '-')) {
        numbers.push_back(at + 2);
      }
    }
    if (rng() % 3 != 0 && !numbers.empty()) {
      const size_t begin = Any(numbers, rng);
      const size_t end = std::min(text.find_first_not_of("-+.e0123456789", begin), text.size());
      const std::string& value = rng() % 2 ? Any(kHugeValues, rng) : Any(kShapeValues, rng);
      const size_t line = text.rfind('\n', begin) + 1;
      c.edit = absl::StrCat("\"", text.substr(line, end - line), "\" -> ", value);
      c.text = text.substr(0, begin) + value + text.substr(end);
    } else {  // a whole line goes
      const size_t at = rng() % text.size();
      const size_t line = at == 0 ? 0 : text.rfind('\n', at - 1) + 1;
      const size_t end = std::min(text.find('\n', at), text.size());
      c.edit = absl::StrCat("deleted line \"", text.substr(line, end - line), "\"");
      c.text = text.substr(0, line) + text.substr(end);
    }
  }
  // Half the jobs push numbers past what validation allows (their errors are tested); the other
  // half stay within the limits, up to them, to reach the planner with sizes of every scale.
  const bool within_limits = rng() % 2 == 0;
  for (int n = 1 + static_cast<int>(rng() % 4); n > 0; --n) {
    switch (rng() % 6) {
      case 0:
      case 1:
        c.overrides.push_back(
            absl::StrCat(Any(kNumericFields, rng), "=",
                         within_limits ? Any(kShapeValues, rng) : Any(kHugeValues, rng)));
        break;
      case 2:
      case 3:
        c.overrides.push_back(absl::StrCat(Any(kNumericFields, rng), "=", Any(kShapeValues, rng)));
        break;
      case 4:
        c.overrides.push_back(absl::StrCat(Any(kDoubleFields, rng), "=", Any(kDoubleValues, rng)));
        break;
      default:
        for (const absl::string_view o : absl::StrSplit(Any(kSwitches, rng), '|')) {
          c.overrides.emplace_back(o);
        }
        break;
    }
  }
  return c;
}

// Byte counts that are negative, or a total that is not their sum (wrapped).
std::vector<std::string> BadByteCounts(const models::MemoryPlan& plan) {
  const std::pair<const char*, int64_t> counts[] = {
      {"parameters", plan.parameters},
      {"master_weights", plan.master_weights},
      {"gradients", plan.gradients},
      {"optimizer_state", plan.optimizer_state},
      {"activations_per_layer", plan.activations_per_layer},
      {"activations", plan.activations},
      {"logits", plan.logits},
      {"backward_scratch", plan.backward_scratch},
      {"operator_scratch", plan.operator_scratch}};
  std::vector<std::string> bad;
  __int128 sum = 0;
  for (const auto& [name, bytes] : counts) {
    if (bytes < 0) bad.push_back(absl::StrCat(name, "=", bytes));
    if (name != std::string("activations_per_layer")) sum += bytes;
  }
  // A total beyond an int64 may saturate at 2^63 - 1 (core/saturating_size.h), never wrap.
  constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
  if (plan.Total() != (sum > kMax ? kMax : static_cast<int64_t>(sum))) {
    bad.push_back(absl::StrCat("Total()=", plan.Total(), " is not the sum of the categories"));
  }
  return bad;
}

// Plans job `c` on 1 to 64 processes, reporting what is wrong.
void PlanOnEveryCount(const BaseJob& base, const JobCase& c, bool cuda_if_auto,
                      const testing::Report& report) {
  // In a plan's text: a negative number, NaN or inf ("infs"), or one of 20 digits and more (a
  // float beyond an int64 cast to one).
  static const std::regex bad_number(R"((^|[ (])-[0-9]|\b(nan|inf)|[0-9]{20,})");
  try {
    const absl::StatusOr<config::JobConfig> job =
        launcher::ParseJobConfig(c.text, base.file, c.overrides);
    if (!job.ok()) {
      const std::string message(job.status().message());
      if (!message.starts_with(base.file) && !message.starts_with("override \"")) {
        report("a job error that names neither the file nor the override", message);
      }
      report("#rejected", "");
      return;
    }
    const absl::StatusOr<models::LlamaConfig> arch = ResolveModelArchitecture(job->model());
    if (!arch.ok()) {
      if (arch.status().message().empty()) report("an empty architecture error", "");
      report("#rejected by the architecture", "");
      return;
    }
    const config::TrainingConfig::Device device = job->training().device();
    const bool cuda = device == config::TrainingConfig::CUDA ||
                      (device == config::TrainingConfig::AUTO && cuda_if_auto);
    for (int processes = 1; processes <= 64; ++processes) {
      const std::string at =
          absl::StrCat("--processes ", processes, cuda ? " --device cuda" : " --device cpu");
      report("", at);
      const auto started = std::chrono::steady_clock::now();
      const absl::StatusOr<JobLayout> layout = PlanJobLayout(*job, *arch, processes, cuda);
      if (!layout.ok()) {
        if (layout.status().message().empty()) report("an empty PlanJobLayout error", at);
        continue;
      }
      report("#layouts", "");
      const absl::StatusOr<PeakMemory> peak = PlanPeakMemory(*job, *arch, *layout);
      if (peak.ok()) {
        if (const std::vector<std::string> bad = BadByteCounts(peak->plan); !bad.empty()) {
          report("PlanPeakMemory: a byte count below 0 or wrapped",
                 absl::StrCat(at, ": ", absl::StrJoin(bad, ", ")));
        }
        CheckPlanFitsGpu(*job, *layout, *peak).IgnoreError();
      } else if (peak.status().message().empty()) {
        report("an empty PlanPeakMemory error", at);
      }
      const CheckpointBytes checkpoint = PlanCheckpointBytes(*arch, *layout);
      if (checkpoint.total < 0 || checkpoint.largest_part < 0 ||
          checkpoint.largest_part > checkpoint.total) {
        report("PlanCheckpointBytes: a byte count below 0 or a part above the total",
               absl::StrCat(at, ": total ", checkpoint.total, ", largest part ",
                            checkpoint.largest_part));
      }
      const absl::StatusOr<std::string> text = FormatJobPlan(*job, *arch, *layout);
      std::smatch found;
      if (text.ok()) report("#plans", "");
      if (text.ok() && std::regex_search(*text, found, bad_number)) {
        report("FormatJobPlan: a negative, NaN, infinite or absurd number in the report",
               absl::StrCat(at, ": \"", found.str(), "\" in\n", *text));
      } else if (!text.ok() && text.status().message().empty()) {
        report("an empty FormatJobPlan error", at);
      }
      const double seconds =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
      // A hang guard, 10x the slowest plan seen (2.7 s: 4096 layers in 2048 virtual stages):
      // reported once per job, as its other counts would be as slow.
      if (seconds > 30) {
        report("a plan taking more than 30 s", absl::StrCat(at, ": ", seconds, " s"));
        return;
      }
    }
    report("#planned jobs", "");
  } catch (const std::exception& e) {
    report(absl::StrCat("an exception: ", e.what()), "");
  }
}

// The overrides set numbers to 0, -1, 2^31, 2^40, 2^62 and to each limit; the bases are
// configs/passkey_tiny_cpu.textproto and llama3_8b_ssa_finetune (model.preset=llama3.1-8b). Each
// job that parses goes through ResolveModelArchitecture, then PlanJobLayout, PlanPeakMemory,
// FormatJobPlan and PlanCheckpointBytes. KELVIN_PLAN_FUZZ_JOBS runs the first N jobs of the same
// sequence instead (test.sh's sanitizer stage: 250, each job's 64 plans taking ~0.1 s under ASan).
TEST(JobPlanFuzz, AcceptedJobsPlanCleanlyOnOneTo64Processes) {
  const fs::path configs = fs::path(testing::DemoJobPath()).parent_path();
  std::vector<BaseJob> bases = {
      {"passkey_tiny_cpu.textproto", {}, ""},
      {"llama3_8b_ssa_finetune.textproto", {"model.preset=llama3.1-8b"}, ""}};
  for (BaseJob& base : bases) {
    base.text = testing::FileBytes(configs / base.file);
    ASSERT_FALSE(base.text.empty()) << base.file;
    ASSERT_TRUE(launcher::ParseJobConfig(base.text, base.file, base.overrides).ok()) << base.file;
  }
  // Case i: its own generator, so that any case is made again alone (for its description).
  const auto make = [&bases](int i, const BaseJob*& base) {
    base = &bases[static_cast<size_t>(i) % bases.size()];
    std::mt19937_64 rng(20250214 + static_cast<uint64_t>(i));
    return MakeCase(*base, rng);
  };
  int job_count = 1000;
  if (const char* env = std::getenv("KELVIN_PLAN_FUZZ_JOBS"); env != nullptr) {
    ASSERT_TRUE(absl::SimpleAtoi(env, &job_count) && job_count >= 20 && job_count <= 100000)
        << "KELVIN_PLAN_FUZZ_JOBS=" << env << ": give a number of jobs from 20 to 100000";
  }
  const testing::IsolatedRun run = testing::RunIsolated(
      job_count,
      [&make](int i) {
        const BaseJob* base = nullptr;
        const JobCase c = make(i, base);
        return c.Repro(*base);
      },
      [&make](int i, const testing::Report& report) {
        const BaseJob* base = nullptr;
        const JobCase c = make(i, base);
        PlanOnEveryCount(*base, c, i % 2 == 1, report);
      },
      /*slow_seconds=*/300, /*hang_seconds=*/600);  // 27 s seen under ASan
  for (const auto& [kind, k] : run.failures) {
    ADD_FAILURE() << kind << " (" << k.count << " of " << job_count << " jobs); the first:\n"
                  << k.first;
  }
  std::string counts;
  for (const auto& [name, count] : run.counts) absl::StrAppend(&counts, ", ", count, " ", name);
  std::printf("JobPlanFuzz: %d jobs%s; the slowest took %.3f s on 64 process counts (job %d)\n",
              run.cases, counts.c_str(), run.slowest_seconds, run.slowest_case);
  // Every outcome is reached often (a fuzz test that only ever rejects tests nothing).
  const auto count = [&run](const std::string& name) {
    return run.counts.contains(name) ? run.counts.at(name) : 0;
  };
  EXPECT_GT(count("rejected"), job_count / 4);
  EXPECT_GT(count("planned jobs"), job_count / 10);
  EXPECT_GT(count("plans"), job_count / 10);
}

}  // namespace
}  // namespace kelvin::training
