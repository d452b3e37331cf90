// The `kelvin` command: `kelvin train|plan|launch|eval|convert|generate JOB.textproto [--set
// path=value]`, and `kelvin prepare-data SAMPLES.jsonl --out PREFIX`. train, eval and convert run
// one process or, under mpirun/srun, one rank (MPI is initialised when the launcher's environment
// names more than one process); plan prints the job's layout and memory per rank without training;
// launch checks the same and writes (--submit: submits) its SLURM batch job. Every user error ends
// here as one message on stderr and exit code 1 (2 for usage errors); with several processes a rank
// that fails aborts the whole job, so none waits forever. train and eval take their ranks from MPI
// (initialised in every case), checked against the launcher's variables.
#include <mpi.h>
#include <unistd.h>

#include <algorithm>
#include <climits>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "core/build_info.h"
#include "core/io/atomic_file.h"
#include "core/io/regular_file.h"
#include "core/logging.h"
#include "core/status.h"
#include "core/strings/did_you_mean.h"
#include "data/sft/jsonl_samples.h"
#include "launcher/commands/convert_command.h"
#include "launcher/commands/eval_command.h"
#include "launcher/commands/generate_command.h"
#include "launcher/commands/needle_command.h"
#include "launcher/commands/score_command.h"
#include "launcher/config/job_config.h"
#include "launcher/plan/layout_search.h"
#include "launcher/slurm/slurm_batch.h"
#include "parallel/rank_discovery.h"
#include "training/checkpoint/preemption.h"
#include "training/job/job_plan.h"
#include "training/job/job_setup.h"
#include "training/run_directory.h"
#include "training/trainer.h"

