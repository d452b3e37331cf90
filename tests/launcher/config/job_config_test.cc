// Job-config loading: syntax errors with file:line:column and hints, overrides, default
// resolution and the resolved text, file errors, every ready job in configs/, and a fuzz test of
// random mutations of a valid job (never a crash, always a Status).
#include "launcher/config/job_config.h"

#include <gmock/gmock.h>
#include <google/protobuf/util/message_differencer.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "launcher/config/job_config_validation.h"
#include "training/trainer.h"

namespace kelvin::launcher {
namespace {

using ::google::protobuf::util::MessageDifferencer;
using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::StartsWith;

// The smallest valid job: every required field, nothing else.
constexpr char kMinimalJob[] = R"pb(
  model { preset: "tiny" }
  data { passkey {} }
  optimizer { lr: 1e-3 }
  training { steps: 10 global_batch_size: 4 seq_length: 128 }
)pb";

config::JobConfig ParsedMinimalJob() {
  absl::StatusOr<config::JobConfig> job = ParseJobConfigText(kMinimalJob, "minimal.textproto");
  EXPECT_TRUE(job.ok()) << job.status();
  return job.value_or(config::JobConfig());
}

std::string ParseError(std::string_view text) {
  const absl::StatusOr<config::JobConfig> job = ParseJobConfig(text, "job.textproto");
  EXPECT_FALSE(job.ok());
  return std::string(job.status().message());
}

std::string OverrideError(std::string_view assignment) {
  config::JobConfig job = ParsedMinimalJob();
  const absl::Status status = ApplyOverride(assignment, job);
  EXPECT_FALSE(status.ok());
  return std::string(status.message());
}

std::filesystem::path ConfigsDir() {
  return std::filesystem::path(KELVIN_FIXTURES_DIR).parent_path().parent_path() / "configs";
}

std::string WriteTempFile(const std::string& name, std::string_view text) {
  const std::string path = ::testing::TempDir() + name;
  std::ofstream(path, std::ios::binary) << text;
  return path;
}

// A UTF-8 byte-order mark before the first field (a Windows editor's) is skipped, as in
// config.json; anywhere else it is the parse error it was.
TEST(JobConfigParse, ALeadingByteOrderMarkIsSkipped) {
  const absl::StatusOr<config::JobConfig> job =
      ParseJobConfigText(absl::StrCat("\xEF\xBB\xBF", kMinimalJob), "bom.textproto");
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ(job->SerializeAsString(), ParsedMinimalJob().SerializeAsString());
  EXPECT_THAT(ParseError(absl::StrCat(kMinimalJob, "\xEF\xBB\xBF")), HasSubstr("job.textproto:"));
}

TEST(JobConfigParse, MinimalJobLoadsWithItsNameFromTheSource) {
  const absl::StatusOr<config::JobConfig> job =
      ParseJobConfig(kMinimalJob, "dir/minimal.textproto");
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ(job->name(), "minimal");
  EXPECT_EQ(job->model().preset(), "tiny");
}

TEST(JobConfigParse, NameFromTheSourceKeepsOnlyAllowedCharacters) {
  const absl::StatusOr<config::JobConfig> job = ParseJobConfig(kMinimalJob, "/d/my job+1.txtpb");
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ(job->name(), "my_job_1");
}

TEST(JobConfigParse, ExplicitNameWins) {
  const absl::StatusOr<config::JobConfig> job =
      ParseJobConfig(absl::StrCat("name: \"run-7\"", kMinimalJob), "dir/minimal.textproto");
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ(job->name(), "run-7");
}

TEST(JobConfigParse, UnknownFieldGivesLineColumnAndSuggestion) {
  const std::string message = ParseError("model { preset: \"tiny\" }\ntraining {\n  step: 5\n}\n");
  EXPECT_THAT(message, StartsWith("job.textproto:3:3: Message type "
                                  "\"kelvin.config.TrainingConfig\" has no field named \"step\"."));
  EXPECT_THAT(message, HasSubstr("Did you mean \"steps\"?"));
  EXPECT_THAT(message, HasSubstr("Fields of kelvin.config.TrainingConfig: steps, "));
  // Columns count tabs to the next multiple of 8, as in protobuf's other messages.
  EXPECT_THAT(ParseError("training {\n\t  step: 5\n}\n"), StartsWith("job.textproto:2:11: "));
}

TEST(JobConfigParse, FieldInTheWrongSectionNamesItsSection) {
  const std::string message = ParseError("model {\n  seq_length: 5\n}\n");
  EXPECT_THAT(message, StartsWith("job.textproto:2:3: Message type \"kelvin.config.ModelConfig\""));
  EXPECT_THAT(message, HasSubstr("\"seq_length\" is a field of training (training.seq_length)."));
}

TEST(JobConfigParse, UnknownTopLevelFieldSuggestsSection) {
  EXPECT_THAT(ParseError("optimiser { lr: 1 }"), HasSubstr("Did you mean \"optimizer\"?"));
}

TEST(JobConfigParse, UnknownEnumValueListsValidValues) {
  const std::string message = ParseError("training {\n  device: cuda\n}\n");
  EXPECT_THAT(message, StartsWith("job.textproto:2:11: Unknown enumeration value of \"cuda\""));
  EXPECT_THAT(message, HasSubstr("Did you mean \"CUDA\"? Valid values: AUTO, CPU, CUDA."));
}

TEST(JobConfigParse, SyntaxErrorsGiveLineAndColumn) {
  EXPECT_THAT(ParseError("model {\n  preset: \"tiny\"\n"), StartsWith("job.textproto:3:1: "));
  EXPECT_THAT(ParseError("training { steps: ten }"), StartsWith("job.textproto:1:19: "));
  EXPECT_THAT(ParseError("training { steps: 1 steps: 2 }"),
              HasSubstr("Non-repeated field \"steps\" is specified multiple times."));
  EXPECT_THAT(ParseError("model { preset: \"tiny\" hf_dir: \"/m\" }"),
              HasSubstr("another member of oneof \"source\""));
  EXPECT_THAT(ParseError("training { steps: 99999999999999999999 }"),
              StartsWith("job.textproto:1:19: "));
}

TEST(JobConfigParse, SemanticErrorsNameTheSource) {
  EXPECT_THAT(ParseError(absl::StrCat(kMinimalJob, "checkpoint { interval_steps: 5 }")),
              StartsWith("job.textproto: invalid job config: checkpoint.interval_steps=5 needs "
                         "checkpoint.dir"));
}

TEST(JobConfigOverride, SetsScalarsNestedFieldsEnumsAndBools) {
  config::JobConfig job = ParsedMinimalJob();
  ASSERT_TRUE(ApplyOverride("optimizer.lr=1e-5", job).ok());
  ASSERT_TRUE(ApplyOverride("model.ssa.enabled=true", job).ok());
  ASSERT_TRUE(ApplyOverride("data.passkey.min_depth=0.2", job).ok());
  ASSERT_TRUE(ApplyOverride(" training.device = CUDA ", job).ok());
  ASSERT_TRUE(ApplyOverride("parallel.pipeline_schedule=INTERLEAVED_1F1B", job).ok());
  ASSERT_TRUE(ApplyOverride("training.seed=18446744073709551615", job).ok());
  EXPECT_DOUBLE_EQ(job.optimizer().lr(), 1e-5);
  EXPECT_TRUE(job.model().ssa().enabled());
  EXPECT_DOUBLE_EQ(job.data().passkey().min_depth(), 0.2);
  EXPECT_EQ(job.training().device(), config::TrainingConfig::CUDA);
  EXPECT_EQ(job.parallel().pipeline_schedule(), config::ParallelConfig::INTERLEAVED_1F1B);
  EXPECT_EQ(job.training().seed(), 18446744073709551615u);
  ASSERT_TRUE(ApplyOverride("model.ssa.enabled=false", job).ok());
  EXPECT_FALSE(job.model().ssa().enabled());
}

TEST(JobConfigOverride, ZeroReplacesAValue) {
  config::JobConfig job = ParsedMinimalJob();
  ASSERT_TRUE(ApplyOverride("training.eval_interval=50", job).ok());
  ASSERT_TRUE(ApplyOverride("training.eval_interval=0", job).ok());
  EXPECT_EQ(job.training().eval_interval(), 0);
  ASSERT_TRUE(ApplyOverride("model.ssa.weight_sharing=false", job).ok());
  EXPECT_TRUE(job.model().ssa().has_weight_sharing());  // explicit false, not unset
}

TEST(JobConfigOverride, StringsBareOrQuotedAndOneofSwitches) {
  config::JobConfig job = ParsedMinimalJob();
  ASSERT_TRUE(ApplyOverride("model.hf_dir=/models/llama 3", job).ok());
  EXPECT_EQ(job.model().hf_dir(), "/models/llama 3");
  EXPECT_FALSE(job.model().has_preset());
  ASSERT_TRUE(ApplyOverride("model.preset=\"small-25m\"", job).ok());
  EXPECT_EQ(job.model().preset(), "small-25m");
  ASSERT_TRUE(ApplyOverride("checkpoint.dir=", job).ok());
  EXPECT_EQ(job.checkpoint().dir(), "");
}

// A repeated scalar field takes a bracketed list that replaces its elements (bare strings quoted
// one by one); an empty list clears it.
TEST(JobConfigOverride, ListsReplaceARepeatedField) {
  config::JobConfig job = ParsedMinimalJob();
  ASSERT_TRUE(ApplyOverride("model.lora.targets=[q_proj, \"v_proj\"]", job).ok());
  ASSERT_TRUE(ApplyOverride("model.lora.targets=[o_proj,down_proj, up_proj]", job).ok());
  EXPECT_THAT(job.model().lora().targets(),
              ::testing::ElementsAre("o_proj", "down_proj", "up_proj"));
  ASSERT_TRUE(ApplyOverride("model.architecture.rope_scaling.short_factor=[1, 2.5]", job).ok());
  EXPECT_THAT(job.model().architecture().rope_scaling().short_factor(),
              ::testing::ElementsAre(1.0, 2.5));
  ASSERT_TRUE(ApplyOverride("launch.setup_commands=[]", job).ok());
  EXPECT_EQ(job.launch().setup_commands_size(), 0);
  EXPECT_THAT(OverrideError("launch.setup_commands=\"echo\""),
              HasSubstr("launch.setup_commands is a list: give its values in brackets, e.g. "
                        "launch.setup_commands=[a, b]"));
  EXPECT_THAT(OverrideError("model.architecture.rope_scaling.short_factor=[1, x]"),
              HasSubstr("bad value \"[1, x]\" for model.architecture.rope_scaling.short_factor"));
  EXPECT_THAT(OverrideError("data.also_eval=[]"),
              HasSubstr("data.also_eval is a repeated message; overrides set values and lists"));
  EXPECT_THAT(OverrideError("model.lora.targets.x=1"),
              HasSubstr("model.lora.targets is a string, not a message"));
}

TEST(JobConfigOverride, BadPathNamesComponentAndValidFields) {
  const std::string message = OverrideError("optimizer.lrr=1e-5");
  EXPECT_THAT(message, StartsWith("override \"optimizer.lrr=1e-5\": optimizer "
                                  "(kelvin.config.OptimizerConfig) has no field \"lrr\" (did you "
                                  "mean \"lr\"?)"));
  EXPECT_THAT(message,
              HasSubstr("valid fields: lr, beta1, beta2, eps, weight_decay, grad_clip_norm"));
  EXPECT_THAT(OverrideError("trainig.steps=3"),
              HasSubstr("the job (kelvin.config.JobConfig) has no field \"trainig\" (did you mean "
                        "\"training\"?)"));
  EXPECT_THAT(OverrideError("optimizer.lr.value=3"),
              HasSubstr("optimizer.lr is a double, not a message: \"value\" cannot be below it"));
  EXPECT_THAT(OverrideError("=3"), HasSubstr("has no field \"\""));
}

TEST(JobConfigOverride, MessagePathIsRejected) {
  EXPECT_THAT(OverrideError("model.ssa=true"),
              HasSubstr("model.ssa is a message (kelvin.config.SsaConfig), not a value: set its "
                        "fields one at a time, e.g. model.ssa.enabled=..."));
  EXPECT_THAT(OverrideError("training={steps: 3}"), HasSubstr("training is a message"));
}

TEST(JobConfigOverride, BadValuesAreRejected) {
  EXPECT_THAT(OverrideError("training.steps=abc"),
              HasSubstr("override \"training.steps=abc\": bad value \"abc\" for training.steps "
                        "(int64): "));
  EXPECT_THAT(OverrideError("training.device=GPU"), HasSubstr("Valid values: AUTO, CPU, CUDA."));
  EXPECT_THAT(OverrideError("model.ssa.enabled=yes"), HasSubstr("for model.ssa.enabled (bool)"));
  EXPECT_THAT(OverrideError("optimizer.lr=1 2"), HasSubstr("unexpected text after the value"));
  EXPECT_THAT(OverrideError("training.threads=3000000000"), HasSubstr("(int32)"));
  EXPECT_THAT(OverrideError("optimizer.lr"),
              HasSubstr("expected <field.path>=<value>, e.g. optimizer.lr=1e-5"));
}

TEST(JobConfigOverride, FailedOverrideChangesNothing) {
  config::JobConfig job = ParsedMinimalJob();
  ASSERT_TRUE(ApplyOverride("model.hf_dir=/m", job).ok());
  const config::JobConfig before = job;
  EXPECT_FALSE(ApplyOverride("model.preset.x=1", job).ok());
  EXPECT_FALSE(ApplyOverride("model.architecture.vocab_size=many", job).ok());
  EXPECT_FALSE(ApplyOverride("data.megatron.bogus=1", job).ok());
  EXPECT_TRUE(MessageDifferencer::Equals(job, before));
  EXPECT_FALSE(job.model().has_architecture());
}

TEST(JobConfigOverride, AppliedByParseBeforeValidation) {
  const absl::StatusOr<config::JobConfig> job =
      ParseJobConfig(kMinimalJob, "job.textproto", {"optimizer.lr=2e-4", "training.steps=7"});
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_DOUBLE_EQ(job->optimizer().lr(), 2e-4);
  EXPECT_EQ(job->lr_schedule().decay_steps(), 7);  // resolved after the override
  const absl::StatusOr<config::JobConfig> bad =
      ParseJobConfig(kMinimalJob, "job.textproto", {"optimizer.lr=-0.001"});
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(std::string(bad.status().message()), HasSubstr("job.textproto: invalid job config: "
                                                             "optimizer.lr=-0.001: must be > 0"));
}

TEST(JobConfigDefaults, EveryDefaultIsMadeExplicitAndPrinted) {
  config::JobConfig job = ParsedMinimalJob();
  ResolveDefaults(job);
  EXPECT_FALSE(job.model().ssa().enabled());
  EXPECT_TRUE(job.model().ssa().query_temperature());
  EXPECT_TRUE(job.model().ssa().value_temperature());
  EXPECT_TRUE(job.model().ssa().token_aware());
  EXPECT_TRUE(job.model().ssa().position_aware());
  EXPECT_TRUE(job.model().ssa().weight_sharing());
  EXPECT_EQ(job.model().ssa().alpha_init(), -8.0);
  EXPECT_FALSE(job.model().ssa().has_temperature_clamp());
  EXPECT_EQ(job.model().ssa().temperature_lr_scale(), 1.0);
  EXPECT_TRUE(job.model().ssa().log_statistics());
  EXPECT_EQ(job.data().passkey().max_depth(), 1.0);
  EXPECT_EQ(job.optimizer().beta1(), 0.9);
  EXPECT_EQ(job.optimizer().beta2(), 0.95);
  EXPECT_EQ(job.optimizer().eps(), 1e-8);
  EXPECT_EQ(job.optimizer().weight_decay(), 0.1);
  EXPECT_EQ(job.optimizer().grad_clip_norm(), 1.0);
  EXPECT_EQ(job.lr_schedule().min_lr_ratio(), 0.1);
  EXPECT_EQ(job.lr_schedule().decay_steps(), 10);
  EXPECT_EQ(job.training().micro_batch_size(), 1);
  EXPECT_EQ(job.training().eval_steps(), 10);
  EXPECT_EQ(job.logging().log_interval(), 10);
  EXPECT_EQ(job.parallel().tensor_parallel(), 1);
  EXPECT_EQ(job.parallel().pipeline_parallel(), 1);
  EXPECT_EQ(job.parallel().virtual_pipeline_stages(), 1);
  EXPECT_EQ(job.parallel().context_parallel(), 1);
  EXPECT_EQ(job.parallel().collective_timeout_seconds(), 600);
  // Runtime-dependent values stay as written.
  EXPECT_EQ(job.training().device(), config::TrainingConfig::AUTO);
  EXPECT_EQ(job.model().precision(), config::ModelConfig::AUTO);
  EXPECT_EQ(job.parallel().data_parallel(), 0);
  EXPECT_EQ(job.training().gradient_accumulation_steps(), 0);
  EXPECT_FALSE(job.model().has_architecture());

  const std::string text = FormatResolvedConfig(job);
  for (const char* line :
       {"  beta2: 0.95\n", "  eps: 1e-08\n", "  micro_batch_size: 1\n", "  alpha_init: -8\n",
        "  recompute_mlp: false\n", "  collective_timeout_seconds: 600\n", "  device: AUTO\n",
        "  pipeline_schedule: ONE_F_ONE_B\n", "  data_parallel: 0\n", "    max_depth: 1\n"}) {
    EXPECT_THAT(text, HasSubstr(line));
  }
  EXPECT_THAT(text, Not(HasSubstr("temperature_clamp")));
  EXPECT_THAT(text, Not(HasSubstr("\n  hf_dir")));
  EXPECT_THAT(text, Not(HasSubstr("megatron")));
}

TEST(JobConfigDefaults, ExplicitValuesAreKeptAndResolutionIsIdempotent) {
  config::JobConfig job = ParsedMinimalJob();
  ASSERT_TRUE(ApplyOverride("optimizer.beta2=0.999", job).ok());
  ASSERT_TRUE(ApplyOverride("model.ssa.value_temperature=false", job).ok());
  ResolveDefaults(job);
  EXPECT_EQ(job.optimizer().beta2(), 0.999);
  EXPECT_FALSE(job.model().ssa().value_temperature());
  const config::JobConfig once = job;
  ResolveDefaults(job);
  EXPECT_TRUE(MessageDifferencer::Equals(job, once));
}

TEST(JobConfigDefaults, PrecisionFollowsAnExplicitDevice) {
  for (const auto& [device, precision] :
       {std::pair{"CPU", config::ModelConfig::FP32}, std::pair{"CUDA", config::ModelConfig::BF16},
        std::pair{"AUTO", config::ModelConfig::AUTO}}) {
    config::JobConfig job = ParsedMinimalJob();
    ASSERT_TRUE(ApplyOverride(absl::StrCat("training.device=", device), job).ok());
    ResolveDefaults(job);
    EXPECT_EQ(job.model().precision(), precision) << device;
  }
  config::JobConfig job = ParsedMinimalJob();
  ASSERT_TRUE(ApplyOverride("training.device=CPU", job).ok());
  ASSERT_TRUE(ApplyOverride("model.precision=BF16", job).ok());
  ResolveDefaults(job);
  EXPECT_EQ(job.model().precision(), config::ModelConfig::BF16);
}

TEST(JobConfigDefaults, AccumulationDerivedFromAnExplicitDataParallelSize) {
  config::JobConfig job = ParsedMinimalJob();
  ASSERT_TRUE(ApplyOverride("training.global_batch_size=32", job).ok());
  ASSERT_TRUE(ApplyOverride("training.micro_batch_size=2", job).ok());
  ASSERT_TRUE(ApplyOverride("parallel.data_parallel=4", job).ok());
  ResolveDefaults(job);
  EXPECT_EQ(job.training().gradient_accumulation_steps(), 4);
}

TEST(JobConfigDefaults, FormattedJobParsesBackToTheSameJob) {
  config::JobConfig job = ParsedMinimalJob();
  ASSERT_TRUE(ApplyOverride("model.hf_dir=/models/\"quoted\" dir", job).ok());
  ASSERT_TRUE(ApplyOverride("model.ssa.temperature_clamp.lo=0.9", job).ok());
  ASSERT_TRUE(ApplyOverride("model.architecture.rope_theta=500000", job).ok());
  ResolveDefaults(job);
  const absl::StatusOr<config::JobConfig> reparsed =
      ParseJobConfigText(FormatResolvedConfig(job), "resolved");
  ASSERT_TRUE(reparsed.ok()) << reparsed.status();
  EXPECT_TRUE(MessageDifferencer::Equals(*reparsed, job)) << FormatResolvedConfig(*reparsed);
}

// A LongRoPE scaling's factor lists (repeated numbers) print one line per element and parse back.
// Before, printing any job with a rope_scaling stopped the program (repeated fields other than
// strings and messages were refused).
TEST(JobConfigDefaults, FormattedRopeFactorListsParseBack) {
  config::JobConfig job = ParsedMinimalJob();
  config::RopeScaling& rope = *job.mutable_model()->mutable_architecture()->mutable_rope_scaling();
  rope.set_rope_type("longrope");
  rope.set_factor(4.0);
  rope.set_original_max_position_embeddings(4096);
  for (const double factor : {1.0, 1.5, 2.25}) {
    rope.add_short_factor(factor);
    rope.add_long_factor(2 * factor);
  }
  ResolveDefaults(job);
  const std::string text = FormatResolvedConfig(job);
  EXPECT_THAT(text, HasSubstr("      short_factor: 1\n      short_factor: 1.5\n"));
  const absl::StatusOr<config::JobConfig> reparsed = ParseJobConfigText(text, "resolved");
  ASSERT_TRUE(reparsed.ok()) << reparsed.status();
  EXPECT_TRUE(MessageDifferencer::Equals(*reparsed, job)) << text;
}

TEST(JobConfigFile, MissingDirectoryAndUnreadableFilesAreErrors) {
  const absl::StatusOr<config::JobConfig> missing = LoadJobConfig("/nonexistent/job.textproto");
  ASSERT_FALSE(missing.ok());
  EXPECT_THAT(std::string(missing.status().message()),
              HasSubstr("job file /nonexistent/job.textproto does not exist"));
  const absl::StatusOr<config::JobConfig> relative = LoadJobConfig("no/such/job.textproto");
  ASSERT_FALSE(relative.ok());
  EXPECT_THAT(std::string(relative.status().message()),
              HasSubstr("job file no/such/job.textproto does not exist (relative paths are "
                        "resolved against the working directory /"));
  const absl::StatusOr<config::JobConfig> directory = LoadJobConfig(::testing::TempDir());
  ASSERT_FALSE(directory.ok());
  EXPECT_THAT(std::string(directory.status().message()),
              HasSubstr("is a directory, not a regular file"));
  const std::string huge = WriteTempFile("huge.textproto", std::string(2 << 20, '#'));
  const absl::StatusOr<config::JobConfig> too_big = LoadJobConfig(huge);
  ASSERT_FALSE(too_big.ok());
  EXPECT_THAT(std::string(too_big.status().message()), HasSubstr("is it the right file?"));
}

TEST(JobConfigFile, LoadsAFileWithOverridesAndNamesItInErrors) {
  const std::string path = WriteTempFile("loaded_job.textproto", kMinimalJob);
  const absl::StatusOr<config::JobConfig> job = LoadJobConfig(path, {"training.steps=3"});
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ(job->name(), "loaded_job");
  EXPECT_EQ(job->training().steps(), 3);
  const std::string broken = WriteTempFile("broken_job.textproto", "model {\n  presett: \"x\"\n}");
  const absl::StatusOr<config::JobConfig> error = LoadJobConfig(broken);
  ASSERT_FALSE(error.ok());
  EXPECT_THAT(std::string(error.status().message()), StartsWith(broken + ":2:3: "));
  EXPECT_THAT(std::string(error.status().message()), HasSubstr("Did you mean \"preset\"?"));
  const std::string empty = WriteTempFile("empty_job.textproto", "");
  const absl::StatusOr<config::JobConfig> incomplete = LoadJobConfig(empty);
  ASSERT_FALSE(incomplete.ok());
  EXPECT_THAT(std::string(incomplete.status().message()), HasSubstr("data: no data source"));
}

TEST(ReadyJobs, EveryFileInConfigsLoadsAndValidates) {
  int count = 0;
  for (const auto& entry : std::filesystem::directory_iterator(ConfigsDir())) {
    if (entry.path().extension() != ".textproto") continue;
    SCOPED_TRACE(entry.path().string());
    ++count;
    const absl::StatusOr<config::JobConfig> job = LoadJobConfig(entry.path().string());
    ASSERT_TRUE(job.ok()) << job.status();
    EXPECT_EQ(job->name(), entry.path().stem().string());
    const absl::StatusOr<config::JobConfig> reparsed =
        ParseJobConfig(FormatResolvedConfig(*job), entry.path().string());
    ASSERT_TRUE(reparsed.ok()) << reparsed.status();
    EXPECT_TRUE(MessageDifferencer::Equals(*reparsed, *job));
  }
  EXPECT_GE(count, 3) << "configs/ is " << ConfigsDir();
}

TEST(ReadyJobs, EachJobIsWhatItsNameSays) {
  const auto load = [](const char* name) {
    absl::StatusOr<config::JobConfig> job = LoadJobConfig((ConfigsDir() / name).string());
    EXPECT_TRUE(job.ok()) << job.status();
    return job.value_or(config::JobConfig());
  };
  const config::JobConfig demo = load("passkey_tiny_cpu.textproto");
  EXPECT_EQ(demo.model().preset(), "tiny");
  EXPECT_TRUE(demo.data().has_passkey());
  EXPECT_EQ(demo.training().device(), config::TrainingConfig::CPU);
  // The demo is the README's main job: this build's trainer must accept it as it is.
  const absl::StatusOr<std::unique_ptr<training::Trainer>> trainer =
      training::Trainer::Create(demo);
  EXPECT_TRUE(trainer.ok()) << trainer.status();

  const config::JobConfig finetune = load("llama3_8b_ssa_finetune.textproto");
  EXPECT_TRUE(finetune.model().has_hf_dir());
  EXPECT_TRUE(finetune.model().ssa().enabled());
  EXPECT_EQ(finetune.model().precision(), config::ModelConfig::BF16);
  EXPECT_EQ(finetune.parallel().tensor_parallel(), 8);
  EXPECT_EQ(finetune.parallel().pipeline_parallel(), 2);
  EXPECT_EQ(finetune.training().seq_length(), 8192);
  EXPECT_EQ(finetune.lr_schedule().type(), config::LrScheduleConfig::COSINE);
  EXPECT_FALSE(finetune.checkpoint().dir().empty());

  const config::JobConfig longctx = load("llama3_8b_longctx.textproto");
  EXPECT_EQ(longctx.training().seq_length(), 32768);
  EXPECT_EQ(longctx.parallel().context_parallel(), 4);
  EXPECT_EQ(longctx.model().architecture().rope_scaling().rope_type(), "llama3");

  // LoRA + SSA on a frozen base, one GPU.
  const config::JobConfig lora = load("llama3_8b_lora_ssa.textproto");
  EXPECT_TRUE(lora.model().peft().adapters() && lora.model().peft().ssa());
  EXPECT_FALSE(lora.model().peft().norms() || lora.model().peft().embeddings());
  EXPECT_EQ(lora.model().lora().rank(), 16);
  EXPECT_EQ(lora.model().lora().targets_size(), 7);
  EXPECT_EQ(lora.launch().nodes() * lora.launch().processes_per_node(), 1);

  // The extension recipes: Llama-3-8B 8K -> 128K with YaRN, and the same at CPU scale (x8).
  const config::JobConfig extend = load("llama3_8b_extend_128k.textproto");
  EXPECT_EQ(extend.model().architecture().rope_scaling().rope_type(), "yarn");
  EXPECT_EQ(extend.model().architecture().rope_scaling().factor(), 16.0);
  EXPECT_EQ(extend.model().architecture().rope_scaling().original_max_position_embeddings(), 8192);
  EXPECT_EQ(extend.training().seq_length(), 131072);
  EXPECT_TRUE(extend.model().ssa().enabled());
  EXPECT_TRUE(extend.data().has_blend());
  const config::JobConfig tiny = load("extend_tiny_cpu.textproto");
  EXPECT_EQ(tiny.model().architecture().rope_scaling().rope_type(), "yarn");
  EXPECT_EQ(tiny.model().architecture().rope_scaling().factor(), 8.0);
  EXPECT_EQ(tiny.training().seq_length(), 8 * 160);
  EXPECT_EQ(tiny.training().device(), config::TrainingConfig::CPU);
}

// Random edits of a valid job: every outcome is a Status, and every accepted job prints back to
// text that parses to the same job.
TEST(JobConfigFuzz, MutatedJobsNeverCrash) {
  std::ifstream file(ConfigsDir() / "llama3_8b_longctx.textproto");
  const std::string valid((std::istreambuf_iterator<char>(file)), std::istreambuf_iterator<char>());
  ASSERT_FALSE(valid.empty());
  const std::vector<std::string> tokens = {"{",
                                           "}",
                                           ":",
                                           "\"",
                                           "-",
                                           "1e999",
                                           "nan",
                                           "-inf",
                                           "99999999999999999999",
                                           "0x7f",
                                           "-0",
                                           "model {",
                                           "ssa {",
                                           "\\",
                                           "\n",
                                           "#",
                                           "'",
                                           "[",
                                           "]",
                                           "<",
                                           ">",
                                           ";",
                                           ",",
                                           "0",
                                           "true",
                                           "data { megatron {} }",
                                           "passkey {",
                                           "INTERLEAVED_1F1B",
                                           "\xff\xfe",
                                           "\"\\x",
                                           "9"};
  std::mt19937_64 rng(20240611);
  int accepted = 0;
  for (int iteration = 0; iteration < 3000; ++iteration) {
    std::string text = valid;
    const int edits = 1 + static_cast<int>(rng() % 4);
    for (int e = 0; e < edits && !text.empty(); ++e) {
      const size_t at = rng() % text.size();
      const size_t length = 1 + rng() % 16;
      switch (rng() % 5) {
        case 0:
          text.erase(at, length);
          break;
        case 1:
          text.insert(at, tokens[rng() % tokens.size()]);
          break;
        case 2:
          text[at] = static_cast<char>(rng() % 256);
          break;
        case 3:
          text.insert(at, text.substr(rng() % text.size(), length));
          break;
        default:
          text.resize(at);
          break;
      }
    }
    SCOPED_TRACE(text);
    const absl::StatusOr<config::JobConfig> job = ParseJobConfig(text, "fuzz.textproto");
    if (!job.ok()) {
      EXPECT_THAT(std::string(job.status().message()), StartsWith("fuzz.textproto"));
      continue;
    }
    ++accepted;
    const absl::StatusOr<config::JobConfig> reparsed =
        ParseJobConfig(FormatResolvedConfig(*job), "fuzz.textproto");
    ASSERT_TRUE(reparsed.ok()) << reparsed.status();
    EXPECT_TRUE(MessageDifferencer::Equals(*reparsed, *job));
  }
  EXPECT_GT(accepted, 0);  // some mutations (comments, whitespace, numbers) stay valid
}

TEST(JobConfigFuzz, RandomOverridesNeverCrash) {
  const std::vector<std::string> paths = {
      "optimizer.lr", "model.ssa.enabled",      "data.passkey", "model", "training.device", "", ".",
      "a.b.c",        "parallel.data_parallel", "model.hf_dir"};
  const std::vector<std::string> values = {"",      "1",    "-1",  "x",    "\"",   "{",  "CUDA",
                                           "1e400", "true", "'a'", "\"\\", "0x10", "1 2"};
  std::mt19937_64 rng(7);
  for (int iteration = 0; iteration < 500; ++iteration) {
    config::JobConfig job = ParsedMinimalJob();
    const std::string assignment = absl::StrCat(
        paths[rng() % paths.size()], rng() % 8 == 0 ? "" : "=", values[rng() % values.size()]);
    const absl::Status status = ApplyOverride(assignment, job);
    if (!status.ok()) {
      EXPECT_THAT(std::string(status.message()), StartsWith("override \"")) << assignment;
    }
    ValidateJobConfig(job).IgnoreError();
  }
}

}  // namespace
}  // namespace kelvin::launcher
