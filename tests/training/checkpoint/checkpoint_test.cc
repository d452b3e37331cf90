// Checkpoints and exact resume: a run stopped by a preemption signal and resumed equals the
// uninterrupted run bit for bit; keep_last and keep_best pruning; missing, damaged, foreign and
// mismatched checkpoints are clear errors and a .partial one is ignored; another global batch
// warns that the data order changed; kelvin convert and kelvin eval read a checkpoint's weights.
#include "training/checkpoint/checkpoint.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/resource.h>

#include <algorithm>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <map>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/build_info.h"
#include "core/io/crc32c.h"
#include "core/io/hf_checkpoint.h"
#include "core/io/safetensors.h"
#include "launcher/commands/convert_command.h"
#include "launcher/commands/eval_command.h"
#include "launcher/config/job_config.h"
#include "tests/testing/compare.h"
#include "tests/testing/files.h"
#include "tests/testing/tensors.h"
#include "training/checkpoint/checkpoint_format.h"
#include "training/checkpoint/preemption.h"
#include "training/job/job_setup.h"
#include "training/run_directory.h"
#include "training/trainer.h"

namespace kelvin::training {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using ::testing::Not;

// A fresh checkpoint directory for one test.
std::string CheckpointDir(const std::string& name) {
  const fs::path dir = fs::path(::testing::TempDir()) / ("kelvin_checkpoint_" + name);
  fs::remove_all(dir);
  return dir.string();
}

// The demo job, shrunk to 6 quick steps, with its checkpoints in `dir` ("" = none).
config::JobConfig SmallJob(const std::string& dir, std::vector<std::string> extra = {}) {
  std::vector<std::string> overrides = {
      "model.ssa.enabled=true",     "lr_schedule.warmup_steps=2",  "training.steps=6",
      "training.seq_length=110",    "training.micro_batch_size=2", "training.global_batch_size=4",
      "training.eval_interval=100", "training.export_hf_dir=\"\"", "logging.log_interval=100"};
  if (!dir.empty()) overrides.push_back("checkpoint.dir=\"" + dir + "\"");
  overrides.insert(overrides.end(), extra.begin(), extra.end());
  absl::StatusOr<config::JobConfig> job =
      launcher::LoadJobConfig(testing::DemoJobPath(), overrides);
  EXPECT_TRUE(job.ok()) << job.status();
  return job.value_or(config::JobConfig());
}

std::unique_ptr<Trainer> CreateOrDie(const config::JobConfig& job) {
  absl::StatusOr<std::unique_ptr<Trainer>> trainer = Trainer::Create(job);
  EXPECT_TRUE(trainer.ok()) << trainer.status();
  return trainer.ok() ? std::move(*trainer) : nullptr;
}

// The small job's first step trained and checkpointed into `dir`; whether it ran.
bool TrainOneStep(const std::string& dir) {
  std::unique_ptr<Trainer> trainer =
      CreateOrDie(SmallJob(dir, {"training.steps=1", "lr_schedule.warmup_steps=0"}));
  return trainer != nullptr && trainer->Run().ok();
}

TEST(Checkpoint, PreemptedAndResumedRunEqualsTheUninterruptedOneBitForBit) {
  std::unique_ptr<Trainer> whole = CreateOrDie(SmallJob(""));
  ASSERT_NE(whole, nullptr);
  ASSERT_TRUE(whole->Run().ok());

  const std::string dir = CheckpointDir("preempted");
  const std::string run_dir = dir + "_run";  // where a batch script finds the stop marker
  fs::create_directories(run_dir);
  const config::JobConfig job = SmallJob(dir, {"launch.run_dir=\"" + run_dir + "\""});
  std::unique_ptr<Trainer> first = CreateOrDie(job);
  ASSERT_NE(first, nullptr);
  InstallPreemptionHandlers();
  std::raise(SIGUSR1);  // SLURM's warning signal: stop after the running step
  const absl::Status stopped = first->Run();
  ClearPreemption();
  EXPECT_EQ(stopped.code(), absl::StatusCode::kCancelled);
  EXPECT_THAT(std::string(stopped.message()), HasSubstr("after step 1 of 6"));
  ASSERT_EQ(first->history().size(), 1u);
  // The marker a batch script requeues on (launcher/slurm/slurm_batch.cc).
  std::ifstream marker(fs::path(run_dir) / kStoppedForPreemptionFile);
  std::string line;
  ASSERT_TRUE(std::getline(marker, line));
  EXPECT_EQ(line, absl::StrCat("stopped after step 1 by signal ", SIGUSR1));

  std::unique_ptr<Trainer> second = CreateOrDie(job);
  ASSERT_NE(second, nullptr);
  EXPECT_EQ(second->start_step(), 1);
  ASSERT_TRUE(second->Run().ok());
  ASSERT_EQ(second->history().size(), 5u);
  EXPECT_EQ(first->history()[0].loss, whole->history()[0].loss);
  for (size_t i = 0; i < 5; ++i) {
    EXPECT_EQ(second->history()[i].loss, whole->history()[i + 1].loss) << "step " << i + 2;
    EXPECT_EQ(second->history()[i].grad_norm, whole->history()[i + 1].grad_norm);
  }
  for (const ParameterSet::Entry& e : whole->model().parameters().entries()) {
    EXPECT_TRUE(testing::BitIdentical(second->model().parameters().value(e.name), e.value, e.name));
  }
  fs::remove_all(dir);
}

TEST(Checkpoint, IntervalSavesArePrunedToKeepLastAndPartialOnesIgnored) {
  const std::string dir = CheckpointDir("interval");
  fs::create_directories(fs::path(dir) / "step_00000009.partial");  // a crash mid-write
  std::unique_ptr<Trainer> trainer =
      CreateOrDie(SmallJob(dir, {"checkpoint.interval_steps=2", "checkpoint.keep_last=2"}));
  ASSERT_NE(trainer, nullptr);
  EXPECT_EQ(trainer->start_step(), 0);
  ASSERT_TRUE(trainer->Run().ok());
  EXPECT_FALSE(fs::exists(fs::path(dir) / "step_00000002"));
  EXPECT_TRUE(fs::exists(fs::path(dir) / "step_00000004" / "part_0_of_1.safetensors"));
  EXPECT_TRUE(fs::exists(fs::path(dir) / "step_00000006" / "checkpoint.json"));
  const absl::StatusOr<std::optional<std::string>> latest = LatestCheckpoint(dir);
  ASSERT_TRUE(latest.ok() && latest->has_value());
  EXPECT_EQ(fs::path(**latest).filename(), "step_00000006");

  // kelvin convert --step 4 --dtype bf16: that checkpoint's weights rounded to bf16 (not the
  // newest's); a pruned step is an error listing the kept ones.
  const config::JobConfig job = SmallJob(dir);
  const std::string hf = CheckpointDir("interval_hf");
  const absl::StatusOr<int64_t> converted =
      launcher::ConvertCheckpointToHf(job, hf, {CheckpointChoice::Step(4), DType::kBF16});
  ASSERT_TRUE(converted.ok()) << converted.status();
  EXPECT_EQ(*converted, 4);
  absl::StatusOr<CheckpointReader> step4 = CheckpointReader::Open(dir + "/step_00000004");
  absl::StatusOr<io::HfCheckpoint> exported = io::HfCheckpoint::Open(hf);
  ASSERT_TRUE(step4.ok() && exported.ok());
  for (const ParameterSet::Entry& e : trainer->model().parameters().entries()) {
    absl::StatusOr<Tensor> master = step4->Read(e.name, io::TensorRegion::Whole(e.shape));
    absl::StatusOr<Tensor> written = exported->Read(e.name);
    ASSERT_TRUE(master.ok() && written.ok()) << e.name;
    EXPECT_TRUE(testing::BitIdentical(*written, testing::Cast(master->View(e.shape), DType::kBF16),
                                      e.name));
  }
  EXPECT_FALSE(testing::BitIdentical(
      *exported->Read("model.norm.weight"),
      testing::Cast(trainer->model().parameters().value("model.norm.weight"), DType::kBF16),
      "the newest checkpoint's norm"));
  EXPECT_THAT(
      std::string(launcher::ConvertCheckpointToHf(job, hf, {CheckpointChoice::Step(2), DType::kF32})
                      .status()
                      .message()),
      HasSubstr("has no complete checkpoint of step 2 (it has steps 4, 6)"));
  fs::remove_all(dir);
  fs::remove_all(hf);
}

// Writes checkpoint.json of step_<step> under `dir` with `eval_loss` (a stand-in for a whole
// checkpoint: pruning and FindBestCheckpoint read only the index).
void WriteIndexOnly(const std::string& dir, int64_t step, std::optional<double> eval_loss) {
  const fs::path path = fs::path(dir) / absl::StrFormat("step_%08d", step);
  fs::create_directories(path);
  ASSERT_TRUE(WriteCheckpointIndex(path, {"job",
                                          "one process",
                                          step,
                                          step,
                                          1,
                                          {},
                                          eval_loss,
                                          "test",
                                          "run",
                                          "libs",
                                          std::nullopt,
                                          std::nullopt})
                  .ok());
}

std::vector<std::string> Entries(const std::string& dir) {
  std::vector<std::string> names;
  for (const auto& entry : fs::directory_iterator(dir)) {
    names.push_back(entry.path().filename().string());
  }
  std::sort(names.begin(), names.end());
  return names;
}

// A user's directory named like a checkpoint (no checkpoint.json) is never deleted by keep_last:
// pruning stops with an error naming it (the trainer then keeps every checkpoint and warns).
TEST(Checkpoint, KeepLastDeletesNoDirectoryWithoutACheckpointIndex) {
  const std::string dir = CheckpointDir("keep_last_foreign");
  fs::create_directories(fs::path(dir) / "step_00000000");
  std::ofstream(fs::path(dir) / "step_00000000" / "README") << "my notes";
  WriteIndexOnly(dir, 2, std::nullopt);
  WriteIndexOnly(dir, 4, std::nullopt);
  const absl::StatusOr<std::optional<BestCheckpoint>> pruned = PruneCheckpoints(dir, 1, false);
  ASSERT_FALSE(pruned.ok());
  EXPECT_THAT(std::string(pruned.status().message()),
              HasSubstr("step_00000000 is named like a checkpoint but holds no checkpoint.json"));
  EXPECT_EQ(Entries(dir),
            (std::vector<std::string>{"step_00000000", "step_00000002", "step_00000004"}));
  fs::remove_all(dir);
}

TEST(Checkpoint, KeepBestKeepsTheLowestEvaluationLossBesidesTheNewest) {
  const std::string dir = CheckpointDir("keep_best_index");
  WriteIndexOnly(dir, 2, 1.5);
  WriteIndexOnly(dir, 4, 1.25);
  WriteIndexOnly(dir, 6, 1.25);  // as low: the earlier one is the best
  WriteIndexOnly(dir, 8, std::nullopt);
  WriteIndexOnly(dir, 10, 1.375);
  absl::StatusOr<std::optional<BestCheckpoint>> best = FindBestCheckpoint(dir);
  ASSERT_TRUE(best.ok() && best->has_value()) << best.status();
  EXPECT_EQ((*best)->step, 4);
  EXPECT_EQ((*best)->eval_loss, 1.25);
  EXPECT_EQ(fs::path((*best)->path).filename(), "step_00000004");
  const absl::StatusOr<std::optional<BestCheckpoint>> pruned = PruneCheckpoints(dir, 2, true);
  ASSERT_TRUE(pruned.ok() && pruned->has_value()) << pruned.status();
  EXPECT_EQ((*pruned)->step, 4);
  EXPECT_EQ(Entries(dir),
            (std::vector<std::string>{"step_00000004", "step_00000008", "step_00000010"}));
  const absl::StatusOr<std::optional<BestCheckpoint>> none = PruneCheckpoints(dir, 1, false);
  ASSERT_TRUE(none.ok() && !none->has_value()) << none.status();
  EXPECT_EQ(Entries(dir), (std::vector<std::string>{"step_00000010"}));
  fs::remove_all(dir);

  // A whole run: every checkpoint saved where the run evaluated records that loss, and the kept
  // ones are the newest and the lowest loss's, which `kelvin convert --best` exports.
  std::unique_ptr<Trainer> trainer =
      CreateOrDie(SmallJob(dir, {"training.eval_interval=2", "checkpoint.interval_steps=2",
                                 "checkpoint.keep_last=1", "checkpoint.keep_best=true"}));
  ASSERT_NE(trainer, nullptr);
  ASSERT_TRUE(trainer->Run().ok());
  ASSERT_EQ(trainer->evaluations().size(), 3u);
  const inference::EvalStats* lowest = &trainer->evaluations()[0];
  for (const inference::EvalStats& eval : trainer->evaluations()) {
    if (eval.loss < lowest->loss) lowest = &eval;
  }
  std::vector<std::string> kept = {absl::StrFormat("step_%08d", lowest->step), "step_00000006"};
  kept.erase(std::unique(kept.begin(), kept.end()), kept.end());
  EXPECT_EQ(Entries(dir), kept);
  for (const std::string& name : kept) {
    absl::StatusOr<CheckpointIndex> index = ReadCheckpointIndex(fs::path(dir) / name);
    ASSERT_TRUE(index.ok() && index->eval_loss.has_value()) << name;
    EXPECT_EQ(index->kelvin_version, KelvinVersion()) << name;
    const int64_t step = index->steps_completed;
    EXPECT_EQ(*index->eval_loss, trainer->evaluations()[step / 2 - 1].loss) << name;
  }
  const std::string hf = CheckpointDir("keep_best_hf");
  const absl::StatusOr<int64_t> converted =
      launcher::ConvertCheckpointToHf(SmallJob(dir), hf, {CheckpointChoice::Best()});
  ASSERT_TRUE(converted.ok()) << converted.status();
  EXPECT_EQ(*converted, lowest->step);
  // `kelvin eval --best` and `--step N` restore those checkpoints and score what the run scored
  // at their steps; a step without a checkpoint is an error naming what the directory holds.
  for (const CheckpointChoice& choice : {CheckpointChoice::Best(), CheckpointChoice::Step(6)}) {
    const int64_t step = choice.best ? lowest->step : 6;
    const absl::StatusOr<inference::JobEvaluation> eval =
        inference::EvaluateJobOnEverySet(SmallJob(dir), choice);
    ASSERT_TRUE(eval.ok()) << eval.status();
    EXPECT_EQ(eval->main.step, step);
    EXPECT_EQ(eval->main.loss, trainer->evaluations()[step / 2 - 1].loss) << "step " << step;
  }
  EXPECT_THAT(std::string(inference::EvaluateJobOnEverySet(SmallJob(dir), CheckpointChoice::Step(3))
                              .status()
                              .message()),
              HasSubstr("checkpoint.dir=\"" + dir +
                        "\" has no complete checkpoint of step 3 (it has steps"));
  EXPECT_THAT(std::string(inference::EvaluateJobOnEverySet(SmallJob(""), CheckpointChoice::Best())
                              .status()
                              .message()),
              HasSubstr("kelvin eval --step / --best) reads the job's checkpoints: set "
                        "checkpoint.dir"));
  // `kelvin eval --all`: each kept checkpoint, oldest first, scored as the run scored it.
  const absl::StatusOr<std::vector<inference::JobEvaluation>> every =
      inference::EvaluateEveryCheckpoint(SmallJob(dir));
  ASSERT_TRUE(every.ok()) << every.status();
  std::vector<int64_t> kept_steps = {lowest->step, 6};
  kept_steps.erase(std::unique(kept_steps.begin(), kept_steps.end()), kept_steps.end());
  ASSERT_EQ(every->size(), kept_steps.size());
  for (size_t i = 0; i < kept_steps.size(); ++i) {
    EXPECT_EQ((*every)[i].main.step, kept_steps[i]);
    EXPECT_EQ((*every)[i].main.loss, trainer->evaluations()[kept_steps[i] / 2 - 1].loss);
  }
  EXPECT_THAT(std::string(inference::EvaluateEveryCheckpoint(SmallJob("")).status().message()),
              HasSubstr("kelvin eval --all reads the job's checkpoints: set checkpoint.dir"));
  const std::string empty = CheckpointDir("eval_all_empty");
  EXPECT_THAT(std::string(inference::EvaluateEveryCheckpoint(SmallJob(empty)).status().message()),
              HasSubstr("holds no complete checkpoint (step_<N> directories): nothing to "
                        "evaluate"));
  fs::remove_all(dir);
  fs::remove_all(hf);
}

// kelvin convert writes a checkpoint's weights as Hugging Face files (the newest, a step's or the
// best), kelvin eval scores them.
TEST(Checkpoint, ConvertWritesTheCheckpointsWeightsAndEvalScoresThem) {
  const std::string dir = CheckpointDir("convert");
  std::unique_ptr<Trainer> trained = CreateOrDie(SmallJob(dir, {"training.eval_interval=6"}));
  ASSERT_NE(trained, nullptr);
  ASSERT_TRUE(trained->Run().ok());
  ASSERT_EQ(trained->evaluations().size(), 1u);

  // Convert builds no model: a job set to train on CUDA converts on this machine, GPU or not.
  const std::string hf = CheckpointDir("convert_hf");
  const absl::StatusOr<int64_t> step =
      launcher::ConvertCheckpointToHf(SmallJob(dir, {"training.device=CUDA"}), hf);
  ASSERT_TRUE(step.ok()) << step.status();
  EXPECT_EQ(*step, 6);
  // A job without SSA refuses the SSA checkpoint before writing anything, naming the flag.
  const std::string refused = CheckpointDir("convert_refused");
  EXPECT_THAT(std::string(launcher::ConvertCheckpointToHf(
                              SmallJob(dir, {"model.ssa.enabled=false"}), refused)
                              .status()
                              .message()),
              HasSubstr("the checkpoint was trained with SSA; set model.ssa.enabled=true and "
                        "model.ssa.query_temperature=true"));
  EXPECT_FALSE(fs::exists(refused));
  // The export is an SSA model for transformers, its card naming what produced it.
  EXPECT_THAT(testing::FileBytes(hf + "/config.json"), HasSubstr("\"model_type\": \"ssa_llama\""));
  const std::string card = testing::FileBytes(hf + "/README.md");
  EXPECT_THAT(card, HasSubstr("| steps trained | 6 |"));
  EXPECT_THAT(card, HasSubstr(absl::StrFormat("| last evaluation loss | %.6f |",
                                              trained->evaluations().back().loss)));
  EXPECT_THAT(card, HasSubstr("| last training loss | not recorded |"));
  EXPECT_TRUE(fs::exists(hf + "/modeling_ssa_llama.py"));
  // The converted directory loads as a model source and holds the trained weights bit for bit.
  std::unique_ptr<Trainer> loaded = CreateOrDie(SmallJob("", {"model.hf_dir=\"" + hf + "\""}));
  ASSERT_NE(loaded, nullptr);
  for (const ParameterSet::Entry& e : trained->model().parameters().entries()) {
    EXPECT_TRUE(testing::BitIdentical(loaded->model().parameters().value(e.name), e.value, e.name));
  }
  // A job that does not enable SSA takes the export's; one that contradicts it is an error naming
  // both.
  const absl::StatusOr<models::LlamaConfig> imported = ResolveModelArchitecture(
      SmallJob("", {"model.hf_dir=\"" + hf + "\"", "model.ssa.enabled=false"}).model());
  ASSERT_TRUE(imported.ok()) << imported.status();
  ASSERT_TRUE(imported->ssa.has_value());
  EXPECT_EQ(imported->ssa->alpha_init, trained->model().config().ssa->alpha_init);
  EXPECT_TRUE(imported->ssa->value_temperature && imported->ssa->token_aware);
  const auto contradiction = [&](std::vector<std::string> settings) {
    settings.push_back("model.hf_dir=\"" + hf + "\"");
    return std::string(ResolveModelArchitecture(SmallJob("", settings).model()).status().message());
  };
  EXPECT_THAT(contradiction({"model.ssa.value_temperature=false"}),
              HasSubstr("model.ssa contradicts model.hf_dir=" + hf +
                        " (its config.json \"ssa\"): model.ssa.value_temperature=false but the "
                        "directory has true"));
  EXPECT_THAT(
      contradiction({"model.ssa.temperature_clamp.lo=0.5", "model.ssa.temperature_clamp.hi=2"}),
      HasSubstr("model.ssa.temperature_clamp=[0.5, 2] but the directory has none"));
  // eval restores the checkpoint and scores what the run's own last evaluation scored.
  const absl::StatusOr<inference::EvalStats> eval = inference::EvaluateJob(SmallJob(dir));
  ASSERT_TRUE(eval.ok()) << eval.status();
  EXPECT_EQ(eval->step, 6);
  EXPECT_EQ(eval->loss, trained->evaluations()[0].loss);
  EXPECT_EQ(eval->retrieval_accuracy, trained->evaluations()[0].retrieval_accuracy);
  EXPECT_EQ(eval->token_accuracy, trained->evaluations()[0].token_accuracy);
  fs::remove_all(dir);
  fs::remove_all(hf);
}

TEST(Checkpoint, ConvertNeedsACheckpoint) {
  EXPECT_THAT(launcher::ConvertCheckpointToHf(SmallJob(""), "/tmp/unused").status().message(),
              HasSubstr("kelvin convert reads the job's checkpoints: set checkpoint.dir"));
  const std::string dir = CheckpointDir("convert_empty");
  EXPECT_THAT(launcher::ConvertCheckpointToHf(SmallJob(dir), "/tmp/unused").status().message(),
              HasSubstr("checkpoint.dir=\"" + dir +
                        "\" holds no complete checkpoint (step_<N> directories): nothing to "
                        "convert"));
  // Saved where the run did not evaluate: no checkpoint is the best.
  WriteIndexOnly(dir, 2, std::nullopt);
  EXPECT_THAT(
      launcher::ConvertCheckpointToHf(SmallJob(dir), "/tmp/unused", {CheckpointChoice::Best()})
          .status()
          .message(),
      HasSubstr("holds no checkpoint with an evaluation loss (those saved at steps the run "
                "evaluated at, with training.eval_interval set)"));
  fs::remove_all(dir);
}

TEST(Checkpoint, RequiredWithoutACheckpointIsAClearError) {
  const std::string dir = CheckpointDir("required");
  const absl::StatusOr<std::unique_ptr<Trainer>> trainer =
      Trainer::Create(SmallJob(dir, {"checkpoint.resume=REQUIRED"}));
  ASSERT_FALSE(trainer.ok());
  EXPECT_THAT(std::string(trainer.status().message()),
              HasSubstr("checkpoint.resume=REQUIRED but checkpoint.dir=\"" + dir +
                        "\" holds no complete checkpoint"));
}

TEST(Checkpoint, ResumingWithAnotherDataOrderWarnsWhatChanged) {
  const std::string dir = CheckpointDir("data_order");
  ASSERT_TRUE(TrainOneStep(dir));
  ::testing::internal::CaptureStderr();
  std::unique_ptr<Trainer> same = CreateOrDie(SmallJob(dir, {"lr_schedule.warmup_steps=0"}));
  EXPECT_THAT(::testing::internal::GetCapturedStderr(),
              Not(HasSubstr("the training data from here on")));
  ::testing::internal::CaptureStderr();
  std::unique_ptr<Trainer> bigger =
      CreateOrDie(SmallJob(dir, {"lr_schedule.warmup_steps=0", "training.global_batch_size=8"}));
  ASSERT_NE(bigger, nullptr);
  EXPECT_EQ(bigger->start_step(), 1);
  EXPECT_THAT(::testing::internal::GetCapturedStderr(),
              HasSubstr("the checkpoint's run had training.global_batch_size=4, this job has 8: "
                        "the training data from here on is not what that run would have read"));
  fs::remove_all(dir);
}

TEST(Checkpoint, AMissingPartNamesItAndWhatToDo) {
  const std::string dir = CheckpointDir("missing_part");
  ASSERT_TRUE(TrainOneStep(dir));
  const fs::path step = fs::path(dir) / "step_00000001";
  fs::remove(step / "part_0_of_1.safetensors");
  const absl::StatusOr<std::unique_ptr<Trainer>> resumed = Trainer::Create(SmallJob(dir));
  ASSERT_FALSE(resumed.ok());
  EXPECT_EQ(resumed.status().code(), absl::StatusCode::kNotFound);  // damage: skip_damaged skips it
  EXPECT_THAT(std::string(resumed.status().message()),
              HasSubstr((step / "part_0_of_1.safetensors").string() +
                        " is missing: the checkpoint's checkpoint.json names 1 part file; put it "
                        "back, or delete " +
                        step.string() + " (or set checkpoint.skip_damaged: true)"));
  fs::remove_all(dir);
}

TEST(Checkpoint, ResumingWithOtherKernelsWarnsThatTheRunIsNotBitIdentical) {
  const std::string dir = CheckpointDir("libraries");
  ASSERT_TRUE(TrainOneStep(dir));
  const fs::path saved = fs::path(dir) / "step_00000001";
  absl::StatusOr<CheckpointIndex> index = ReadCheckpointIndex(saved);
  ASSERT_TRUE(index.ok()) << index.status();
  EXPECT_EQ(index->libraries, LibraryVersions());
  ::testing::internal::CaptureStderr();
  std::unique_ptr<Trainer> same = CreateOrDie(SmallJob(dir, {"lr_schedule.warmup_steps=0"}));
  EXPECT_THAT(::testing::internal::GetCapturedStderr(),
              Not(HasSubstr("the checkpoint was written with")));
  // As a requeue onto a CPU where OpenBLAS picks other kernels records it.
  index->libraries = "OpenBLAS 0.3.21 DYNAMIC_ARCH Haswell; built without CUDA";
  ASSERT_TRUE(WriteCheckpointIndex(saved, *index).ok());
  ::testing::internal::CaptureStderr();
  std::unique_ptr<Trainer> moved = CreateOrDie(SmallJob(dir, {"lr_schedule.warmup_steps=0"}));
  ASSERT_NE(moved, nullptr);
  EXPECT_EQ(moved->start_step(), 1);
  EXPECT_THAT(
      ::testing::internal::GetCapturedStderr(),
      HasSubstr("the checkpoint was written with OpenBLAS 0.3.21 DYNAMIC_ARCH Haswell; built "
                "without CUDA; this run has " +
                LibraryVersions() +
                ": other kernels round differently, so the run continues within rounding"));
  fs::remove_all(dir);
}

// Writes a checkpoint part holding `tensors`, with `metadata` and each tensor's checksum.
absl::Status WritePart(const fs::path& path,
                       const std::vector<std::pair<std::string, Tensor>>& tensors,
                       std::map<std::string, std::string> metadata) {
  for (const auto& [name, data] : tensors) {
    const Tensor contiguous = testing::Cast(data, data.dtype());
    metadata[kChecksumKey + name] = FormatChecksum(io::Crc32c(
        std::string_view(static_cast<const char*>(contiguous.raw_data()), contiguous.nbytes())));
  }
  return io::WriteSafetensors(path.string(), tensors, metadata);
}

// Flips one bit of `path` at byte `offset` from its end.
void FlipBitFromEnd(const fs::path& path, std::streamoff offset) {
  std::fstream file(path, std::ios::in | std::ios::out | std::ios::binary);
  file.seekg(-offset, std::ios::end);
  char byte = 0;
  file.read(&byte, 1);
  byte = static_cast<char>(byte ^ 0x10);
  file.seekp(-offset, std::ios::end);
  file.write(&byte, 1);
}

// Another job's or another model's checkpoint, a part holding half a tensor (or one half twice, or
// the whole and a half again), a truncated or missing part, a missing index, a bit flipped in a
// part after the save (its checksum) and another version's format are errors naming the problem.
TEST(Checkpoint, DamagedForeignOrMismatchedCheckpointsAreClearErrors) {
  const std::string dir = CheckpointDir("damaged");
  ASSERT_TRUE(TrainOneStep(dir));
  const fs::path checkpoint = fs::path(dir) / "step_00000001";
  ASSERT_TRUE(fs::exists(checkpoint));

  // Another job's checkpoint directory.
  absl::StatusOr<std::unique_ptr<Trainer>> other =
      Trainer::Create(SmallJob(dir, {"name=\"other_job\""}));
  ASSERT_FALSE(other.ok());
  EXPECT_THAT(
      std::string(other.status().message()),
      HasSubstr("is a checkpoint of job \"passkey_tiny_cpu\", not of this job \"other_job\""));

  // Another model (SSA off: the checkpoint has tensors this model lacks, named with the flag).
  absl::StatusOr<std::unique_ptr<Trainer>> vanilla =
      Trainer::Create(SmallJob(dir, {"model.ssa.enabled=false"}));
  ASSERT_FALSE(vanilla.ok());
  EXPECT_THAT(std::string(vanilla.status().message()),
              HasSubstr("which this job's model does not: the checkpoint was trained with SSA"));

  // A part that holds only half of a tensor (its region says so, consistently).
  const fs::path part = checkpoint / "part_0_of_1.safetensors";
  const fs::path whole_part = checkpoint.parent_path() / "whole_part.safetensors";  // kept aside
  fs::copy_file(part, whole_part);

  // A bit flipped in the data after the save (the last bytes: a tensor's, whichever is last).
  FlipBitFromEnd(part, 3);
  absl::StatusOr<std::unique_ptr<Trainer>> flipped = Trainer::Create(SmallJob(dir));
  ASSERT_FALSE(flipped.ok());
  EXPECT_THAT(std::string(flipped.status().message()), HasSubstr("fail their checksum (crc32c "));
  EXPECT_THAT(std::string(flipped.status().message()), HasSubstr(part.string()));
  fs::copy_file(whole_part, part, fs::copy_options::overwrite_existing);
  const std::string norm = "model.norm.weight";
  std::vector<std::pair<std::string, Tensor>> first_half, second_half;  // of the norm alone
  std::map<std::string, std::string> first_half_region, second_half_region;
  {
    absl::StatusOr<io::SafetensorsFile> file = io::SafetensorsFile::Open(part.string());
    ASSERT_TRUE(file.ok()) << file.status();
    std::vector<std::pair<std::string, Tensor>> tensors;
    for (const io::SafetensorsEntry& entry : file->entries()) {
      absl::StatusOr<Tensor> data = file->Read(entry.name);
      ASSERT_TRUE(data.ok()) << data.status();
      tensors.emplace_back(entry.name, *data);
    }
    std::map<std::string, std::string> metadata = file->metadata();
    absl::StatusOr<io::TensorRegion> region =
        io::TensorRegion::Decode(metadata.at("region:" + norm));
    ASSERT_TRUE(region.ok()) << region.status();
    const int64_t half = region->numel() / 2;
    // Parts of this save: its run and step (another save's part is refused for that alone).
    first_half_region = {{"region:" + norm, region->Elements(0, half).Encode()},
                         {kRunKey, metadata.at(kRunKey)},
                         {kStepKey, metadata.at(kStepKey)}};
    second_half_region = first_half_region;
    second_half_region["region:" + norm] = region->Elements(half, half).Encode();
    metadata["region:" + norm] = region->Elements(0, half).Encode();
    for (auto& [name, data] : tensors) {
      if (name == norm) {
        second_half = {{name, data.Slice(half, 2 * half)}};
        data = data.Slice(0, half);
        first_half = {{name, data}};
      }
    }
    file = absl::InternalError("closed");  // unmap before the rewrite
    ASSERT_TRUE(WritePart(part, tensors, metadata).ok());
  }
  const std::string of_norm = " of the 128 of \"" + norm + "\" [128]";
  absl::StatusOr<std::unique_ptr<Trainer>> partial = Trainer::Create(SmallJob(dir));
  ASSERT_FALSE(partial.ok());
  EXPECT_THAT(std::string(partial.status().message()),
              HasSubstr("no part holds elements [64, 128)" + of_norm));

  // A second part holding the same half again: as many elements as the tensor has, but one half
  // twice and the other not at all.
  const fs::path index = checkpoint / "checkpoint.json";
  const auto set_parts = [&](int from, int to) {
    std::string text = testing::FileBytes(index);
    const std::string old_count = "\"parts\": " + std::to_string(from);
    text.replace(text.find(old_count), old_count.size(), "\"parts\": " + std::to_string(to));
    std::ofstream(index) << text;
  };
  const fs::path first_of_two = checkpoint / "part_0_of_2.safetensors";
  const fs::path second_of_two = checkpoint / "part_1_of_2.safetensors";
  fs::rename(part, first_of_two);
  ASSERT_TRUE(WritePart(second_of_two, first_half, first_half_region).ok());
  set_parts(1, 2);
  absl::StatusOr<std::unique_ptr<Trainer>> twice = Trainer::Create(SmallJob(dir));
  ASSERT_FALSE(twice.ok());
  EXPECT_THAT(std::string(twice.status().message()),
              HasSubstr("its parts hold elements [0, 64)" + of_norm + " more than once"));

  // The whole tensor, and its second half again in another part (every element held, some twice).
  fs::copy_file(whole_part, first_of_two, fs::copy_options::overwrite_existing);
  ASSERT_TRUE(WritePart(second_of_two, second_half, second_half_region).ok());
  absl::StatusOr<std::unique_ptr<Trainer>> duplicated = Trainer::Create(SmallJob(dir));
  ASSERT_FALSE(duplicated.ok());
  EXPECT_THAT(std::string(duplicated.status().message()),
              HasSubstr("its parts hold elements [64, 128)" + of_norm + " more than once"));
  fs::remove(whole_part);

  // A part file missing (the index counts two).
  fs::remove(second_of_two);
  absl::StatusOr<std::unique_ptr<Trainer>> missing = Trainer::Create(SmallJob(dir));
  ASSERT_FALSE(missing.ok());
  EXPECT_THAT(std::string(missing.status().message()), HasSubstr(second_of_two.string()));

  // A truncated part file.
  set_parts(2, 1);
  fs::rename(first_of_two, part);
  fs::resize_file(part, fs::file_size(part) / 2);
  absl::StatusOr<std::unique_ptr<Trainer>> damaged = Trainer::Create(SmallJob(dir));
  ASSERT_FALSE(damaged.ok());
  EXPECT_THAT(std::string(damaged.status().message()), HasSubstr(part.string()));

  // A checkpoint of another Kelvin version's format.
  {
    std::string text = testing::FileBytes(index);
    const std::string current = std::string("\"") + kCheckpointFormat + "\"";
    text.replace(text.find(current), current.size(), "\"kelvin-checkpoint-2\"");
    std::ofstream(index) << text;
  }
  absl::StatusOr<std::unique_ptr<Trainer>> older = Trainer::Create(SmallJob(dir));
  ASSERT_FALSE(older.ok());
  EXPECT_THAT(std::string(older.status().message()),
              HasSubstr("is a \"kelvin-checkpoint-2\" checkpoint, which another version of Kelvin "
                        "wrote; this one reads \"kelvin-checkpoint-4\""));

  // No index: not a (complete) checkpoint.
  fs::remove(index);
  absl::StatusOr<std::unique_ptr<Trainer>> unindexed = Trainer::Create(SmallJob(dir));
  ASSERT_FALSE(unindexed.ok());
  EXPECT_THAT(std::string(unindexed.status().message()),
              HasSubstr("not a complete Kelvin checkpoint"));
  fs::remove_all(dir);
}

}  // namespace
}  // namespace kelvin::training