namespace {

using kelvin::launcher::WithWorkingDirectory;

constexpr const char* kUsage =
    "usage: kelvin COMMAND JOB.textproto [OPTIONS] [--set field.path=value ...]\n"
    "  train   train the job: one process, or one rank under mpirun / srun\n"
    "  plan    print the job's layout and memory per rank, without training; options:\n"
    "            --processes N   world size to plan for (default: launch.nodes x\n"
    "                            launch.processes_per_node)\n"
    "            --device cpu|cuda  (default: training.device; AUTO: cuda when\n"
    "                            launch.gpus_per_node > 0)\n"
    "            --layouts       instead: every valid tensor x context x pipeline x data\n"
    "                            split of the processes with its largest rank's memory,\n"
    "                            those fitting launch.gpu_memory_gib first, the least\n"
    "                            model parallelism first, and the --set flags of the best\n"
    "  launch  check the layout on launch.nodes x processes_per_node, then write the SLURM\n"
    "          batch script and the resolved job into launch.run_dir; --submit: also sbatch it\n"
    "  eval    the held-out loss (and passkey retrieval) of the job's model: its latest\n"
    "          checkpoint in checkpoint.dir, else model.hf_dir or the seed's initialisation;\n"
    "          --step N or --best (as for convert): that checkpoint instead; --all: each\n"
    "          complete checkpoint of checkpoint.dir in turn, oldest first; losses in full\n"
    "          precision with perplexity; --json FILE: the results as JSON too;\n"
    "          --data PATH (Megatron prefix, .int32/.uint16 file) | --text FILE: that corpus\n"
    "          instead (one process; JOB may be a Hugging Face model directory), every token\n"
    "          scored once in windows of --seq-length N, or sliding at --stride S\n"
    "  convert --out DIR: the latest checkpoint of checkpoint.dir as a Hugging Face directory\n"
    "          (one process, no GPU, whatever layout wrote the checkpoint); options:\n"
    "            --step N        the checkpoint of step N instead\n"
    "            --best          the checkpoint of the lowest evaluation loss instead\n"
    "                            (kept by checkpoint.keep_best)\n"
    "            --dtype f32|bf16  of the written weights (default f32: the exact masters)\n"
    "  generate  text from the job's model (its checkpoint, else model.hf_dir; one process on\n"
    "          the CPU with a KV cache), one JSON line per prompt; options:\n"
    "            --prompt TEXT (repeatable) | --prompt-file F (a prompt per line) |\n"
    "            --tokens 1,2,3 (repeatable)   text needs model.hf_dir's tokenizer.json\n"
    "            --max-new-tokens N (64)  --temperature T (0: greedy)  --top-k K  --top-p P\n"
    "            --seed S  --stop TEXT  --logprobs  --step N | --best (as for convert)\n"
    "            --batch-size N (8): prompts decoded together\n"
    "  prepare-data SAMPLES.jsonl --out PREFIX: fine-tuning samples (one JSON object per line:\n"
    "          \"input_ids\", optional \"labels\" with -100 where there is no loss, or\n"
    "          \"loss_mask\") into the Megatron indexed dataset PREFIX and its loss mask\n"
    "          PREFIX_loss_mask; prints the job's data section for them; options:\n"
    "            --tokenizer DIR  the model directory's tokenizer.json: lines may also be\n"
    "                            {\"text\": ...} (BOS + text + eos, loss on all),\n"
    "                            {\"prompt\": ..., \"completion\": ...} (loss on the completion)\n"
    "                            or {\"messages\": [{\"role\", \"content\"}, ...]} (the model's\n"
    "                            chat format, llama3 or chatml; loss on assistant turns)\n"
    "  train and eval run one process, or one rank each under mpirun / srun with the job's\n"
    "  layout (checkpoints resume under any layout)\n"
    "  e.g. kelvin train configs/passkey_tiny_cpu.textproto --set optimizer.lr=1e-3\n"
    "  kelvin --version: Kelvin's version and commit, and its libraries' versions\n"
    "  kelvin --help: this text\n"
    "exit codes: 0 done, 1 failed, 2 bad command line, 3 stopped by SIGTERM, SIGUSR1 or a first\n"
    "  Ctrl-C (SIGINT) after saving a checkpoint (running the job again resumes)\n";

// The command line after the command and the job: overrides and the commands' options.
struct Arguments {
  std::string command, job_path;
  std::vector<std::string> overrides;
  int processes = 0;                                  // plan --processes (0: from launch.*)
  std::string device;                                 // plan --device: "", "cpu" or "cuda"
  bool layouts = false;                               // plan --layouts
  bool submit = false;                                // launch --submit
  std::optional<std::string> out;                     // convert and prepare-data --out
  std::string tokenizer;                              // prepare-data --tokenizer
  kelvin::training::CheckpointChoice checkpoint;      // convert and eval --step, --best
  bool every_checkpoint = false;                      // eval --all
  kelvin::DType convert_dtype = kelvin::DType::kF32;  // convert --dtype
  kelvin::launcher::GenerateOptions generate;         // generate's prompts and sampling
  std::string prompt_file;                            // generate --prompt-file
  std::string eval_json;                              // eval --json
  kelvin::launcher::ScoreOptions score;               // eval --data / --text: scoring a corpus
  bool needle = false;                                // eval --needle
  kelvin::launcher::NeedleOptions needle_grid;        // its grid
  // eval of the model alone (one process; JOB may be a model directory)
  bool scores() const { return !score.data.empty() || !score.text.empty() || needle; }
};

int Usage(const std::string& problem) {
  std::fprintf(stderr, "kelvin: %s\n%s", problem.c_str(), kUsage);
  return 2;
}

// Exit codes: 0 done, 1 failed, 2 bad command line, 3 stopped by a preemption signal after saving
// its checkpoint (every rank agreed; running the job again resumes).
constexpr int kExitPreempted = 3;

// 1 (or kExitPreempted) after printing `status` (every rank prints its own failure: ranks can
// fail differently).
int Fail(const absl::Status& status) {
  std::fprintf(stderr, "kelvin: %s\n", std::string(status.message()).c_str());
  return status.code() == absl::StatusCode::kCancelled ? kExitPreempted : 1;
}

int Train(const kelvin::config::JobConfig& job, int world_rank) {
  KLOG_RANK0(INFO) << "kelvin " << kelvin::KelvinVersion() << "; " << kelvin::LibraryVersions();
  // Before the run directory is written (every rank finds the same: none waits for another).
  if (const absl::Status outputs = kelvin::training::CheckOutputLocations(job); !outputs.ok()) {
    return Fail(kelvin::launcher::WithWorkingDirectory(outputs, job));
  }
  if (world_rank == 0) {  // the whole resolved job goes to the run directory, not the log
    const absl::StatusOr<std::string> written =
        kelvin::training::StartRunDirectory(job, kelvin::launcher::FormatResolvedConfig(job));
    if (written.ok()) {
      KLOG(INFO) << "job " << job.name() << ": its resolved config is " << *written;
    } else {
      KLOG(WARNING) << "job " << job.name() << ": " << written.status()
                    << "; its resolved config follows:\n"
                    << kelvin::launcher::FormatResolvedConfig(job);
    }
  }
  absl::StatusOr<std::unique_ptr<kelvin::training::Trainer>> trainer =
      kelvin::training::Trainer::Create(job);
  absl::Status status = trainer.ok() ? (*trainer)->Run() : trainer.status();
  return status.ok() ? 0 : Fail(kelvin::launcher::WithWorkingDirectory(status, job));
}

void LogEvaluation(const kelvin::config::JobConfig& job,
                   const kelvin::launcher::JobEvaluation& eval) {
  KLOG_RANK0(INFO) << "eval of " << job.name() << " at step " << eval.main.step << " | "
                   << kelvin::launcher::FormatEvaluation(eval.main);
  for (const auto& [name, stats] : eval.also) {
    KLOG_RANK0(INFO) << "eval of " << job.name() << " on " << name << " at step " << stats.step
                     << " | " << kelvin::launcher::FormatEvaluation(stats);
  }
}

// eval --json's file: its directory made before the (long) evaluation, not after it.
absl::Status MakeJsonDirectory(const std::string& path) {
  const std::filesystem::path parent = std::filesystem::path(path).parent_path();
  std::error_code error;
  if (!parent.empty()) std::filesystem::create_directories(parent, error);
  if (!error) return absl::OkStatus();
  return absl::PermissionDeniedError(
      absl::StrCat("--json ", path, ": cannot create its directory (", error.message(), ")"));
}

// eval --json's file, when one is asked for (`path` not empty): `json` written atomically, then
// "wrote the <what> to <path>"; 0, or 1 after printing why it could not be written.
int WriteJsonResult(const std::string& path, const std::string& json, const char* what) {
  if (path.empty()) return 0;
  const absl::Status written = kelvin::io::WriteFileAtomically(path, {json});
  if (!written.ok()) return Fail(written);
  KLOG(INFO) << "wrote the " << what << " to " << path;
  return 0;
}

int Eval(const kelvin::config::JobConfig& job, const Arguments& a, int world_rank) {
  if (!a.eval_json.empty() && world_rank == 0) {
    if (const absl::Status made = MakeJsonDirectory(a.eval_json); !made.ok()) return Fail(made);
  }
  std::vector<kelvin::launcher::JobEvaluation> evaluations;
  if (a.every_checkpoint) {
    absl::StatusOr<std::vector<kelvin::launcher::JobEvaluation>> evals =
        kelvin::launcher::EvaluateEveryCheckpoint(job);
    if (!evals.ok()) return Fail(kelvin::launcher::WithWorkingDirectory(evals.status(), job));
    evaluations = *std::move(evals);
  } else {
    absl::StatusOr<kelvin::launcher::JobEvaluation> eval =
        kelvin::launcher::EvaluateJobOnEverySet(job, a.checkpoint);
    if (!eval.ok()) return Fail(kelvin::launcher::WithWorkingDirectory(eval.status(), job));
    evaluations.push_back(*std::move(eval));
  }
  for (const kelvin::launcher::JobEvaluation& eval : evaluations) LogEvaluation(job, eval);
  if (world_rank != 0) return 0;
  return WriteJsonResult(a.eval_json, kelvin::launcher::EvaluationsJson(job, evaluations),
                         "evaluation");
}

// generate: the prompts (with --prompt-file's lines), then one JSON line per prompt on stdout.
int Generate(const kelvin::config::JobConfig& job, Arguments a) {
  if (!a.prompt_file.empty()) {
    const absl::StatusOr<std::string> text =
        kelvin::io::ReadRegularFile(a.prompt_file, "prompt file", uint64_t{1} << 30);
    if (!text.ok()) return Fail(WithWorkingDirectory(text.status(), {a.prompt_file}));
    for (const absl::string_view line : absl::StrSplit(*text, '\n', absl::SkipWhitespace())) {
      a.generate.prompts.emplace_back(line);
    }
  }
  a.generate.checkpoint = a.checkpoint;
  const absl::StatusOr<std::vector<std::string>> lines =
      kelvin::launcher::GenerateFromJob(job, a.generate);
  if (!lines.ok()) return Fail(kelvin::launcher::WithWorkingDirectory(lines.status(), job));
  for (const std::string& line : *lines) std::printf("%s\n", line.c_str());
  return 0;
}

// eval --needle: the grid printed, and with --json written.
int Needle(const kelvin::config::JobConfig& job, Arguments a) {
  a.needle_grid.checkpoint = a.checkpoint;
  const absl::StatusOr<kelvin::launcher::NeedleReport> report =
      kelvin::launcher::RunNeedle(job, a.needle_grid);
  if (!report.ok()) {
    return Fail(WithWorkingDirectory(report.status(), kelvin::launcher::RelativePathsOf(job)));
  }
  KLOG(INFO) << kelvin::launcher::FormatNeedle(job, *report);
  return WriteJsonResult(a.eval_json, kelvin::launcher::NeedleJson(job, *report), "needle grid");
}

// eval --data / --text / --needle: the model alone, one process.
int Score(const kelvin::config::JobConfig& job, Arguments a) {
  a.score.checkpoint = a.checkpoint;
  if (!a.eval_json.empty()) {
    if (const absl::Status made = MakeJsonDirectory(a.eval_json); !made.ok()) return Fail(made);
  }
  if (a.needle) return Needle(job, std::move(a));
  const absl::StatusOr<kelvin::launcher::ScoreReport> report =
      kelvin::launcher::ScoreData(job, a.score);
  if (!report.ok()) {
    std::vector<std::string> paths = kelvin::launcher::RelativePathsOf(job);
    paths.insert(paths.end(), {a.score.data, a.score.text});
    return Fail(WithWorkingDirectory(report.status(), paths));
  }
  KLOG(INFO) << kelvin::launcher::FormatScore(job, *report);
  return WriteJsonResult(a.eval_json, kelvin::launcher::ScoreJson(job, *report), "score");
}

int Convert(const kelvin::config::JobConfig& job, const std::string& out,
            const kelvin::launcher::ConvertOptions& options) {
  const absl::StatusOr<int64_t> step = kelvin::launcher::ConvertCheckpointToHf(job, out, options);
  if (!step.ok()) return Fail(kelvin::launcher::WithWorkingDirectory(step.status(), job));
  KLOG_RANK0(INFO) << "converted the checkpoint of step " << *step << " in "
                   << job.checkpoint().dir() << " to " << out << " (Hugging Face format)";
  return 0;
}

// Runs train, eval or convert on the job. train and eval run under MPI, initialised whether or
// not a launcher started several processes: MPI's world is this process's, and launcher variables
// that disagree with it (SLURM_NTASKS=4 without an MPI job, srun without --mpi=pmix) are an error
// that says how to launch.
int RunUnderLauncher(const Arguments& a) {
  // Before anything slow: a preemption warning during start-up is kept for the training loop.
  if (a.command == "train") kelvin::training::InstallPreemptionHandlers();
  const auto load = [&a]() { return kelvin::launcher::LoadJobConfig(a.job_path, a.overrides); };
  if (a.command == "convert" || a.command == "generate" || a.scores()) {  // one process: rank 0's
    const absl::StatusOr<kelvin::parallel::RankInfo> launched =
        kelvin::parallel::RankInfoFromEnvironment(kelvin::parallel::ProcessEnvironment());
    if (!launched.ok()) return Fail(launched.status());
    if (launched->rank != 0) return 0;
    std::error_code error;
    if (a.scores() && !std::filesystem::exists(a.job_path, error)) {
      return Fail(
          WithWorkingDirectory(absl::NotFoundError(absl::StrCat(
                                   a.job_path,
                                   " does not exist: eval --data, --text and --needle take a job "
                                   "file or a Hugging Face model directory")),
                               {a.job_path}));
    }
    if (a.scores() && std::filesystem::is_directory(a.job_path, error)) {  // a model directory
      if (!a.overrides.empty()) return Usage("--set changes a job file, not a model directory");
      return Score(kelvin::launcher::JobOfModelDirectory(a.job_path), a);
    }
    const absl::StatusOr<kelvin::config::JobConfig> job = load();
    if (!job.ok()) return Fail(job.status());
    if (a.scores()) return Score(*job, a);
    return a.command == "generate" ? Generate(*job, a)
                                   : Convert(*job, *a.out, {a.checkpoint, a.convert_dtype});
  }
  // The launcher's variables as it set them (a singleton MPI_Init adds PMIX_RANK).
  const absl::StatusOr<kelvin::parallel::RankInfo> launched =
      kelvin::parallel::RankInfoFromEnvironment(kelvin::parallel::ProcessEnvironment());
  if (!launched.ok()) return Fail(launched.status());
  // FUNNELED: only this thread calls MPI (checkpoint.async_save's writer thread never does).
  int threading = 0;
  MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &threading);
  const absl::StatusOr<kelvin::parallel::RankInfo> rank = kelvin::parallel::DiscoverRank(*launched);
  int result = 0;
  if (!rank.ok()) {
    result = Fail(rank.status());  // every process finds it alike: none waits for another
  } else {
    if (rank->world_size > 1) kelvin::SetLogRank(rank->rank);  // progress lines from rank 0 only
    const absl::StatusOr<kelvin::config::JobConfig> job = load();
    if (!job.ok()) {
      result = Fail(job.status());
    } else if (a.command == "train") {
      // Without checkpoints a stop signal cannot be honoured: it ends the run, as by default.
      if (job->checkpoint().dir().empty()) kelvin::training::UninstallPreemptionHandlers();
      result = Train(*job, rank->rank);
    } else {
      result = Eval(*job, a, rank->rank);
    }
    // A failure may be one rank's alone: abort the others. A preemption stop is every rank's.
    if (result != 0 && result != kExitPreempted && rank->world_size > 1) {
      MPI_Abort(MPI_COMM_WORLD, result);
    }
  }
  MPI_Finalize();
  return result;
}

