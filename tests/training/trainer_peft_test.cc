// Parameter-efficient fine-tuning on a frozen base: after a few steps of the demo job the frozen
// weights hold their initial values bit for bit, each trainable one has moved, and a frozen
// parameter never had a gradient buffer.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/copy.h"
#include "core/io/hf_checkpoint.h"
#include "inference/forward_model.h"
#include "inference/job_evaluation.h"
#include "launcher/commands/convert_command.h"
#include "launcher/config/job_config.h"
#include "tests/testing/files.h"
#include "training/checkpoint/checkpoint_format.h"
#include "training/trainer.h"

namespace kelvin::training {
namespace {

namespace fs = std::filesystem;

// Trains the SSA demo job with `peft_overrides` (and LoRA of rank 4 beside `lora_targets`) 3
// steps; checks every parameter against its value before the first step: unchanged when frozen,
// changed when trainable. Returns the trainable parameters' names.
std::vector<std::string> TrainAndCompare(const std::vector<std::string>& peft_overrides,
                                         const std::vector<std::string>& lora_targets = {}) {
  std::vector<std::string> overrides = {
      "model.ssa.enabled=true",       "lr_schedule.warmup_steps=1", "training.seq_length=110",
      "training.export_hf_dir=\"\"",  "training.steps=3",           "training.micro_batch_size=2",
      "training.global_batch_size=2", "training.eval_interval=0"};
  overrides.insert(overrides.end(), peft_overrides.begin(), peft_overrides.end());
  if (!lora_targets.empty()) {
    overrides.push_back("model.lora.rank=4");
    overrides.push_back("model.lora.targets=[" + absl::StrJoin(lora_targets, ", ") + "]");
  }
  const absl::StatusOr<config::JobConfig> job =
      launcher::LoadJobConfig(testing::DemoJobPath(), overrides);
  EXPECT_TRUE(job.ok()) << job.status();
  if (!job.ok()) return {};
  absl::StatusOr<std::unique_ptr<Trainer>> trainer = Trainer::Create(*job);
  EXPECT_TRUE(trainer.ok()) << trainer.status();
  if (!trainer.ok()) return {};
  const ParameterSet& params = (*trainer)->model().parameters();
  std::map<std::string, Tensor> before;
  for (const ParameterSet::Entry& e : params.entries()) {
    before[e.name] = CopyToDevice(Context::Cpu(), e.value, Device::Cpu());
    EXPECT_EQ(e.grad.defined(), e.trainable) << e.name;
  }
  const absl::Status ran = (*trainer)->Run();
  EXPECT_TRUE(ran.ok()) << ran;
  std::vector<std::string> trainable;
  for (const ParameterSet::Entry& e : params.entries()) {
    const Tensor& old = before.at(e.name);
    const bool same = std::memcmp(old.raw_data(), e.value.raw_data(), e.value.nbytes()) == 0;
    if (e.trainable) {
      trainable.push_back(e.name);
      EXPECT_FALSE(same) << e.name << " trains but did not change";
    } else {
      EXPECT_TRUE(same) << e.name << " is frozen but changed";
    }
  }
  return trainable;
}

TEST(TrainerPeft, SsaOnlyTuningTrainsTheTemperaturesAlone) {
  const std::vector<std::string> trainable = TrainAndCompare({"model.peft.ssa=true"});
  ASSERT_FALSE(trainable.empty());
  for (const std::string& name : trainable) {
    EXPECT_NE(name.find(".self_attn.ssa."), std::string::npos) << name;
  }
}

TEST(TrainerPeft, NormsAndEmbeddingsTrainBesideTheTemperatures) {
  const std::vector<std::string> trainable = TrainAndCompare(
      {"model.peft.ssa=true", "model.peft.norms=true", "model.peft.embeddings=true"});
  int norms = 0, embeddings = 0;
  for (const std::string& name : trainable) {
    if (name.ends_with("layernorm.weight") || name == "model.norm.weight") ++norms;
    if (name == "model.embed_tokens.weight" || name == "lm_head.weight") ++embeddings;
    EXPECT_EQ(name.find("_proj.weight"), std::string::npos) << name << " is a base projection";
  }
  EXPECT_GT(norms, 0);
  EXPECT_GT(embeddings, 0);
}

// LoRA beside the attention's q and v and the MLP's down projection: the adapters alone train
// (A from its peft draw, B from zero), every base weight and the frozen SSA stay as they were.
TEST(TrainerPeft, LoraAdaptersTrainAndTheBaseStaysFrozen) {
  const std::vector<std::string> trainable =
      TrainAndCompare({"model.peft.adapters=true"}, {"q_proj", "v_proj", "down_proj"});
  const size_t per_layer = 2 * 3;  // A and B of each of 3 targets
  EXPECT_EQ(trainable.size() % per_layer, 0u);
  EXPECT_FALSE(trainable.empty());
  for (const std::string& name : trainable) {
    EXPECT_TRUE(name.ends_with(".lora_A.weight") || name.ends_with(".lora_B.weight")) << name;
    EXPECT_TRUE(name.find("q_proj") != std::string::npos ||
                name.find("v_proj") != std::string::npos ||
                name.find("down_proj") != std::string::npos)
        << name;
  }
}

// SSA on but frozen (its backward computes the read-outs' gradients into scratch): the norms alone
// train.
TEST(TrainerPeft, NormsTrainBesideFrozenSsaParameters) {
  const std::vector<std::string> trainable = TrainAndCompare({"model.peft.norms=true"});
  ASSERT_FALSE(trainable.empty());
  for (const std::string& name : trainable) {
    EXPECT_TRUE(name.ends_with("layernorm.weight") || name == "model.norm.weight") << name;
  }
}

// Resumes `job` (4 steps) from its step-2 checkpoint: steps 3 and 4 as `whole` ran them, the same
// losses and weights bit for bit.
void ExpectResumeRepeatsTheLastTwoSteps(const config::JobConfig& job, Trainer& whole) {
  absl::StatusOr<std::unique_ptr<Trainer>> resumed = Trainer::Create(job);
  ASSERT_TRUE(resumed.ok()) << resumed.status();
  ASSERT_EQ((*resumed)->start_step(), 2);
  ASSERT_TRUE((*resumed)->Run().ok());
  ASSERT_EQ((*resumed)->history().size(), 2u);
  for (size_t i = 0; i < 2; ++i) {
    EXPECT_EQ((*resumed)->history()[i].loss, whole.history()[i + 2].loss) << "step " << i + 3;
  }
  for (const ParameterSet::Entry& e : whole.model().parameters().entries()) {
    const Tensor& other = (*resumed)->model().parameters().value(e.name);
    EXPECT_EQ(std::memcmp(other.raw_data(), e.value.raw_data(), e.value.nbytes()), 0) << e.name;
  }
}

// A checkpoint of a frozen-base job holds the trainable tensors alone; resuming from it (the base
// loaded again from the job's source) continues the run bit for bit, and kelvin eval scores it as
// the run did, and kelvin convert writes it over its base.
TEST(TrainerPeft, ResumesFromACheckpointOfTheTrainableTensors) {
  const fs::path dir = fs::path(::testing::TempDir()) / "kelvin_peft_resume";
  fs::remove_all(dir);
  const absl::StatusOr<config::JobConfig> job = launcher::LoadJobConfig(
      testing::DemoJobPath(),
      {"model.ssa.enabled=true", "model.peft.ssa=true", "model.peft.norms=true",
       "lr_schedule.warmup_steps=1", "training.seq_length=110", "training.export_hf_dir=\"\"",
       "training.steps=4", "training.micro_batch_size=2", "training.global_batch_size=2",
       "training.eval_interval=2", "checkpoint.interval_steps=2", "checkpoint.keep_last=2",
       "checkpoint.dir=\"" + dir.string() + "\""});
  ASSERT_TRUE(job.ok()) << job.status();
  absl::StatusOr<std::unique_ptr<Trainer>> whole = Trainer::Create(*job);
  ASSERT_TRUE(whole.ok()) << whole.status();
  ASSERT_TRUE((*whole)->Run().ok());
  // The step-2 checkpoint holds the SSA parameters and norms (and their moments), no projection.
  const fs::path step2 = dir / StepDirectoryName(2);
  std::string everything;
  for (const fs::directory_entry& file : fs::directory_iterator(step2)) {
    everything += testing::FileBytes(file.path());
  }
  EXPECT_NE(everything.find("ssa.query_readout"), std::string::npos);
  EXPECT_NE(everything.find("input_layernorm.weight"), std::string::npos);
  EXPECT_EQ(everything.find("q_proj.weight"), std::string::npos);
  EXPECT_EQ(everything.find("embed_tokens"), std::string::npos);

  // kelvin eval of the step-4 checkpoint: the base from the job's source, the checkpoint's tensors
  // over it, scored as the run scored it.
  const absl::StatusOr<inference::EvalStats> eval = inference::EvaluateJob(*job);
  ASSERT_TRUE(eval.ok()) << eval.status();
  EXPECT_EQ(eval->step, 4);
  EXPECT_EQ(eval->loss, (*whole)->evaluations().back().loss);

  // kelvin convert puts the checkpoint over the job's base (the preset's draw from the seed): the
  // model it writes is the trained one, bit for bit.
  const absl::StatusOr<int64_t> converted =
      launcher::ConvertCheckpointToHf(*job, (dir / "hf").string(), {});
  ASSERT_TRUE(converted.ok()) << converted.status();
  EXPECT_EQ(*converted, 4);
  const absl::StatusOr<io::HfCheckpoint> exported = io::HfCheckpoint::Open((dir / "hf").string());
  ASSERT_TRUE(exported.ok()) << exported.status();
  for (const ParameterSet::Entry& e : (*whole)->model().parameters().entries()) {
    const absl::StatusOr<Tensor> written = exported->Read(e.name, DType::kF32);
    ASSERT_TRUE(written.ok()) << written.status();
    EXPECT_EQ(std::memcmp(written->raw_data(), e.value.raw_data(), e.value.nbytes()), 0) << e.name;
  }
  fs::remove_all(dir / "hf");

  fs::remove_all(dir / StepDirectoryName(4));
  ExpectResumeRepeatsTheLastTwoSteps(*job, **whole);
  fs::remove_all(dir);
}

// LoRA dropout in the training steps alone: a run with dropout trains otherwise than one without;
// its periodic evaluation draws no mask (kelvin eval of its checkpoint, with none, gives the same
// loss); and a resume draws the masks the uninterrupted run drew (they are keyed by the samples,
// not by a generator's state): the same losses and weights bit for bit.
TEST(TrainerPeft, LoraDropoutActsInTrainingStepsAndResumesExactly) {
  const fs::path dir = fs::path(::testing::TempDir()) / "kelvin_lora_dropout";
  fs::remove_all(dir);
  const auto job_with = [&](const std::string& dropout, int steps) {
    absl::StatusOr<config::JobConfig> job = launcher::LoadJobConfig(
        testing::DemoJobPath(),
        {"model.peft.adapters=true", "model.lora.rank=4",
         "model.lora.targets=[q_proj, v_proj, o_proj, down_proj]", "model.lora.dropout=" + dropout,
         "lr_schedule.warmup_steps=1", "training.seq_length=110", "training.export_hf_dir=\"\"",
         absl::StrCat("training.steps=", steps), "training.micro_batch_size=2",
         "training.global_batch_size=4", "training.eval_interval=2", "checkpoint.interval_steps=2",
         "checkpoint.keep_last=2", "checkpoint.dir=\"" + (dir / dropout).string() + "\""});
    EXPECT_TRUE(job.ok()) << job.status();
    return job.value_or(config::JobConfig());
  };
  const config::JobConfig job = job_with("0.3", 4);
  absl::StatusOr<std::unique_ptr<Trainer>> whole = Trainer::Create(job);
  ASSERT_TRUE(whole.ok()) << whole.status();
  ASSERT_TRUE((*whole)->Run().ok());
  absl::StatusOr<std::unique_ptr<Trainer>> without = Trainer::Create(job_with("0", 2));
  ASSERT_TRUE(without.ok()) << without.status();
  ASSERT_TRUE((*without)->Run().ok());
  ASSERT_EQ((*whole)->history().size(), 4u);
  // B starts at zero, so step 1's loss is the base's either way; its update differs.
  EXPECT_EQ((*whole)->history()[0].loss, (*without)->history()[0].loss);
  EXPECT_NE((*whole)->history()[1].loss, (*without)->history()[1].loss);

  const absl::StatusOr<inference::EvalStats> eval = inference::EvaluateJob(job);
  ASSERT_TRUE(eval.ok()) << eval.status();
  EXPECT_EQ(eval->step, 4);
  EXPECT_EQ(eval->loss, (*whole)->evaluations().back().loss);

  fs::remove_all(dir / "0.3" / StepDirectoryName(4));
  ExpectResumeRepeatsTheLastTwoSteps(job, **whole);
  fs::remove_all(dir);
}

// Every path under `dir`, sorted.
std::vector<std::string> Tree(const fs::path& dir) {
  std::vector<std::string> paths;
  for (const fs::directory_entry& e : fs::recursive_directory_iterator(dir)) {
    paths.push_back(e.path().string());
  }
  std::sort(paths.begin(), paths.end());
  return paths;
}

// A frozen-base checkpoint records its base (the random draw of the job's training.seed); a resume,
// kelvin eval or a model load over another base (another seed) is refused, naming both, and leaves
// the directory as it was; over its own base the checkpoint loads as trained. A checkpoint without
// the record (an older Kelvin's) resumes unchecked.
TEST(TrainerPeft, RefusesAResumeOverAnotherBase) {
  const fs::path dir = fs::path(::testing::TempDir()) / "kelvin_peft_other_base";
  fs::remove_all(dir);
  std::vector<std::string> overrides = {"model.ssa.enabled=true",
                                        "model.peft.ssa=true",
                                        "lr_schedule.warmup_steps=1",
                                        "training.seq_length=110",
                                        "training.export_hf_dir=\"\"",
                                        "training.steps=2",
                                        "training.micro_batch_size=2",
                                        "training.global_batch_size=2",
                                        "training.eval_interval=0",
                                        "checkpoint.interval_steps=2",
                                        "checkpoint.dir=\"" + dir.string() + "\""};
  const absl::StatusOr<config::JobConfig> job =
      launcher::LoadJobConfig(testing::DemoJobPath(), overrides);
  ASSERT_TRUE(job.ok()) << job.status();
  absl::StatusOr<std::unique_ptr<Trainer>> trainer = Trainer::Create(*job);
  ASSERT_TRUE(trainer.ok()) << trainer.status();
  ASSERT_TRUE((*trainer)->Run().ok());
  const std::optional<models::LlamaBase>& base = (*trainer)->model().frozen_base();
  ASSERT_TRUE(base.has_value());
  const fs::path step2 = dir / StepDirectoryName(2);
  const absl::StatusOr<CheckpointIndex> index = ReadCheckpointIndex(step2);
  ASSERT_TRUE(index.ok()) << index.status();
  ASSERT_TRUE(index->base.has_value());
  EXPECT_EQ(index->base->source, "random weights from seed 1234");
  EXPECT_EQ(index->base->fingerprint, base->fingerprint);

  const std::vector<std::string> before = Tree(dir);
  overrides.push_back("training.seed=1235");
  const absl::StatusOr<config::JobConfig> other =
      launcher::LoadJobConfig(testing::DemoJobPath(), overrides);
  ASSERT_TRUE(other.ok()) << other.status();
  const absl::StatusOr<std::unique_ptr<Trainer>> resumed = Trainer::Create(*other);
  ASSERT_FALSE(resumed.ok());
  EXPECT_TRUE(absl::IsFailedPrecondition(resumed.status())) << resumed.status();
  for (const std::string& part :
       {step2.string() + " was trained on the frozen base random weights from seed 1234",
        std::string("this job's base is random weights from seed 1235"),
        std::string("checkpoint.resume=NEVER")}) {
    EXPECT_THAT(std::string(resumed.status().message()), ::testing::HasSubstr(part));
  }
  const absl::StatusOr<inference::EvalStats> eval = inference::EvaluateJob(*other);
  ASSERT_FALSE(eval.ok());
  EXPECT_THAT(std::string(eval.status().message()),
              ::testing::HasSubstr("was trained on the frozen base random weights from seed 1234"));
  // kelvin generate and eval --data load the model alone: the same refusal.
  const absl::StatusOr<TrainingPlacement> placement =
      inference::ResolveInferencePlacement(*other, inference::InferenceDevice::kCpu, 0);
  ASSERT_TRUE(placement.ok()) << placement.status();
  const absl::StatusOr<std::unique_ptr<models::LlamaModel>> loaded =
      inference::LoadInferenceModel(*other, {}, *placement, nullptr);
  ASSERT_FALSE(loaded.ok());
  EXPECT_THAT(std::string(loaded.status().message()),
              ::testing::HasSubstr("was trained on the frozen base random weights from seed 1234"));
  EXPECT_EQ(Tree(dir), before);

  // Over its own base the checkpoint's weights are the trained model's: the base drawn again, the
  // trainable tensors over it.
  const absl::StatusOr<std::unique_ptr<models::LlamaModel>> own =
      inference::LoadInferenceModel(*job, {}, *placement, nullptr);
  ASSERT_TRUE(own.ok()) << own.status();
  for (const ParameterSet::Entry& e : (*trainer)->model().parameters().entries()) {
    const Tensor& value = (*own)->parameters().value(e.name);
    EXPECT_EQ(std::memcmp(value.raw_data(), e.value.raw_data(), e.value.nbytes()), 0) << e.name;
  }

  // The same base resumes (and finds nothing left to do).
  absl::StatusOr<std::unique_ptr<Trainer>> again = Trainer::Create(*job);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ((*again)->start_step(), 2);
  again->reset();

  // A checkpoint written before Kelvin kept the record (its "base" removed) is accepted over any
  // base, with a warning that it cannot be checked.
  const fs::path index_file = step2 / "checkpoint.json";
  nlohmann::json index_json = nlohmann::json::parse(testing::FileBytes(index_file));
  ASSERT_EQ(index_json.erase("base"), 1u);
  std::ofstream(index_file) << index_json.dump(2);
  absl::StatusOr<std::unique_ptr<Trainer>> unchecked = Trainer::Create(*other);
  ASSERT_TRUE(unchecked.ok()) << unchecked.status();
  EXPECT_EQ((*unchecked)->start_step(), 2);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace kelvin::training
