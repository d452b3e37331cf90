// Parameter-efficient fine-tuning on a frozen base: after a few steps of the demo job the frozen
// weights hold their initial values bit for bit, each trainable one has moved, and a frozen
// parameter never had a gradient buffer.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_join.h"
#include "core/copy.h"
#include "core/io/hf_checkpoint.h"
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
  absl::StatusOr<std::unique_ptr<Trainer>> resumed = Trainer::Create(*job);
  ASSERT_TRUE(resumed.ok()) << resumed.status();
  EXPECT_EQ((*resumed)->start_step(), 2);
  ASSERT_TRUE((*resumed)->Run().ok());
  ASSERT_EQ((*resumed)->history().size(), 2u);
  for (size_t i = 0; i < 2; ++i) {
    EXPECT_EQ((*resumed)->history()[i].loss, (*whole)->history()[i + 2].loss) << "step " << i + 3;
  }
  for (const ParameterSet::Entry& e : (*whole)->model().parameters().entries()) {
    const Tensor& other = (*resumed)->model().parameters().value(e.name);
    EXPECT_EQ(std::memcmp(other.raw_data(), e.value.raw_data(), e.value.nbytes()), 0) << e.name;
  }
  fs::remove_all(dir);
}

}  // namespace
}  // namespace kelvin::training