// Whether the job plans for CUDA: training.device, or with AUTO whether launch.* asks for GPUs.
bool PlansForCuda(const kelvin::config::JobConfig& job, const std::string& device_flag) {
  if (!device_flag.empty()) return device_flag == "cuda";
  const kelvin::config::TrainingConfig::Device device = job.training().device();
  if (device != kelvin::config::TrainingConfig::AUTO) {
    return device == kelvin::config::TrainingConfig::CUDA;
  }
  return job.launch().gpus_per_node() > 0;
}

// The job and what plan and launch work it out for: its architecture, the processes (plan
// --processes, else launch.nodes x launch.processes_per_node), the device, and with PlanJob its
// layout on them.
struct PlannedJob {
  kelvin::config::JobConfig job;
  kelvin::models::LlamaConfig arch;
  int processes = 0;
  bool cuda = false;
  kelvin::training::JobLayout layout;  // PlanJob's
  std::string stand_in_note;           // a preset stands in for unreadable model.hf_dir weights
};

absl::StatusOr<PlannedJob> LoadJobToPlan(const Arguments& a) {
  PlannedJob planned;
  KELVIN_ASSIGN_OR_RETURN(planned.job, kelvin::launcher::LoadJobConfig(a.job_path, a.overrides));
  KELVIN_ASSIGN_OR_RETURN(planned.arch, kelvin::training::ResolveArchitectureToPlan(
                                            planned.job.model(), planned.stand_in_note));
  if (!planned.stand_in_note.empty()) {
    std::fprintf(stderr, "kelvin: note: %s\n", planned.stand_in_note.c_str());
  }
  const kelvin::config::LaunchConfig& launch = planned.job.launch();
  const int64_t launched = int64_t{launch.nodes()} * launch.processes_per_node();
  if (a.processes == 0 && launched > INT_MAX) {
    return absl::InvalidArgumentError("launch.nodes x launch.processes_per_node is too large");
  }
  planned.processes = a.processes > 0 ? a.processes : static_cast<int>(launched);
  planned.cuda = PlansForCuda(planned.job, a.device);
  return planned;
}