namespace kelvin::training {
namespace {

// A run of `steps` steps saving every step into `dir`; its trainer.
std::unique_ptr<Trainer> RunSavingEveryStep(const std::string& dir, int steps) {
  std::unique_ptr<Trainer> trainer = CreateOrDie(
      SmallJob(dir, {"checkpoint.interval_steps=1", absl::StrCat("training.steps=", steps),
                     "lr_schedule.warmup_steps=1"}));
  EXPECT_NE(trainer, nullptr);
  if (trainer != nullptr) {
    EXPECT_TRUE(trainer->Run().ok());
  }
  return trainer;
}

std::string CreateError(const config::JobConfig& job) {
  const absl::StatusOr<std::unique_ptr<Trainer>> trainer = Trainer::Create(job);
  return trainer.ok() ? "" : std::string(trainer.status().message());
}

// Each part carries its save's run and step: a part copied from another step or another run, an
// edited step in checkpoint.json and a renamed step directory are refused, not restored as this
// step (every one of them restored silently before).
TEST(CheckpointIdentity, PartsOfAnotherSaveEditedStepsAndRenamedDirectoriesAreRefused) {
  const std::string dir = CheckpointDir("identity"), other = CheckpointDir("identity_other");
  RunSavingEveryStep(dir, 2);
  RunSavingEveryStep(other, 2);  // the same job and steps: another run
  const config::JobConfig job = SmallJob(dir, {"training.steps=2", "lr_schedule.warmup_steps=1"});
  const fs::path step1 = fs::path(dir) / "step_00000001", step2 = fs::path(dir) / "step_00000002";
  const fs::path part = step2 / "part_0_of_1.safetensors";
  const fs::path kept = fs::path(dir) / "kept_part";
  fs::copy_file(part, kept);

  fs::copy_file(step1 / "part_0_of_1.safetensors", part, fs::copy_options::overwrite_existing);
  EXPECT_THAT(CreateError(job),
              HasSubstr(part.string() + " is a part of the save of step 1 of run"));
  EXPECT_THAT(CreateError(job), HasSubstr("but its checkpoint.json is of step 2 of run"));

  fs::copy_file(fs::path(other) / "step_00000002" / "part_0_of_1.safetensors", part,
                fs::copy_options::overwrite_existing);
  EXPECT_THAT(CreateError(job), HasSubstr("is a part of the save of step 2 of run"));
  EXPECT_THAT(CreateError(job), HasSubstr("a part copied from another checkpoint"));
  fs::copy_file(kept, part, fs::copy_options::overwrite_existing);
  EXPECT_EQ(CreateError(job), "");  // whole again

  const fs::path index = step2 / "checkpoint.json";
  const std::string original = testing::FileBytes(index);
  std::string edited = original;
  edited.replace(edited.find("\"step\": 2"), 9, "\"step\": 1");
  std::ofstream(index) << edited;
  EXPECT_THAT(CreateError(job),
              HasSubstr(index.string() + " records step 1 but its directory is "
                                         "of step 2: the directory was renamed or the index "
                                         "edited"));
  std::ofstream(index) << original;

  fs::rename(step2, fs::path(dir) / "step_00000003");
  EXPECT_THAT(CreateError(job), HasSubstr("records step 2 but its directory is of step 3"));
  fs::remove_all(dir);
  fs::remove_all(other);
}

// What interrupted saves and deletions leave is never taken for a checkpoint, and the next run
// removes it; pruning renames a checkpoint before deleting it, so a kill meanwhile leaves a
// .deleting directory, not an empty step_<N> that looks complete.
TEST(CheckpointLeftovers, PartialAndDeletingDirectoriesAreIgnoredAndRemovedAtStart) {
  const std::string dir = CheckpointDir("leftovers");
  RunSavingEveryStep(dir, 2);
  for (const char* leftover : {"step_00000007.partial", "step_00000001.deleting"}) {
    fs::create_directories(fs::path(dir) / leftover / "inside");
  }
  const absl::StatusOr<std::vector<int64_t>> steps = CompleteCheckpointSteps(dir);
  ASSERT_TRUE(steps.ok()) << steps.status();
  EXPECT_THAT(*steps, ::testing::ElementsAre(1, 2));
  std::unique_ptr<Trainer> trainer = CreateOrDie(
      SmallJob(dir, {"training.steps=3", "lr_schedule.warmup_steps=1", "checkpoint.keep_last=1"}));
  ASSERT_NE(trainer, nullptr);
  EXPECT_EQ(trainer->start_step(), 2);
  ASSERT_TRUE(trainer->Run().ok());
  EXPECT_THAT(Entries(dir), ::testing::ElementsAre("step_00000003"));  // pruned and cleaned
  fs::remove_all(dir);
}

// checkpoint.skip_damaged: a damaged newest checkpoint is set aside as step_<N>.damaged with a
// warning and the run resumes from the one before; without it the damage stops the job.
TEST(CheckpointLeftovers, SkipDamagedResumesFromTheNewestIntactCheckpoint) {
  const std::string dir = CheckpointDir("skip_damaged");
  RunSavingEveryStep(dir, 3);
  const fs::path newest = fs::path(dir) / "step_00000003";
  fs::resize_file(newest / "part_0_of_1.safetensors", 100);  // truncated
  const config::JobConfig job = SmallJob(dir, {"training.steps=4", "lr_schedule.warmup_steps=1"});
  EXPECT_THAT(CreateError(job), HasSubstr((newest / "part_0_of_1.safetensors").string()));
  config::JobConfig skipping = job;
  skipping.mutable_checkpoint()->set_skip_damaged(true);
  std::unique_ptr<Trainer> trainer = CreateOrDie(skipping);
  ASSERT_NE(trainer, nullptr);
  EXPECT_EQ(trainer->start_step(), 2);
  EXPECT_TRUE(fs::exists(newest.string() + ".damaged"));
  EXPECT_FALSE(fs::exists(newest));
  // Another model's checkpoint is no damage: nothing is set aside, the error stands.
  config::JobConfig vanilla = skipping;
  vanilla.mutable_model()->mutable_ssa()->set_enabled(false);
  EXPECT_THAT(CreateError(vanilla), HasSubstr("the checkpoint was trained with SSA"));
  EXPECT_TRUE(fs::exists(fs::path(dir) / "step_00000002"));
  fs::remove_all(dir);
}

// A save that fails to write (here a file size limit, as a full disk fails) is an error naming
// the file and leaves no step_<N>.partial directory behind.
TEST(CheckpointLeftovers, AFailedSaveLeavesNoPartialDirectory) {
  const std::string dir = CheckpointDir("full_disk");
  std::unique_ptr<Trainer> trainer = CreateOrDie(SmallJob(
      dir, {"checkpoint.interval_steps=1", "training.steps=2", "lr_schedule.warmup_steps=1"}));
  ASSERT_NE(trainer, nullptr);
  rlimit saved{};
  getrlimit(RLIMIT_FSIZE, &saved);
  std::signal(SIGXFSZ, SIG_IGN);
  const rlimit small{64 * 1024, saved.rlim_max};  // a part is ~10 MB
  setrlimit(RLIMIT_FSIZE, &small);
  const absl::Status failed = trainer->Run();
  setrlimit(RLIMIT_FSIZE, &saved);
  EXPECT_EQ(failed.code(), absl::StatusCode::kResourceExhausted) << failed;
  EXPECT_THAT(std::string(failed.message()), HasSubstr("part_0_of_1.safetensors"));
  EXPECT_THAT(Entries(dir), ::testing::IsEmpty());
  fs::remove_all(dir);
}

TEST(CheckpointLeftovers, AResumeAtTheLastStepTrainsNothing) {
  const std::string dir = CheckpointDir("done");
  RunSavingEveryStep(dir, 2);
  std::unique_ptr<Trainer> again = CreateOrDie(SmallJob(
      dir, {"checkpoint.interval_steps=1", "training.steps=2", "lr_schedule.warmup_steps=1"}));
  ASSERT_NE(again, nullptr);
  EXPECT_EQ(again->start_step(), 2);
  ASSERT_TRUE(again->Run().ok());
  EXPECT_TRUE(again->history().empty());
  fs::remove_all(dir);
}

}  // namespace
}  // namespace kelvin::training
