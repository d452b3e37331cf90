// The command line of `kelvin eval`: the job's held-out sets (inference/job_evaluation.h), a corpus
// (inference/corpus_score.h) or the needle grid (needle_command.h), printed and written as JSON.
#include "launcher/commands/eval_command.h"

#include <cmath>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <utility>
#include <vector>

#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "core/io/atomic_file.h"
#include "core/logging.h"
#include "core/status.h"
#include "inference/corpus_score.h"
#include "inference/job_evaluation.h"
#include "inference/loss_by_position.h"
#include "launcher/commands/inference_options.h"
#include "launcher/commands/needle_command.h"
#include "launcher/commands/process_launch.h"
#include "launcher/config/job_config.h"
#include "training/job/job_setup.h"

namespace kelvin::launcher {

std::string FormatEvaluation(const inference::EvalStats& stats) {
  std::string line =
      absl::StrFormat("loss %.9f | perplexity %.6g | token accuracy %.2f%% (%d of %d tokens)",
                      stats.loss, std::exp(stats.loss), 100 * stats.token_accuracy,
                      stats.correct_tokens, stats.labelled_tokens);
  if (stats.retrieval_accuracy >= 0) {
    absl::StrAppendFormat(&line, " | passkey retrieval %.2f%%", 100 * stats.retrieval_accuracy);
  }
  return line;
}

std::string EvaluationsJson(const config::JobConfig& job,
                            const std::vector<inference::JobEvaluation>& evaluations) {
  const auto set = [](const std::string& name, const inference::EvalStats& stats) {
    nlohmann::ordered_json result = {{"name", name},
                                     {"loss", stats.loss},
                                     {"perplexity", std::exp(stats.loss)},
                                     {"token_accuracy", stats.token_accuracy},
                                     {"labelled_tokens", stats.labelled_tokens},
                                     {"correct_tokens", stats.correct_tokens}};
    if (stats.retrieval_accuracy >= 0) result["passkey_retrieval"] = stats.retrieval_accuracy;
    return result;
  };
  nlohmann::ordered_json root = {{"job", job.name()},
                                 {"evaluations", nlohmann::ordered_json::array()}};
  for (const inference::JobEvaluation& evaluation : evaluations) {
    nlohmann::ordered_json sets = nlohmann::ordered_json::array({set("main", evaluation.main)});
    for (const auto& [name, stats] : evaluation.also) sets.push_back(set(name, stats));
    root["evaluations"].push_back({{"step", evaluation.main.step}, {"sets", sets}});
  }
  return root.dump(2) + "\n";
}

namespace {

struct EvalArguments {
  JobArguments job;
  training::CheckpointChoice checkpoint;           // --step N, --best
  bool every_checkpoint = false;                   // --all
  std::string json;                                // --json FILE
  inference::ScoreOptions score;                   // --data / --text: scoring a corpus
  bool needle = false;                             // --needle
  NeedleOptions needle_grid;                       // its grid
  bool grid_options = false;                       // whether a valued option of the grid was given
  InferenceDevice device = InferenceDevice::kJob;  // --device (with --data, --text, --needle)
  std::string tokenizer;                           // --tokenizer DIR (with --text, --needle)
  // The model alone (JOB may be a model directory), not the job's held-out sets.
  bool scores() const { return !score.data.empty() || !score.text.empty() || needle; }
};

// The option mistakes no parse can see; the usage error's exit code.
std::optional<int> CheckEvalArguments(const EvalArguments& a) {
  if (const std::optional<int> error = CheckCheckpointChoice("eval", a.checkpoint)) return error;
  if (a.scores() && a.every_checkpoint) {
    return UsageError(
        "eval --all scores the job's held-out sets at every checkpoint; --data, --text and "
        "--needle evaluate one model");
  }
  if (a.needle && (!a.score.data.empty() || !a.score.text.empty())) {
    return UsageError("eval takes --needle or --data/--text, not both");
  }
  if (!a.score.data.empty() && !a.score.text.empty()) {
    return UsageError("eval scores one corpus: give --data PATH or --text FILE, not both");
  }
  if ((a.grid_options || a.needle_grid.temperatures) && !a.needle) {
    return UsageError(
        "--lengths, --depths, --task, --samples, --seed and --temperatures shape the needle grid: "
        "add "
        "--needle");
  }
  const bool corpus = !a.score.data.empty() || !a.score.text.empty();
  if (a.score.by_position.has_value() && !corpus) {
    return UsageError(
        "--by-position groups the losses of --data and --text by position: add one of them");
  }
  if (a.score.by_position.has_value() && a.score.seq_length > 0) {  // else once the model is read
    const absl::StatusOr<std::vector<int64_t>> starts =
        inference::PositionBucketStarts(*a.score.by_position, a.score.seq_length);
    if (!starts.ok()) return UsageError(std::string(starts.status().message()));
  }
  if ((a.score.seq_length > 0 || a.score.stride > 0) && !corpus) {
    return UsageError(
        "--seq-length and --stride shape the windows of --data and --text: add one of them (the "
        "held-out sets use training.seq_length, the needle grid its --lengths)");
  }
  if (a.device != InferenceDevice::kJob && !a.scores()) {
    return UsageError(
        "--device places --data, --text and --needle; the held-out sets are evaluated where the "
        "job trains (--set training.device=CUDA)");
  }
  if (!a.tokenizer.empty() && a.score.text.empty() && !a.needle) {
    return UsageError(
        "--tokenizer encodes the text of --text and --needle; --data and the held-out sets are "
        "token ids already");
  }
  if (a.every_checkpoint && !a.checkpoint.newest()) {
    return UsageError("eval takes one of --step N, --best and --all");
  }
  return std::nullopt;
}

// --json's file, checked before the (long) evaluation, not after it: not a directory, and its
// directory writable or creatable (nothing is made, so a failed evaluation leaves nothing).
absl::Status CheckJsonPath(const std::string& path) {
  std::error_code error;
  if (std::filesystem::is_directory(path, error)) {
    return absl::FailedPreconditionError(
        absl::StrCat("--json ", path, ": is a directory; give the path of a file"));
  }
  const std::filesystem::path parent = std::filesystem::path(path).parent_path();
  return training::CheckDirectoryCanBeWritten("--json's directory",
                                              parent.empty() ? "." : parent.string());
}

// --json's file, when one is asked for (`path` not empty): its directory made, `json` written
// atomically, then "wrote the <what> to <path>"; 0, or 1 after printing why it could not be
// written.
int WriteJsonResult(const std::string& path, const std::string& json, const char* what) {
  if (path.empty()) return 0;
  const std::filesystem::path parent = std::filesystem::path(path).parent_path();
  std::error_code error;
  if (!parent.empty()) std::filesystem::create_directories(parent, error);
  if (error) {
    return Fail(absl::PermissionDeniedError(
        absl::StrCat("--json ", path, ": cannot create its directory (", error.message(), ")")));
  }
  const absl::Status written = io::WriteFileAtomically(path, {json});
  if (!written.ok()) return Fail(written);
  KLOG(INFO) << "wrote the " << what << " to " << path;
  return 0;
}

void LogEvaluation(const config::JobConfig& job, const inference::JobEvaluation& eval) {
  KLOG_RANK0(INFO) << "eval of " << job.name() << " at step " << eval.main.step << " | "
                   << FormatEvaluation(eval.main);
  for (const auto& [name, stats] : eval.also) {
    KLOG_RANK0(INFO) << "eval of " << job.name() << " on " << name << " at step " << stats.step
                     << " | " << FormatEvaluation(stats);
  }
}

// The job's held-out sets, every rank.
int EvaluateHeldOut(const EvalArguments& a, const config::JobConfig& job, int world_rank) {
  if (!a.json.empty() && world_rank == 0) {
    if (const absl::Status usable = CheckJsonPath(a.json); !usable.ok()) return Fail(usable);
  }
  std::vector<inference::JobEvaluation> evaluations;
  if (a.every_checkpoint) {
    absl::StatusOr<std::vector<inference::JobEvaluation>> evals =
        inference::EvaluateEveryCheckpoint(job);
    if (!evals.ok()) return Fail(WithWorkingDirectory(evals.status(), job));
    evaluations = *std::move(evals);
  } else {
    absl::StatusOr<inference::JobEvaluation> eval =
        inference::EvaluateJobOnEverySet(job, a.checkpoint);
    if (!eval.ok()) return Fail(WithWorkingDirectory(eval.status(), job));
    evaluations.push_back(*std::move(eval));
  }
  for (const inference::JobEvaluation& eval : evaluations) LogEvaluation(job, eval);
  if (world_rank != 0) return 0;
  return WriteJsonResult(a.json, EvaluationsJson(job, evaluations), "evaluation");
}

// --needle on the model alone, split over the processes of a launcher (`tp`); rank 0 reports.
int EvaluateNeedle(const EvalArguments& a, const config::JobConfig& job,
                   const training::TrainingPlacement& placement, parallel::Communicator& tp) {
  const bool reports = tp.rank() == 0;
  if (!a.json.empty() && reports) {
    if (const absl::Status usable = CheckJsonPath(a.json); !usable.ok()) return Fail(usable);
  }
  NeedleOptions grid = a.needle_grid;
  grid.checkpoint = a.checkpoint;
  grid.tokenizer = a.tokenizer;
  const absl::StatusOr<NeedleReport> report = RunNeedle(job, grid, placement, &tp);
  if (!report.ok()) return Fail(WithWorkingDirectory(report.status(), RelativePathsOf(job)));
  if (!reports) return 0;
  KLOG(INFO) << FormatNeedle(job, *report);
  return WriteJsonResult(a.json, NeedleJson(job, *report), "needle grid");
}

// --data / --text: the corpus scored, the model on `placement`'s device split over the processes
// of a launcher (`tp`); rank 0 reports.
int EvaluateCorpus(const EvalArguments& a, const config::JobConfig& job,
                   const training::TrainingPlacement& placement, parallel::Communicator& tp) {
  const bool reports = tp.rank() == 0;
  if (!a.json.empty() && reports) {
    if (const absl::Status usable = CheckJsonPath(a.json); !usable.ok()) return Fail(usable);
  }
  inference::ScoreOptions score = a.score;
  score.checkpoint = a.checkpoint;
  score.tokenizer = a.tokenizer;
  const absl::StatusOr<inference::ScoreReport> report =
      inference::ScoreData(job, score, placement, &tp);
  if (!report.ok()) {
    std::vector<std::string> paths = RelativePathsOf(job);
    paths.insert(paths.end(), {a.score.data, a.score.text});
    return Fail(WithWorkingDirectory(report.status(), paths));
  }
  if (!reports) return 0;
  KLOG(INFO) << inference::FormatScore(job, *report);
  if (!report->by_position.empty()) KLOG(INFO) << inference::FormatLossByPosition(job, *report);
  return WriteJsonResult(a.json, inference::ScoreJson(job, *report), "score");
}

// The model alone: JOB is a job file or a Hugging Face model directory.
absl::StatusOr<config::JobConfig> ModelAloneJob(const EvalArguments& a) {
  return LoadForwardOnlyJob("eval --data, --text and --needle", a.job);
}

int Eval(const EvalArguments& a) {
  if (const std::optional<int> error = CheckEvalArguments(a)) return *error;
  if (a.scores()) {
    if (const std::optional<int> error = CheckNoSetOnModelDirectory(a.job)) return *error;
  }
  if (a.needle) {
    return RunSplitOverProcesses(
        "eval --needle", a.device, [&a] { return ModelAloneJob(a); },
        [&a](const config::JobConfig& job, const training::TrainingPlacement& placement,
             parallel::Communicator& tp) { return EvaluateNeedle(a, job, placement, tp); });
  }
  if (a.scores()) {
    return RunSplitOverProcesses(
        "eval --data / --text", a.device, [&a] { return ModelAloneJob(a); },
        [&a](const config::JobConfig& job, const training::TrainingPlacement& placement,
             parallel::Communicator& tp) { return EvaluateCorpus(a, job, placement, tp); });
  }
  return RunOnEveryRank(a.job, [&a](const config::JobConfig& job, int world_rank) {
    return EvaluateHeldOut(a, job, world_rank);
  });
}

// --by-position's value: one integer, the buckets' width, or integers separated by commas, the
// buckets' starts (their rules are inference::PositionBucketStarts', checked against the window).
std::string ParsePositionBuckets(const std::string& text, inference::ScoreOptions& score) {
  std::vector<int64_t> values;
  for (const absl::string_view part : absl::StrSplit(text, ',')) {
    int64_t value = 0;
    if (!absl::SimpleAtoi(part, &value)) {
      return std::string(
          "give a bucket width in positions (256) or bucket starts separated by commas "
          "(0,1024,4096)");
    }
    values.push_back(value);
  }
  score.by_position = values.size() == 1
                          ? inference::PositionBuckets::OfWidth(values[0])
                          : inference::PositionBuckets::StartingAt(std::move(values));
  return std::string();
}

// The options of the needle grid (--needle).
void AddNeedleOptions(CommandLine& line, CLI::App* command, EvalArguments& a) {
  NeedleOptions& grid = a.needle_grid;
  line.AddFlag(command, "--needle", "instead: the needle grid by generation (lengths x depths)",
               a.needle);
  line.AddValue(command, "--lengths", "1024,2048", "context lengths in tokens separated by commas",
                "the grid's lengths (default 1024, 2048, ... up to the model's)",
                [&a, &grid](const std::string& text) {
                  a.grid_options = true;
                  for (const absl::string_view part : absl::StrSplit(text, ',')) {
                    int64_t length = 0;
                    if (!absl::SimpleAtoi(part, &length) || length < 1) {
                      return std::string("give token counts >= 1 separated by commas");
                    }
                    grid.lengths.push_back(length);
                  }
                  return std::string();
                });
  line.AddValue(command, "--depths", "0,0.5,1", "fractions in [0, 1] separated by commas",
                "the grid's key depths (default 0, 0.1, ..., 1)",
                [&a, &grid](const std::string& text) {
                  a.grid_options = true;
                  for (const absl::string_view part : absl::StrSplit(text, ',')) {
                    double depth = 0;
                    if (!absl::SimpleAtod(part, &depth) || !(depth >= 0 && depth <= 1)) {
                      return std::string("give fractions in [0, 1] separated by commas");
                    }
                    grid.depths.push_back(depth);
                  }
                  return std::string();
                });
  line.AddValue(command, "--task", "passkey", "passkey, multikey, multivalue or vartrack",
                "the retrieval task (default passkey; docs/evaluation.md describes each)",
                [&a, &grid](const std::string& text) {
                  a.grid_options = true;
                  const absl::StatusOr<data::RetrievalTask> task = data::ParseRetrievalTask(text);
                  if (!task.ok()) {
                    return std::string("the tasks are passkey, multikey, multivalue and vartrack");
                  }
                  grid.task = *task;
                  return std::string();
                });
  line.AddValue(command, "--samples", "N", "a count >= 1", "samples per cell (default 10)",
                [&a, &grid](const std::string& text) {
                  a.grid_options = true;
                  return ParseInteger(text, 1, "a count >= 1", grid.samples, kMaxNeedleSamples);
                });
  line.AddValue(command, "--seed", "S", "an integer >= 0", "the samples' seed (default 0)",
                [&a, &grid](const std::string& text) {
                  a.grid_options = true;
                  int64_t seed = 0;
                  const std::string problem = ParseInteger(text, 0, "an integer >= 0", seed);
                  grid.seed = static_cast<uint64_t>(seed);
                  return problem;
                });
  line.AddFlag(command, "--temperatures",
               "histograms of an SSA model's temperatures on the prompts", grid.temperatures);
}

}  // namespace

void AddEvalCommand(CommandLine& line) {
  auto a = std::make_shared<EvalArguments>();
  CLI::App* command = line.AddCommand(
      "eval", "the held-out loss of the job's model, or any model's on a corpus",
      "The model: the latest checkpoint in checkpoint.dir, else model.hf_dir or the seed's\n"
      "initialisation. Losses in full precision with perplexity (and passkey retrieval). With\n"
      "--data, --text or --needle, JOB may be a Hugging Face model directory or a job file of\n"
      "only its model fields, run on --device (f32 on the CPU, bf16 on CUDA); --needle runs one\n"
      "process, --data and --text split the model over mpirun's processes (tensor parallelism,\n"
      "a GPU each); every token of the corpus is scored once, in windows of --seq-length or\n"
      "sliding at --stride; a --data PREFIX with a PREFIX_loss_mask counts only its targets;\n"
      "--by-position adds the loss per bucket of positions in the window.",
      [a] { return Eval(*a); });
  AddJobArguments(line, command, a->job);
  AddCheckpointChoice(line, command, a->checkpoint);
  line.AddFlag(command, "--all", "each complete checkpoint of checkpoint.dir in turn, oldest first",
               a->every_checkpoint);
  line.AddText(command, "--json", "FILE", "the file to write the result to",
               "the results as JSON too", a->json);
  line.AddText(command, "--data", "PATH", "the file to score",
               "instead: that corpus (Megatron prefix, .int32/.uint16 file)", a->score.data);
  line.AddText(command, "--text", "FILE", "the file to score",
               "instead: that text (with the model's tokenizer)", a->score.text);
  line.AddValue(command, "--seq-length", "N", "a window in tokens >= 1",
                "the scoring window (default training.seq_length)", [a](const std::string& text) {
                  return ParseInteger(text, 1, "a token count >= 1", a->score.seq_length);
                });
  line.AddValue(command, "--stride", "S", "a stride in tokens >= 1",
                "score a sliding window at this stride (default: the window)",
                [a](const std::string& text) {
                  return ParseInteger(text, 1, "a token count >= 1", a->score.stride);
                });
  line.AddValue(command, "--by-position", "B",
                "a bucket width in positions (256) or bucket starts separated by commas "
                "(0,1024,4096)",
                "the loss by position in the window too: buckets of B positions, or starting at "
                "the listed positions",
                [a](const std::string& text) { return ParsePositionBuckets(text, a->score); });
  AddNeedleOptions(line, command, *a);
  AddTokenizerOption(line, command, a->tokenizer);
  AddDeviceOption(line, command, a->device);
}

}  // namespace kelvin::launcher