absl::StatusOr<PlannedJob> PlanJob(const Arguments& a) {
  KELVIN_ASSIGN_OR_RETURN(PlannedJob planned, LoadJobToPlan(a));
  KELVIN_ASSIGN_OR_RETURN(
      planned.layout,
      kelvin::training::PlanJobLayout(planned.job, planned.arch, planned.processes, planned.cuda));
  return planned;
}

// plan --layouts: the job's valid layouts on the planned processes, best first; an error when
// none fits launch.gpu_memory_gib.
absl::Status PrintLayouts(const Arguments& a) {
  KELVIN_ASSIGN_OR_RETURN(const PlannedJob loaded, LoadJobToPlan(a));
  const kelvin::config::JobConfig& job = loaded.job;
  const int processes = loaded.processes;
  KELVIN_ASSIGN_OR_RETURN(
      const kelvin::launcher::LayoutSearch search,
      kelvin::launcher::SearchLayouts(job, loaded.arch, processes, loaded.cuda));
  std::printf("%s", kelvin::launcher::FormatLayoutSearch(job, search, processes, 15).c_str());
  std::fflush(stdout);
  if (search.candidates.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "no split of ", processes, " processes is valid for this job (", search.invalid,
        " tried; e.g. ", search.invalid_reasons.front(),
        "): plan for another count (--processes N) or change training.global_batch_size"));
  }
  if (search.candidates.front().fits) return absl::OkStatus();
  std::vector<std::string> remedies = kelvin::training::ActivationMemoryRemedies(job);
  remedies.push_back("plan for more processes (--processes N)");
  return absl::ResourceExhaustedError(
      absl::StrCat("no layout of ", processes, " processes fits launch.gpu_memory_gib=",
                   job.launch().gpu_memory_gib(), ": ", absl::StrJoin(remedies, ", or ")));
}

// Prints the job's plan; an error when its largest rank does not fit launch.gpu_memory_gib.
absl::Status PrintPlan(const PlannedJob& planned) {
  KELVIN_ASSIGN_OR_RETURN(const std::string report, kelvin::training::FormatJobPlan(
                                                        planned.job, planned.arch, planned.layout));
  std::printf("%s", report.c_str());
  std::fflush(stdout);  // before a fit error on stderr
  KELVIN_ASSIGN_OR_RETURN(
      const kelvin::training::PeakMemory peak,
      kelvin::training::PlanPeakMemory(planned.job, planned.arch, planned.layout));
  return kelvin::training::CheckPlanFitsGpu(planned.job, planned.layout, peak);
}

int Plan(const Arguments& a) {
  if (a.layouts) {
    const absl::Status printed = PrintLayouts(a);
    return printed.ok() ? 0 : Fail(printed);
  }
  const absl::StatusOr<PlannedJob> planned = PlanJob(a);
  if (!planned.ok()) return Fail(planned.status());
  const absl::Status printed = PrintPlan(*planned);
  return printed.ok() ? 0 : Fail(printed);
}

// The path of this kelvin binary, which the batch job runs.
std::string SelfPath() {
  std::vector<char> path(PATH_MAX + 1, '\0');
  const ssize_t n = readlink("/proc/self/exe", path.data(), PATH_MAX);
  return n > 0 ? std::string(path.data(), static_cast<size_t>(n)) : std::string("kelvin");
}

int Launch(const Arguments& a) {
  const absl::StatusOr<PlannedJob> planned = PlanJob(a);
  if (!planned.ok()) return Fail(planned.status());
  const kelvin::config::JobConfig& job = planned->job;
  if (!planned->stand_in_note.empty()) {  // the job itself would fail at its start
    return Fail(absl::FailedPreconditionError(absl::StrCat(
        "model.hf_dir=", job.model().hf_dir(),
        " holds no readable config.json on this machine, so the job would fail when it starts: "
        "launch where the weights are visible (a shared filesystem), or fix model.hf_dir")));
  }
  const absl::Status data = kelvin::training::CheckDataFilesExist(job);
  if (!data.ok()) return Fail(kelvin::launcher::WithWorkingDirectory(data, job));
  const absl::Status outputs = kelvin::training::CheckOutputLocations(job);
  if (!outputs.ok()) return Fail(kelvin::launcher::WithWorkingDirectory(outputs, job));
  if (job.training().device() == kelvin::config::TrainingConfig::CUDA &&
      job.launch().gpus_per_node() == 0) {
    return Fail(absl::InvalidArgumentError(
        "training.device=CUDA but launch.gpus_per_node=0: request the GPUs per node"));
  }
  const absl::Status printed = PrintPlan(*planned);
  if (!printed.ok()) return Fail(printed);
  const absl::StatusOr<kelvin::launcher::BatchJob> batch =
      kelvin::launcher::WriteBatchJob(job, SelfPath());
  if (!batch.ok()) return Fail(batch.status());
  std::printf("wrote %s (the resolved job is embedded in it)\n", batch->script_path.c_str());
  if (!a.submit) {
    std::printf("submit it with: sbatch %s   (or kelvin launch ... --submit)\n",
                batch->script_path.c_str());
    return 0;
  }
  const absl::StatusOr<std::string> id = kelvin::launcher::SubmitBatchJob(batch->script_path);
  if (!id.ok()) return Fail(id.status());
  const absl::Status recorded = kelvin::launcher::RecordSubmittedJob(job, *id);
  if (!recorded.ok()) {
    std::fprintf(stderr,
                 "kelvin: warning: %s (a later launch into this run directory is not "
                 "refused while job %s lives)\n",
                 std::string(recorded.message()).c_str(), id->c_str());
  }
  std::printf("submitted batch job %s; its log: %s/slurm-%s.out\n", id->c_str(),
              std::filesystem::path(batch->script_path).parent_path().c_str(), id->c_str());
  return 0;
}

int PrepareData(const std::string& samples, const std::string& out, const std::string& tokenizer) {
  std::optional<kelvin::data::TextSampleEncoder> encoder;
  if (!tokenizer.empty()) {
    absl::StatusOr<kelvin::data::TextSampleEncoder> loaded =
        kelvin::data::TextSampleEncoder::FromDirectory(tokenizer);
    if (!loaded.ok()) return Fail(WithWorkingDirectory(loaded.status(), {tokenizer}));
    encoder = *std::move(loaded);
  }
  const absl::StatusOr<kelvin::data::PreparedSamples> prepared =
      kelvin::data::PrepareJsonlSamples(samples, out, encoder ? &*encoder : nullptr);
  if (!prepared.ok()) return Fail(WithWorkingDirectory(prepared.status(), {samples, out}));
  std::printf("%s", kelvin::data::DescribePreparedSamples(*prepared).c_str());
  return 0;
}

// The commands, and the options each takes (one table: the parser and its messages read it).
constexpr const char* kCommands[] = {"train",   "plan",     "launch",      "eval",
                                     "convert", "generate", "prepare-data"};

struct OptionSpec {
  const char* name;
  const char* value;  // what the value is, for messages; nullptr: a flag without value
  std::vector<std::string> commands;
};

const std::vector<OptionSpec>& Options() {
  static const std::vector<OptionSpec> options = {
      {"--set", "field.path=value", {"train", "plan", "launch", "eval", "convert", "generate"}},
      {"--processes", "a process count >= 1", {"plan"}},
      {"--device", "cpu or cuda", {"plan"}},
      {"--layouts", nullptr, {"plan"}},
      {"--submit", nullptr, {"launch"}},
      {"--out", "a path", {"convert", "prepare-data"}},
      {"--tokenizer", "a model directory with tokenizer.json", {"prepare-data"}},
      {"--step", "a step count >= 0", {"eval", "convert", "generate"}},
      {"--best", nullptr, {"eval", "convert", "generate"}},
      {"--prompt", "a text", {"generate"}},
      {"--prompt-file", "a file of one prompt per line", {"generate"}},
      {"--tokens", "token ids separated by commas", {"generate"}},
      {"--max-new-tokens", "a token count >= 1", {"generate"}},
      {"--temperature", "a number >= 0", {"generate"}},
      {"--top-k", "a count >= 0", {"generate"}},
      {"--top-p", "a number in (0, 1]", {"generate"}},
      {"--seed", "an integer >= 0", {"generate", "eval"}},
      {"--stop", "a text", {"generate"}},
      {"--logprobs", nullptr, {"generate"}},
      {"--batch-size", "a prompt count >= 1", {"generate"}},
      {"--all", nullptr, {"eval"}},
      {"--json", "a file to write", {"eval"}},
      {"--data", "a Megatron prefix or a token file", {"eval"}},
      {"--text", "a text file", {"eval"}},
      {"--seq-length", "a window in tokens >= 1", {"eval"}},
      {"--stride", "a stride in tokens >= 1", {"eval"}},
      {"--needle", nullptr, {"eval"}},
      {"--lengths", "context lengths in tokens separated by commas", {"eval"}},
      {"--depths", "fractions in [0, 1] separated by commas", {"eval"}},
      {"--samples", "a count >= 1", {"eval"}},
      {"--temperatures", nullptr, {"eval"}},
      {"--dtype", "f32 or bf16", {"convert"}},
  };
  return options;
}

// Applies option `name` (its value in `value` when it takes one) to `a`; a usage error otherwise.
std::optional<int> ApplyOption(const std::string& name, const std::string& value, Arguments& a) {
  if (name == "--set") {
    a.overrides.push_back(value);
  } else if (name == "--processes") {
    if (!absl::SimpleAtoi(value, &a.processes) || a.processes < 1) {
      return Usage("--processes " + value + ": give a process count >= 1");
    }
  } else if (name == "--device") {
    if (value != "cpu" && value != "cuda") return Usage("--device " + value + ": use cpu or cuda");
    a.device = value;
  } else if (name == "--layouts") {
    a.layouts = true;
  } else if (name == "--submit") {
    a.submit = true;
  } else if (name == "--out") {
    a.out = value;
  } else if (name == "--tokenizer") {
    if (value.empty()) return Usage("--tokenizer is empty: give the model directory");
    a.tokenizer = value;
  } else if (name == "--step") {
    int64_t step = 0;
    if (!absl::SimpleAtoi(value, &step) || step < 0) {
      return Usage("--step " + value + ": give a step count >= 0");
    }
    a.checkpoint.step = step;
  } else if (name == "--best") {
    a.checkpoint.best = true;
  } else if (name == "--all") {
    a.every_checkpoint = true;
  } else if (name == "--data" || name == "--text") {
    if (value.empty()) return Usage(name + " is empty: give the file to score");
    (name == "--data" ? a.score.data : a.score.text) = value;
  } else if (name == "--seq-length" || name == "--stride") {
    int64_t tokens = 0;
    if (!absl::SimpleAtoi(value, &tokens) || tokens < 1) {
      return Usage(name + " " + value + ": give a token count >= 1");
    }
    (name == "--seq-length" ? a.score.seq_length : a.score.stride) = tokens;
  } else if (name == "--json") {
    if (value.empty()) return Usage("--json is empty: give the file to write the result to");
    a.eval_json = value;
  } else if (name == "--prompt") {
    a.generate.prompts.push_back(value);
  } else if (name == "--prompt-file") {
    a.prompt_file = value;
  } else if (name == "--tokens") {
    std::vector<int32_t> ids;
    for (const absl::string_view part : absl::StrSplit(value, ',')) {
      int32_t id = 0;
      if (!absl::SimpleAtoi(part, &id) || id < 0) {
        return Usage("--tokens " + value + ": give token ids >= 0 separated by commas");
      }
      ids.push_back(id);
    }
    a.generate.token_prompts.push_back(std::move(ids));
  } else if (name == "--max-new-tokens") {
    if (!absl::SimpleAtoi(value, &a.generate.max_new_tokens) || a.generate.max_new_tokens < 1) {
      return Usage("--max-new-tokens " + value + ": give a token count >= 1");
    }
  } else if (name == "--temperature" || name == "--top-p") {
    double number = 0;
    if (!absl::SimpleAtod(value, &number)) return Usage(name + " " + value + ": give a number");
    (name == "--temperature" ? a.generate.sampling.temperature : a.generate.sampling.top_p) =
        number;
  } else if (name == "--top-k") {
    if (!absl::SimpleAtoi(value, &a.generate.sampling.top_k) || a.generate.sampling.top_k < 0) {
      return Usage("--top-k " + value + ": give a count >= 0 (0: every token)");
    }
  } else if (name == "--seed") {
    if (!absl::SimpleAtoi(value, &a.generate.sampling.seed)) {
      return Usage("--seed " + value + ": give an integer >= 0");
    }
    a.needle_grid.seed = a.generate.sampling.seed;
  } else if (name == "--needle") {
    a.needle = true;
  } else if (name == "--temperatures") {
    a.needle_grid.temperatures = true;
  } else if (name == "--lengths") {
    for (const absl::string_view part : absl::StrSplit(value, ',')) {
      int64_t length = 0;
      if (!absl::SimpleAtoi(part, &length) || length < 1) {
        return Usage("--lengths " + value + ": give token counts >= 1 separated by commas");
      }
      a.needle_grid.lengths.push_back(length);
    }
  } else if (name == "--depths") {
    for (const absl::string_view part : absl::StrSplit(value, ',')) {
      double depth = 0;
      if (!absl::SimpleAtod(part, &depth) || !(depth >= 0 && depth <= 1)) {
        return Usage("--depths " + value + ": give fractions in [0, 1] separated by commas");
      }
      a.needle_grid.depths.push_back(depth);
    }
  } else if (name == "--samples") {
    if (!absl::SimpleAtoi(value, &a.needle_grid.samples) || a.needle_grid.samples < 1) {
      return Usage("--samples " + value + ": give a count >= 1");
    }
  } else if (name == "--stop") {
    a.generate.stop = value;
  } else if (name == "--logprobs") {
    a.generate.logprobs = true;
  } else if (name == "--batch-size") {
    if (!absl::SimpleAtoi(value, &a.generate.batch_size) || a.generate.batch_size < 1) {
      return Usage("--batch-size " + value + ": give a prompt count >= 1");
    }
  } else if (name == "--dtype") {
    if (value != "f32" && value != "bf16") return Usage("--dtype " + value + ": use f32 or bf16");
    a.convert_dtype = value == "bf16" ? kelvin::DType::kBF16 : kelvin::DType::kF32;
  }
  return std::nullopt;
}

// The command line after the command: its input file, then options; nullopt when it parsed, else
// the exit code of the usage error printed.
std::optional<int> ParseArguments(const std::vector<std::string>& args, Arguments& a) {
  const bool input_is_samples = a.command == "prepare-data";
  for (size_t i = 1; i < args.size(); ++i) {
    std::string arg = args[i], value;
    const size_t equals = arg.find('=');
    const bool inline_value = arg.starts_with("--") && equals != std::string::npos;
    if (inline_value) {
      value = arg.substr(equals + 1);
      arg = arg.substr(0, equals);
    }
    const auto spec = std::find_if(Options().begin(), Options().end(),
                                   [&](const OptionSpec& o) { return arg == o.name; });
    if (spec == Options().end()) {
      if (!arg.starts_with("-") && a.job_path.empty()) {
        a.job_path = arg;
        continue;
      }
      if (!arg.starts_with("-")) {
        return Usage(absl::StrCat("unexpected argument \"", arg, "\" for ", a.command, " (its ",
                                  input_is_samples ? "samples file" : "job file", " is \"",
                                  a.job_path, "\")"));
      }
      std::vector<std::string> options;  // this command's, for the suggestion
      for (const OptionSpec& o : Options()) {
        if (std::find(o.commands.begin(), o.commands.end(), a.command) != o.commands.end()) {
          options.push_back(o.name);
        }
      }
      const std::string closest = kelvin::strings::ClosestName(arg, options);
      return Usage(
          absl::StrCat("unknown option \"", arg, "\" for ", a.command,
                       closest.empty() ? "" : absl::StrCat(" (did you mean ", closest, "?)")));
    }
    if (std::find(spec->commands.begin(), spec->commands.end(), a.command) ==
        spec->commands.end()) {
      return Usage(absl::StrCat(arg, " is an option of ", absl::StrJoin(spec->commands, ", "),
                                ", not of ", a.command));
    }
    if (spec->value == nullptr && inline_value) {
      return Usage(absl::StrCat(arg, " takes no value"));
    }
    if (spec->value != nullptr && !inline_value) {
      if (i + 1 >= args.size() || args[i + 1].starts_with("--")) {
        return Usage(absl::StrCat(arg, " needs a value (", spec->value, ")"));
      }
      value = args[++i];
    }
    if (const std::optional<int> error = ApplyOption(arg, value, a)) return error;
  }
  if (a.job_path.empty()) {
    return Usage(input_is_samples ? "prepare-data needs a samples file: kelvin prepare-data "
                                    "SAMPLES.jsonl --out PREFIX"
                                  : absl::StrCat(a.command, " needs a job file: kelvin ", a.command,
                                                 " JOB.textproto"));
  }
  if ((a.command == "convert" || input_is_samples) && !a.out.has_value()) {
    return Usage(input_is_samples ? "prepare-data needs --out PREFIX" : "convert needs --out DIR");
  }
  if (a.command == "convert" && a.out->empty()) {
    return Usage("convert --out is empty: give the directory to write the Hugging Face model to");
  }
  if (a.checkpoint.best && a.checkpoint.step.has_value()) {
    return Usage(a.command + " takes --step N or --best, not both");
  }
  if (a.scores() && a.every_checkpoint) {
    return Usage(
        "eval --all scores the job's held-out sets at every checkpoint; --data, --text and "
        "--needle evaluate one model");
  }
  if (a.needle && (!a.score.data.empty() || !a.score.text.empty())) {
    return Usage("eval takes --needle or --data/--text, not both");
  }
  const bool grid_options = !a.needle_grid.lengths.empty() || !a.needle_grid.depths.empty() ||
                            a.needle_grid.samples != kelvin::launcher::NeedleOptions().samples ||
                            a.needle_grid.temperatures ||
                            (a.command == "eval" && a.needle_grid.seed != 0);
  if (grid_options && !a.needle) {
    return Usage(
        "--lengths, --depths, --samples, --seed and --temperatures shape the needle grid: add "
        "--needle");
  }
  if (a.every_checkpoint && !a.checkpoint.newest()) {
    return Usage("eval takes one of --step N, --best and --all");
  }
  return std::nullopt;
}

}  // namespace

int main(int argc, char** argv) {
  kelvin::io::InstallTemporaryFileCleanup();  // first: no temporary outlives a Ctrl-C
  // A closed stdout pipe (`kelvin train ... | head`, a dropped ssh) fails writes to it instead of
  // killing a run before its checkpoint.
  std::signal(SIGPIPE, SIG_IGN);
  const std::vector<std::string> args(argv + 1, argv + argc);
  if (args.size() == 1 && args[0] == "--version") {
    std::printf("kelvin %s\n%s\n", kelvin::KelvinVersion().c_str(),
                kelvin::LibraryVersions().c_str());
    return 0;
  }
  if (!args.empty() && (args[0] == "--help" || args[0] == "-h" || args[0] == "help")) {
    std::printf("%s", kUsage);
    return 0;
  }
  if (args.empty()) return Usage("a command is needed");
  Arguments a;
  a.command = args[0];
  if (std::find(std::begin(kCommands), std::end(kCommands), a.command) == std::end(kCommands)) {
    const std::vector<std::string> commands(std::begin(kCommands), std::end(kCommands));
    const std::string closest = kelvin::strings::ClosestName(a.command, commands);
    return Usage(absl::StrCat("unknown command \"", a.command, "\"",
                              closest.empty() ? "" : absl::StrCat(" (did you mean ", closest, "?)"),
                              "; the commands: ", absl::StrJoin(commands, ", ")));
  }
  if (std::find(args.begin(), args.end(), "--help") != args.end()) {
    std::printf("%s", kUsage);
    return 0;
  }
  if (const std::optional<int> error = ParseArguments(args, a)) return *error;
  if (a.command == "prepare-data") return PrepareData(a.job_path, *a.out, a.tokenizer);
  if (a.command == "plan") return Plan(a);
  return a.command == "launch" ? Launch(a) : RunUnderLauncher(a);
}
