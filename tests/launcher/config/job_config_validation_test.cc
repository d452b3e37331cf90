// Job-config validation: each semantic rule's message (field path, value, rule) as the only
// problem of an otherwise valid job, every problem reported at once, and the did-you-mean helper.
#include "launcher/config/job_config_validation.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <limits>
#include <string>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "launcher/config/job_config.h"

namespace kelvin::launcher {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::StartsWith;

constexpr char kMinimalJob[] = R"pb(
  name: "minimal"
  model { preset: "tiny" }
  data { passkey {} }
  optimizer { lr: 1e-3 }
  training { steps: 10 global_batch_size: 4 seq_length: 128 }
)pb";

// The validation message of the minimal job changed by `overrides` ("" when it is valid).
std::string ProblemsWith(const std::vector<std::string>& overrides) {
  absl::StatusOr<config::JobConfig> job = ParseJobConfigText(kMinimalJob, "job.textproto");
  EXPECT_TRUE(job.ok()) << job.status();
  for (const std::string& assignment : overrides) {
    const absl::Status applied = ApplyOverride(assignment, *job);
    EXPECT_TRUE(applied.ok()) << applied;
  }
  return std::string(ValidateJobConfig(*job).message());
}

// The minimal job itself.
config::JobConfig BaseJob() {
  absl::StatusOr<config::JobConfig> job = ParseJobConfigText(kMinimalJob, "job.textproto");
  EXPECT_TRUE(job.ok()) << job.status();
  return job.value_or(config::JobConfig());
}

TEST(JobConfigValidation, MinimalJobIsValid) { EXPECT_EQ(ProblemsWith({}), ""); }

// LongRoPE's factor lists (repeated fields, set in a job file) meet config.json's rules: each
// factor > 0. A complete yarn extension of the base job is valid.
TEST(JobConfigValidation, RopeScalingListsAndAYarnExtension) {
  config::JobConfig job = BaseJob();
  config::RopeScaling& rope = *job.mutable_model()->mutable_architecture()->mutable_rope_scaling();
  rope.set_rope_type("longrope");
  rope.set_factor(4);
  rope.set_original_max_position_embeddings(4096);
  for (const double f : {1.0, 2.0}) rope.add_short_factor(f);
  for (const double f : {1.0, 0.0}) rope.add_long_factor(f);
  EXPECT_THAT(std::string(ValidateJobConfig(job).message()),
              ::testing::HasSubstr("model.architecture.rope_scaling.long_factor: holds 0, every "
                                   "factor must be a number > 0"));
  // Each element of a list is a number of the job: finite (before, any list stopped the check).
  rope.set_long_factor(1, std::numeric_limits<double>::infinity());
  EXPECT_THAT(std::string(ValidateJobConfig(job).message()),
              ::testing::HasSubstr("model.architecture.rope_scaling.long_factor[1]=inf: must be a "
                                   "finite number"));
  rope.Clear();
  rope.set_rope_type("yarn");
  rope.set_factor(16);
  rope.set_original_max_position_embeddings(8192);
  rope.set_mscale(1.0);
  rope.set_truncate(false);
  EXPECT_TRUE(ValidateJobConfig(job).ok()) << ValidateJobConfig(job);
}

TEST(JobConfigValidation, SlurmTimeLimitsInEachFormAreValid) {
  for (const char* time : {"90", "01:30:00", "2-00:00:00", "0-12:00:00"}) {
    EXPECT_EQ(ProblemsWith({absl::StrCat("launch.time_limit=", time)}), "") << time;
  }
}

struct Rule {
  std::vector<std::string> overrides;
  std::string message;
};

TEST(JobConfigValidation, EachRuleNamesFieldValueAndRule) {
  const std::vector<Rule> rules = {
      {{"training.micro_batch_size=0"}, "training.micro_batch_size=0: must be in [1, 16777216]"},
      {{"training.steps=0"}, "training.steps=0: must be in [1, 1099511627776]"},
      {{"data.megatron.path_prefix=/d/c", "training.seq_length=-5"},
       "training.seq_length=-5: must be in [1, 134217728]"},
      {{"training.eval_steps=0"}, "training.eval_steps=0: must be in [1, 1048576]"},
      {{"training.threads=-1"}, "training.threads=-1: must be in [0, 4096]"},
      {{"optimizer.lr=-0.001"}, "optimizer.lr=-0.001: must be > 0"},
      {{"optimizer.beta1=-0.1"}, "optimizer.beta1=-0.1: must be in [0, 1)"},
      {{"optimizer.beta2=1"}, "optimizer.beta2=1: must be in [0, 1)"},
      {{"optimizer.eps=0"}, "optimizer.eps=0: must be > 0"},
      {{"optimizer.weight_decay=-1"}, "optimizer.weight_decay=-1: must be >= 0"},
      {{"optimizer.grad_clip_norm=-2"}, "optimizer.grad_clip_norm=-2: must be >= 0"},
      {{"training.global_batch_size=10", "training.micro_batch_size=4"},
       "training.global_batch_size=10 is not a multiple of micro_batch_size=4"},
      {{"training.gradient_accumulation_steps=3"},
       "training.global_batch_size=4 is not a multiple of micro_batch_size * "
       "gradient_accumulation_steps = 1 * 3"},
      {{"parallel.data_parallel=3"},
       "training.global_batch_size=4 is not a multiple of micro_batch_size * "
       "parallel.data_parallel = 1 * 3"},
      {{"training.gradient_accumulation_steps=2", "parallel.data_parallel=4"},
       "training.global_batch_size=4 must equal micro_batch_size * gradient_accumulation_steps "
       "* parallel.data_parallel = 1 * 2 * 4"},
      {{"model.ssa.enabled=true", "model.ssa.temperature_clamp.lo=1.2",
        "model.ssa.temperature_clamp.hi=1.1"},
       "model.ssa.temperature_clamp=[1.2, 1.1]: not an interval of positive temperatures; need "
       "finite 0 < lo < hi (e.g. lo 0.9, hi 1.1), or no clamp"},
      {{"model.ssa.enabled=true", "model.ssa.temperature_clamp.lo=0",
        "model.ssa.temperature_clamp.hi=1.1"},
       "model.ssa.temperature_clamp=[0, 1.1]: not an interval of positive temperatures"},
      {{"model.ssa.enabled=true", "model.ssa.temperature_clamp.hi=1.1"},
       "model.ssa.temperature_clamp: set both lo and hi (e.g. lo: 0.9 hi: 1.1)"},
      {{"model.ssa.enabled=true", "model.ssa.temperature_lr_scale=-1"},
       "model.ssa.temperature_lr_scale=-1: must be a finite number >= 0"},
      {{"model.ssa.enabled=true", "model.ssa.query_temperature=false",
        "model.ssa.value_temperature=false"},
       "model.ssa: query_temperature=false value_temperature=false token_aware=true "
       "position_aware=true keep every temperature at 1 (vanilla attention); turn a temperature "
       "on, or turn SSA off"},
      {{"model.ssa.enabled=true", "model.ssa.token_aware=false", "model.ssa.position_aware=false"},
       "model.ssa: query_temperature=true value_temperature=true "
       "token_aware=false position_aware=false keep every temperature at 1"},
      {{"model.architecture.num_attention_heads=32", "model.architecture.num_key_value_heads=6"},
       "model.architecture.num_key_value_heads=6 does not divide num_attention_heads=32"},
      {{"model.architecture.hidden_size=100", "model.architecture.num_attention_heads=3"},
       "model.architecture.num_attention_heads=3 does not divide hidden_size=100"},
      {{"model.architecture.hidden_size=96", "model.architecture.num_attention_heads=32"},
       "model.architecture.hidden_size=96 / num_attention_heads=32 gives head dim 3: RoPE needs "
       "an even one"},
      {{"model.architecture.num_layers=0"},
       "model.architecture.num_layers=0: must be in [1, 4096]"},
      {{"model.architecture.rms_norm_eps=0"}, "model.architecture.rms_norm_eps=0: must be > 0"},
      {{"model.architecture.max_position_embeddings=32"},
       "training.seq_length=128 exceeds model.architecture.max_position_embeddings=32"},
      {{"model.architecture.rope_scaling.rope_type=ntk"},
       "model.architecture.rope_scaling.rope_type=\"ntk\": must be one of \"default\", "
       "\"linear\", \"yarn\", \"longrope\", \"llama3\", \"dynamic\""},
      {{"model.architecture.rope_scaling.rope_type=dynamic",
        "model.architecture.rope_scaling.factor=2",
        "model.architecture.rope_scaling.original_max_position_embeddings=64"},
       "model.architecture.rope_scaling: original_max_position_embeddings not used by rope_type "
       "\"dynamic\": remove it"},
      {{"model.architecture.rope_scaling.rope_type=dynamic"},
       "model.architecture.rope_scaling: rope_type \"dynamic\" needs factor"},
      {{"model.architecture.rope_scaling.rope_type=llama3",
        "model.architecture.rope_scaling.factor=8"},
       "model.architecture.rope_scaling: rope_type \"llama3\" needs low_freq_factor, "
       "high_freq_factor, original_max_position_embeddings (Llama-3.1: factor 8, "
       "low_freq_factor 1, high_freq_factor 4, original 8192)"},
      {{"model.architecture.rope_scaling.factor=8"},
       "model.architecture.rope_scaling: factor not used by rope_type \"default\": remove it"},
      {{"model.architecture.rope_scaling.rope_type=yarn",
        "model.architecture.rope_scaling.factor=16",
        "model.architecture.rope_scaling.original_max_position_embeddings=8192",
        "model.architecture.rope_scaling.low_freq_factor=1",
        "model.architecture.rope_scaling.high_freq_factor=4"},
       "model.architecture.rope_scaling: low_freq_factor, high_freq_factor not used by rope_type "
       "\"yarn\": remove them"},
      {{"model.architecture.rope_scaling.rope_type=yarn"},
       "model.architecture.rope_scaling: rope_type \"yarn\" needs factor, "
       "original_max_position_embeddings"},
      {{"model.architecture.rope_scaling.rope_type=yarn",
        "model.architecture.rope_scaling.factor=16",
        "model.architecture.rope_scaling.original_max_position_embeddings=8192",
        "model.architecture.rope_scaling.attention_factor=-1"},
       "model.architecture.rope_scaling.attention_factor=-1: must be a number > 0"},
      {{"model.architecture.rope_scaling.rope_type=yarn",
        "model.architecture.rope_scaling.factor=16",
        "model.architecture.rope_scaling.original_max_position_embeddings=8192",
        "model.architecture.rope_scaling.beta_fast=1",
        "model.architecture.rope_scaling.beta_slow=2"},
       "model.architecture.rope_scaling: beta_fast=1 and beta_slow=2 (unset or 0: 32 and 1) must "
       "satisfy beta_fast >= beta_slow > 0"},
      {{"model.architecture.rope_scaling.rope_type=longrope",
        "model.architecture.rope_scaling.factor=4",
        "model.architecture.rope_scaling.original_max_position_embeddings=4096"},
       "model.architecture.rope_scaling: rope_type \"longrope\" needs short_factor, long_factor"},
      {{"model.architecture.rope_scaling.rope_type=llama3",
        "model.architecture.rope_scaling.factor=8",
        "model.architecture.rope_scaling.low_freq_factor=4",
        "model.architecture.rope_scaling.high_freq_factor=1",
        "model.architecture.rope_scaling.original_max_position_embeddings=8192"},
       "model.architecture.rope_scaling: high_freq_factor=1 must be a number > low_freq_factor=4"},
      {{"model.preset=tiney"},
       "model.preset=\"tiney\": unknown preset (did you mean \"tiny\"?); known presets: "
       "llama3-8b, llama3.1-8b, llama3.2-1b, llama3.2-3b, small-25m, tiny"},
      {{"model.hf_dir="}, "model.hf_dir is empty"},
      {{"data.megatron.path_prefix=/d/c", "data.eval.megatron.path_prefix=/d/./c"},
       "data.eval is \"/d/./c\", which the job trains on: its loss would not be held out"},
      {{"logging.peak_tflops=4.9e-324"},
       "logging.peak_tflops=4.94066e-324: must be 0 (no MFU) or in [0.001, 1e+06]"},
      {{"logging.peak_tflops=2e6"},
       "logging.peak_tflops=2e+06: must be 0 (no MFU) or in [0.001, 1e+06]"},
      {{"data.passkey.min_depth=0.8", "data.passkey.max_depth=0.2"},
       "data.passkey: min_depth=0.8 must be <= max_depth=0.2"},
      {{"data.passkey.max_depth=1.5"}, "data.passkey.max_depth=1.5: must be in [0, 1]"},
      {{"training.seq_length=20"},
       "training.seq_length=20 is too short for data.passkey: the key sentence, question and "
       "answer need "},
      {{"data.passkey.distractors=3"},
       "training.seq_length=128 is too short for data.passkey: the key sentence, 3 decoy "
       "sentences, question and answer need 285 tokens (use 512 or more for filler, or fewer "
       "data.passkey.distractors)"},
      {{"data.passkey.min_length=50"},
       "data.passkey.min_length=50: must be 0 (every sample fills its row) or in [102, 128]: the "
       "shortest sample (with data.passkey.distractors=0), and training.seq_length"},
      {{"data.passkey.min_length=129"}, "data.passkey.min_length=129: must be 0"},
      {{"data.eval_fraction=0.1"},
       "data.eval_fraction=0.1: the passkey task evaluates on fresh samples"},
      {{"data.megatron.path_prefix=/d/corpus.bin"},
       "data.megatron.path_prefix=\"/d/corpus.bin\": drop the extension (\"/d/corpus\")"},
      {{"data.megatron.path_prefix="}, "data.megatron.path_prefix is empty"},
      {{"data.megatron.path_prefix=/d/c", "training.eval_interval=100"},
       "training.eval_interval=100 needs held-out data: set data.eval_fraction (e.g. 0.01)"},
      {{"data.megatron.path_prefix=/d/c", "data.eval_fraction=1"},
       "data.eval_fraction=1: must be in [0, 1)"},
      {{"data.token_file.path=/d/t.bin", "data.document_masking=true"},
       "data.document_masking needs data.token_file.document_separator_token"},
      {{"data.token_file.path=/d/t.bin", "data.packing=DOCUMENTS"},
       "data.packing=DOCUMENTS needs data.token_file.document_separator_token"},
      {{"data.packing=DOCUMENTS"},
       "data.packing=DOCUMENTS: passkey rows are whole samples already; remove data.packing"},
      {{"data.megatron.path_prefix=/d/c", "data.megatron.loss_mask_path_prefix=/d/c_loss_mask.idx"},
       "data.megatron.loss_mask_path_prefix=\"/d/c_loss_mask.idx\": drop the extension "
       "(\"/d/c_loss_mask\")"},
      {{"data.megatron.path_prefix=/d/c", "data.eval_fraction=0.1",
        "data.eval.megatron.path_prefix=/d/v"},
       "data.eval and data.eval_fraction=0.1 both give held-out data: keep one"},
      {{"data.eval.megatron.path_prefix=/d/v"},
       "data.eval: the passkey task evaluates on fresh samples; remove data.eval"},
      {{"data.megatron.path_prefix=/d/c", "data.eval.token_file.dtype=UINT16"},
       "data.eval.token_file.path is empty"},
      {{"data.megatron.path_prefix=/d/c", "data.eval.megatron.path_prefix=/d/v.bin"},
       "data.eval.megatron.path_prefix=\"/d/v.bin\": drop the extension"},
      {{"data.megatron.path_prefix=/d/c", "data.megatron.loss_mask_path_prefix=/d/c"},
       "data.megatron.loss_mask_path_prefix names the token dataset itself (\"/d/c\")"},
      {{"data.token_file.path="}, "data.token_file.path is empty"},
      {{"data.token_file.path=/d/t.bin", "data.token_file.dtype=UINT16",
        "data.token_file.document_separator_token=128001"},
       "data.token_file.document_separator_token=128001: a UINT16 token file cannot hold it"},
      {{"lr_schedule.warmup_steps=20"}, "lr_schedule.warmup_steps=20 exceeds training.steps=10"},
      {{"lr_schedule.type=COSINE", "lr_schedule.warmup_steps=5", "lr_schedule.decay_steps=5"},
       "lr_schedule.decay_steps=5 must be > warmup_steps=5 for COSINE"},
      {{"lr_schedule.min_lr_ratio=2"}, "lr_schedule.min_lr_ratio=2: must be in [0, 1]"},
      {{"logging.peak_tflops=-989"},
       "logging.peak_tflops=-989: must be 0 (no MFU) or in [0.001, 1e+06]"},
      {{"lr_schedule.type=LINEAR", "lr_schedule.decay_steps=5", "lr_schedule.warmup_steps=5"},
       "lr_schedule.decay_steps=5 must be > warmup_steps=5 for LINEAR"},
      {{"lr_schedule.type=WARMUP_STABLE_DECAY", "training.steps=100", "lr_schedule.warmup_steps=10",
        "lr_schedule.cooldown_steps=91"},
       "lr_schedule.cooldown_steps=91 must be in [1, 90] (decay_steps - warmup_steps) for "
       "WARMUP_STABLE_DECAY"},
      {{"checkpoint.interval_steps=100"}, "checkpoint.interval_steps=100 needs checkpoint.dir"},
      {{"checkpoint.keep_last=2"}, "checkpoint.keep_last=2 needs checkpoint.dir"},
      {{"checkpoint.resume=REQUIRED"}, "checkpoint.resume=REQUIRED needs checkpoint.dir"},
      {{"checkpoint.dir=/c", "checkpoint.keep_last=-1"}, "checkpoint.keep_last=-1: must be >= 0"},
      {{"checkpoint.keep_best=true", "training.eval_interval=10"},
       "checkpoint.keep_best=true needs checkpoint.dir"},
      {{"checkpoint.dir=/c", "checkpoint.keep_best=true", "training.eval_interval=0"},
       "checkpoint.keep_best=true needs an evaluation: set training.eval_interval"},
      {{"checkpoint.dir=/c", "checkpoint.keep_best=true", "training.eval_interval=4",
        "checkpoint.interval_steps=6"},
       "checkpoint.keep_best=true needs checkpoint.interval_steps=6 to be a multiple of "
       "training.eval_interval=4, so that each checkpoint records its evaluation loss"},
      {{"logging.log_interval=0"}, "logging.log_interval=0: must be >= 1"},
      {{"logging.profile.first_step=0", "logging.profile.last_step=1"},
       "logging.profile.first_step=0: must be >= 1"},
      {{"training.steps=10", "logging.profile.first_step=4", "logging.profile.last_step=11"},
       "logging.profile.last_step=11 must be in [first_step=4, training.steps=10]"},
      {{"parallel.tensor_parallel=0"}, "parallel.tensor_parallel=0: must be >= 1"},
      {{"parallel.data_parallel=-2"}, "parallel.data_parallel=-2: must be >= 0"},
      {{"parallel.collective_timeout_seconds=0"},
       "parallel.collective_timeout_seconds=0: must be >= 1"},
      {{"parallel.virtual_pipeline_stages=2"},
       "parallel.virtual_pipeline_stages=2 needs pipeline_schedule INTERLEAVED_1F1B (or "
       "ALL_FORWARD_ALL_BACKWARD)"},
      {{"parallel.pipeline_schedule=INTERLEAVED_1F1B", "parallel.pipeline_parallel=2"},
       "parallel.pipeline_schedule=INTERLEAVED_1F1B needs virtual_pipeline_stages >= 2 (it is 1)"},
      {{"parallel.pipeline_schedule=INTERLEAVED_1F1B", "parallel.virtual_pipeline_stages=2"},
       "parallel.pipeline_schedule=INTERLEAVED_1F1B needs pipeline_parallel >= 2 (it is 1)"},
      {{"parallel.pipeline_schedule=INTERLEAVED_1F1B", "parallel.virtual_pipeline_stages=2",
        "parallel.pipeline_parallel=4", "training.gradient_accumulation_steps=2",
        "training.global_batch_size=2"},
       "training.gradient_accumulation_steps=2 (micro-batches per step) must be a multiple of "
       "parallel.pipeline_parallel=4 with virtual_pipeline_stages > 1"},
      {{"parallel.sequence_parallel=true"},
       "parallel.sequence_parallel needs tensor_parallel >= 2 (it is 1): set "
       "parallel.sequence_parallel=false"},
      {{"parallel.context_parallel=3"},
       "training.seq_length=128 must be a multiple of 2 * parallel.context_parallel = 6"},
      {{"parallel.sequence_parallel=true", "parallel.tensor_parallel=3"},
       "training.seq_length=128 / context_parallel=1 must be a multiple of "
       "parallel.tensor_parallel=3 for sequence_parallel"},
      {{"name=my job"}, "name=\"my job\": use only letters, digits, '.', '_' and '-'"},
      // The name is a directory (runs/<name>) and a file name: "." and ".." would write the
      // batch script and the logs into the run directory's parents.
      {{"name=."}, "name=\".\": use only letters, digits, '.', '_' and '-', and not \".\""},
      {{"name=.."}, "name=\"..\": use only letters, digits, '.', '_' and '-', and not \".\""},
      {{"name=../x"}, "name=\"../x\": use only letters, digits"},
      // A name longer than a file name may be would fail at launch naming run_dir, not name.
      {{"name=" + std::string(5000, 'n')},
       "name=\"" + std::string(40, 'n') + "...\" is 5000 characters long: at most 200"},
      {{"launch.mpi_plugin=pmix;rm"},
       "launch.mpi_plugin=\"pmix;rm\": name srun's PMI plugin (letters, digits and '_', e.g. "
       "pmix or pmi2; `srun --mpi=list` on the cluster lists them)"},
      {{"launch.memory_per_node=200GB"},
       "launch.memory_per_node=\"200GB\": write a number of mebibytes, or a number with the unit "
       "K, M, G or T (e.g. \"200G\"); \"0\" asks for all the memory of each node"},
      {{"launch.memory_per_node=-1"}, "launch.memory_per_node=\"-1\": write a number"},
      {{"launch.memory_per_node=99999999999999999999G"},
       "launch.memory_per_node=\"99999999999999999999G\": write a number"},
      {{"optimizer.lr=nan"}, "optimizer.lr=nan: must be a finite number"},
      {{"model.ssa.alpha_init=-inf"}, "model.ssa.alpha_init=-inf: must be a finite number"},
      {{"training.loss_spike.factor=inf"},
       "training.loss_spike.factor=inf: must be a finite number"},
      {{"training.loss_spike.min_loss=nan"},
       "training.loss_spike.min_loss=nan: must be a finite number"},
      {{"training.device=7"},
       "training.device=7: not a value of Device; use one of AUTO, CPU, CUDA"},
      {{"launch.nodes=0"}, "launch.nodes=0: must be >= 1"},
      {{"launch.processes_per_node=-1"}, "launch.processes_per_node=-1: must be >= 1"},
      {{"launch.gpus_per_node=-8"}, "launch.gpus_per_node=-8: must be >= 0"},
      {{"launch.time_limit=2h"},
       "launch.time_limit=\"2h\": write minutes (\"90\"), \"HH:MM:SS\" or \"D-HH:MM:SS\""},
      {{"launch.time_limit=1:75:00"}, "launch.time_limit=\"1:75:00\": write minutes"},
      {{"launch.gpus_per_node=4", "launch.processes_per_node=8",
        "parallel.communication_backend=NCCL"},
       "launch.processes_per_node=8 > gpus_per_node=4 with parallel.communication_backend=NCCL: "
       "NCCL needs a GPU per process"},
      {{"launch.preemption_warning_seconds=120"},
       "launch.preemption_warning_seconds=120 needs checkpoint.dir"},
      {{"launch.requeue=true", "launch.preemption_warning_seconds=60", "checkpoint.dir=/c",
        "checkpoint.resume=NEVER"},
       "launch.requeue needs checkpoint.resume=AUTO (it is NEVER)"},
      {{"launch.requeue=true", "checkpoint.dir=/c"},
       "launch.requeue needs launch.preemption_warning_seconds (e.g. 300): without the warning a "
       "job that reaches its time limit is killed without a checkpoint, and SLURM does not "
       "requeue a TIMEOUT"},
      {{"launch.preemption_warning_seconds=600", "launch.time_limit=10", "checkpoint.dir=/c"},
       "launch.preemption_warning_seconds=600 must be below launch.time_limit=\"10\" (600 s)"},
      // Sizes beyond their limits are refused before anything is allocated or planned.
      {{"training.global_batch_size=1099511627776"},
       "training.global_batch_size=1099511627776: must be in [1, 16777216]"},
      {{"training.seq_length=4611686018427387904"},
       "training.seq_length=4611686018427387904: must be in [1, 134217728]"},
      {{"training.eval_steps=2000000"}, "training.eval_steps=2000000: must be in [1, 1048576]"},
      {{"training.micro_batch_size=65536", "training.global_batch_size=65536",
        "training.seq_length=131072"},
       "training.micro_batch_size=65536 x training.seq_length=131072 tokens per micro-batch: at "
       "most 4294967296"},
      {{"model.architecture.vocab_size=1099511627776"},
       "model.architecture.vocab_size=1099511627776: must be in [1, 16777216]"},
      {{"model.architecture.hidden_size=4611686018427387904"},
       "model.architecture.hidden_size=4611686018427387904: must be in [1, 131072]"},
      {{"training.eval_whole_set=true"},
       "training.eval_whole_set: the passkey task makes its held-out samples without end"},
  };
  for (const Rule& rule : rules) {
    SCOPED_TRACE(testing::PrintToString(rule.overrides));
    // Exactly one problem: several would read "invalid job config (N problems):".
    EXPECT_THAT(ProblemsWith(rule.overrides), StartsWith("invalid job config: " + rule.message));
  }
  EXPECT_EQ(ProblemsWith({"launch.preemption_warning_seconds=7200", "launch.time_limit=1-00:00:00",
                          "checkpoint.dir=/c"}),
            "");
  EXPECT_EQ(ProblemsWith({"name=...", "launch.mpi_plugin=pmix_v4", "launch.memory_per_node=500G"}),
            "");
  EXPECT_EQ(ProblemsWith({"launch.mpi_plugin=pmi2", "launch.memory_per_node=64000"}), "");
}

// launch.hardware: a preset fills its numbers (each field overrides it); a bad rate, an empty
// node or a machine without a preset that leaves a rate unset is one problem naming the field,
// its value and what to do; an unknown preset is refused with the valid ones.
// model.attention_backend=CUDNN: an error naming the field on the CPU; a CUDA job is valid in any
// build (it is planned and launched from machines without the core; the trainer checks the core
// where it runs). AUTO and FUSED are valid everywhere.
TEST(JobConfigValidation, CudnnBackendNeedsAGpu) {
  EXPECT_EQ(ProblemsWith({"model.attention_backend=AUTO"}), "");
  EXPECT_EQ(ProblemsWith({"model.attention_backend=FUSED", "training.device=CPU"}), "");
  EXPECT_EQ(ProblemsWith({"model.attention_backend=CUDNN", "training.device=CUDA"}), "");
  EXPECT_THAT(ProblemsWith({"model.attention_backend=CUDNN", "training.device=CPU"}),
              HasSubstr("model.attention_backend=CUDNN runs on CUDA only, but "
                        "training.device=CPU: use AUTO or FUSED"));
}

TEST(JobConfigValidation, HardwareFieldsNameFieldValueAndRemedy) {
  EXPECT_EQ(ProblemsWith({"launch.hardware.preset=H200"}), "");
  EXPECT_EQ(ProblemsWith({"launch.hardware.preset=H100_SXM", "launch.hardware.inter_node_gbps=25",
                          "launch.hardware.gemm_efficiency=0.7"}),
            "");
  const std::vector<std::string> cpu = {
      "launch.hardware.peak_tflops=0.06",   "launch.hardware.memory_gbps=7",
      "launch.hardware.devices_per_node=2", "launch.hardware.intra_node_gbps=3",
      "launch.hardware.inter_node_gbps=1",  "launch.hardware.attention_tflops=0.03"};
  EXPECT_EQ(ProblemsWith(cpu), "");
  const std::vector<Rule> rules = {
      {{"launch.hardware.preset=H200", "launch.hardware.inter_node_gbps=-50"},
       "launch.hardware.inter_node_gbps=-50: must be in [0.01, 100000], the range in which it "
       "makes physical sense (kelvin.proto says why)"},
      {{"launch.hardware.preset=H100_SXM", "launch.hardware.peak_tflops=0"},
       "launch.hardware.peak_tflops=0: must be in [0.001, 100000]"},
      // Positive but absurd rates gave 303-digit or infinite step times and ranked layouts by
      // them: each rate has a physical floor and ceiling.
      {{"launch.hardware.preset=H100_SXM", "launch.hardware.peak_tflops=1e-300"},
       "launch.hardware.peak_tflops=1e-300: must be in [0.001, 100000]"},
      {{"launch.hardware.preset=H100_SXM", "launch.hardware.memory_gbps=4.9e-324"},
       "launch.hardware.memory_gbps=4.94066e-324: must be in [0.1, 100000]"},
      {{"launch.hardware.preset=H100_SXM", "launch.hardware.intra_node_gbps=1e-310"},
       "launch.hardware.intra_node_gbps=1e-310: must be in [0.01, 100000]"},
      {{"launch.hardware.preset=H100_SXM", "launch.hardware.inter_node_gbps=1e300"},
       "launch.hardware.inter_node_gbps=1e+300: must be in [0.01, 100000]"},
      {{"launch.hardware.preset=H100_SXM", "launch.hardware.attention_tflops=2e-7"},
       "launch.hardware.attention_tflops=2e-07: must be in [0.001, 100000]"},
      {{"launch.hardware.preset=H100_SXM", "launch.hardware.gemm_efficiency=1e-200"},
       "launch.hardware.gemm_efficiency=1e-200: must be in [0.01, 1]"},
      {{"launch.hardware.preset=H200", "launch.hardware.devices_per_node=0"},
       "launch.hardware.devices_per_node=0: must be in [1, 4096] (a node of H200 holds 8 GPUs; "
       "leave it unset for the preset's)"},
      {{"launch.hardware.preset=H200", "launch.gpus_per_node=16"},
       "launch.gpus_per_node=16 > launch.hardware.devices_per_node=8: a node cannot give more "
       "GPUs than it holds"},
      {{"launch.hardware.preset=H200", "launch.hardware.gemm_efficiency=1.5"},
       "launch.hardware.gemm_efficiency=1.5: must be in [0.01, 1]"},
      {{"launch.hardware.preset=H200", "launch.hardware.attention_tflops=-1"},
       "launch.hardware.attention_tflops=-1: must be in [0.001, 100000]"},
      {{"launch.hardware.peak_tflops=0.06", "launch.hardware.memory_gbps=7",
        "launch.hardware.devices_per_node=2", "launch.hardware.intra_node_gbps=3",
        "launch.hardware.inter_node_gbps=1"},
       "launch.hardware.attention_tflops is unset and launch.hardware has no preset: set it (e.g. "
       "a measured forward + backward rate), or choose launch.hardware.preset H100_SXM or H200"},
  };
  for (const Rule& rule : rules) {
    SCOPED_TRACE(testing::PrintToString(rule.overrides));
    EXPECT_THAT(ProblemsWith(rule.overrides), StartsWith("invalid job config: " + rule.message));
  }
  // Without a preset every rate is required: all the missing ones at once.
  EXPECT_THAT(ProblemsWith({"launch.hardware.memory_gbps=7"}),
              StartsWith("invalid job config (5 problems):\n  launch.hardware.peak_tflops is "
                         "unset and launch.hardware has no preset"));
  // An unknown preset is a parse error with the valid names.
  absl::StatusOr<config::JobConfig> job = BaseJob();
  const absl::Status unknown = ApplyOverride("launch.hardware.preset=H300", *job);
  EXPECT_THAT(std::string(unknown.message()), HasSubstr("Valid values: NONE, H100_SXM, H200."));
}

// Blend weights whose sum overflows to inf made every share 0 or nan ("-nan% of the samples").
TEST(JobConfigValidation, BlendWeightsMustSumToAFiniteNumber) {
  config::JobConfig job = BaseJob();
  for (const char* path : {"/a", "/b"}) {
    config::BlendedCorpus& corpus = *job.mutable_data()->mutable_blend()->add_corpora();
    corpus.mutable_megatron()->set_path_prefix(path);
    corpus.set_weight(1e308);
  }
  EXPECT_THAT(std::string(ValidateJobConfig(job).message()),
              HasSubstr("data.blend: the weights sum to inf: give relative weights whose sum is a "
                        "finite number"));
  job.mutable_data()->mutable_blend()->mutable_corpora(0)->set_weight(0.3);
  job.mutable_data()->mutable_blend()->mutable_corpora(1)->set_weight(0.7);
  EXPECT_TRUE(ValidateJobConfig(job).ok()) << ValidateJobConfig(job);
}

// Every launch string that reaches the batch script is checked: a newline, quote or command
// substitution in a SLURM name, option or setup line would become shell of its own.
TEST(JobConfigValidation, HostileLaunchStringsAreRefused) {
  const std::vector<std::string> hostile = {
      "gpu\nrm -rf /", "x$(touch /tmp/pwned)", "a'b", "a\"b", "a;b", "a b", "`id`", "a\rb"};
  for (const std::string& value : hostile) {
    for (const char* field : {"partition", "account", "qos"}) {
      config::JobConfig job = BaseJob();
      config::LaunchConfig& launch = *job.mutable_launch();
      const std::string name(field);
      if (name == "partition") launch.set_partition(value);
      if (name == "account") launch.set_account(value);
      if (name == "qos") launch.set_qos(value);
      EXPECT_THAT(std::string(ValidateJobConfig(job).message()),
                  HasSubstr("launch." + name + "=\"" + absl::CHexEscape(value) +
                            "\": SLURM names hold only letters, digits"));
    }
    config::JobConfig job = BaseJob();
    job.mutable_launch()->set_time_limit(value);
    EXPECT_THAT(std::string(ValidateJobConfig(job).message()), HasSubstr("launch.time_limit="));
    job = BaseJob();
    job.set_name(value);
    EXPECT_THAT(std::string(ValidateJobConfig(job).message()), HasSubstr("use only letters"));
  }
  for (const std::string& line :
       {std::string("--exclusive\nrm -rf /"), std::string("--a=\rb"), std::string("exclusive")}) {
    config::JobConfig job = BaseJob();
    job.mutable_launch()->add_extra_sbatch_options(line);
    EXPECT_THAT(std::string(ValidateJobConfig(job).message()),
                HasSubstr("launch.extra_sbatch_options \"" + absl::CHexEscape(line) + "\""));
  }
  // The memory request is launch.memory_per_node: sbatch refuses --mem with the per-CPU/GPU forms.
  for (const char* memory : {"--mem=10G", "--mem-per-gpu=80G", "--mem-per-cpu=4G"}) {
    config::JobConfig job = BaseJob();
    job.mutable_launch()->add_extra_sbatch_options(memory);
    EXPECT_THAT(std::string(ValidateJobConfig(job).message()),
                HasSubstr(absl::StrCat("launch.extra_sbatch_options \"", memory,
                                       "\": the job's memory request is launch.memory_per_node")));
  }
  config::JobConfig job = BaseJob();
  job.mutable_launch()->add_extra_sbatch_options("--mem-bind=local");  // binding, not a request
  EXPECT_TRUE(ValidateJobConfig(job).ok()) << ValidateJobConfig(job);
  job = BaseJob();
  job.mutable_launch()->add_setup_commands("module load cuda\nrm -rf /");
  EXPECT_THAT(std::string(ValidateJobConfig(job).message()),
              HasSubstr("launch.setup_commands \"module load cuda\\nrm -rf /\": one shell line"));
  job = BaseJob();  // names SLURM takes pass
  job.mutable_launch()->set_partition("gpu-a100,gpu_h100.x");
  job.mutable_launch()->set_account("proj-42");
  job.mutable_launch()->add_setup_commands("source env.sh\t# tab allowed");
  EXPECT_TRUE(ValidateJobConfig(job).ok()) << ValidateJobConfig(job);
}

// data.also_eval sets, given in the job's text (repeated messages have no --set form).
std::string ProblemsWithAlsoEval(const std::string& data, const std::string& training) {
  absl::StatusOr<config::JobConfig> job = ParseJobConfigText(
      absl::StrCat(R"pb(name: "also"
                        model { preset: "tiny" }
                        optimizer { lr: 1e-3 })pb",
                   "data { ", data, " } training { steps: 10 global_batch_size: 4 seq_length: 128 ",
                   training, " }"),
      "job.textproto");
  EXPECT_TRUE(job.ok()) << job.status();
  return std::string(ValidateJobConfig(*job).message());
}

TEST(JobConfigValidation, FurtherHeldOutSetsNeedNamesSourcesAndAMainEvaluation) {
  const std::string set = R"pb(corpus { megatron { path_prefix: "/d/web" } })pb";
  EXPECT_EQ(
      ProblemsWithAlsoEval(absl::StrCat("passkey {} also_eval { name: \"web-text_1\" ", set, " }"),
                           "eval_interval: 5"),
      "");
  EXPECT_EQ(
      ProblemsWithAlsoEval(absl::StrCat("passkey {} also_eval { name: \"web text\" ", set, " }"),
                           "eval_interval: 5"),
      "invalid job config: data.also_eval[0].name=\"web text\": name the set with letters, "
      "digits, '_' and '-' (it names its scalars)");
  EXPECT_EQ(ProblemsWithAlsoEval(absl::StrCat("passkey {} also_eval { name: \"web\" ", set,
                                              " } also_eval { name: \"web\" ", set, " }"),
                                 "eval_interval: 5"),
            "invalid job config: data.also_eval[1].name=\"web\" names another data.also_eval set "
            "too");
  EXPECT_EQ(
      ProblemsWithAlsoEval("passkey {} also_eval { name: \"web\" corpus {} }", "eval_interval: 5"),
      "invalid job config: data.also_eval[0].corpus: no source: set megatron or token_file");
  EXPECT_EQ(
      ProblemsWithAlsoEval(absl::StrCat("passkey {} also_eval { name: \"web\" ", set, " }"), ""),
      "invalid job config: data.also_eval is scored beside the main evaluation: set "
      "training.eval_interval and held-out data (data.eval or data.eval_fraction)");
}

TEST(JobConfigValidation, NonFiniteNumbersAreReportedOnce) {
  const std::string message = ProblemsWith({"optimizer.lr=nan"});
  EXPECT_THAT(message, Not(HasSubstr("must be > 0")));
}

TEST(JobConfigValidation, MissingSourcesAndRequiredFieldsAllReportedAtOnce) {
  const std::string message = std::string(ValidateJobConfig(config::JobConfig()).message());
  EXPECT_THAT(message, HasSubstr("invalid job config (7 problems):\n  "));
  for (const char* line : {
           "\n  name is empty",
           "\n  model: no model source: set model.preset (one of llama3-8b, llama3.1-8b, "
           "llama3.2-1b, llama3.2-3b, small-25m, tiny) or model.hf_dir (a Hugging Face model "
           "directory)",
           "\n  data: no data source: set one of data.megatron, data.token_file, data.blend, "
           "data.passkey",
           "\n  optimizer.lr=0: must be > 0",
           "\n  training.steps=0: must be in [1, 1099511627776]",
           "\n  training.global_batch_size=0: must be in [1, 16777216]",
           "\n  training.seq_length=0: must be in [1, 134217728]",
       }) {
    EXPECT_THAT(message, HasSubstr(line));
  }
}

TEST(JobConfigValidation, UnrelatedProblemsAllReportedAtOnce) {
  const std::string message =
      ProblemsWith({"training.micro_batch_size=0", "optimizer.lr=-0.001",
                    "checkpoint.interval_steps=5", "parallel.virtual_pipeline_stages=2"});
  EXPECT_EQ(message,
            "invalid job config (4 problems):\n"
            "  optimizer.lr=-0.001: must be > 0\n"
            "  training.micro_batch_size=0: must be in [1, 16777216]\n"
            "  checkpoint.interval_steps=5 needs checkpoint.dir (where to write them)\n"
            "  parallel.virtual_pipeline_stages=2 needs pipeline_schedule INTERLEAVED_1F1B (or "
            "ALL_FORWARD_ALL_BACKWARD)");
}

TEST(JobConfigValidation, DisabledSsaIgnoresItsFlags) {
  EXPECT_EQ(
      ProblemsWith({"model.ssa.query_temperature=false", "model.ssa.value_temperature=false"}), "");
  EXPECT_EQ(
      ProblemsWith({"model.ssa.temperature_clamp.lo=1.2", "model.ssa.temperature_clamp.hi=1.1",
                    "model.ssa.temperature_lr_scale=-1"}),
      "");
  EXPECT_EQ(ProblemsWith({"model.ssa.enabled=true", "model.ssa.token_aware=false",
                          "model.ssa.value_temperature=false"}),
            "");  // position-only query temperature (the paper's ablation)
}

TEST(JobConfigValidation, ValidLayoutsPass) {
  EXPECT_EQ(ProblemsWith({"parallel.tensor_parallel=8", "parallel.sequence_parallel=true",
                          "parallel.context_parallel=4", "training.seq_length=8192",
                          "parallel.pipeline_parallel=2", "parallel.virtual_pipeline_stages=2",
                          "parallel.pipeline_schedule=INTERLEAVED_1F1B",
                          "training.global_batch_size=16", "parallel.data_parallel=2"}),
            "");
  EXPECT_EQ(
      ProblemsWith({"data.token_file.path=/t", "data.token_file.dtype=UINT16",
                    "data.document_masking=true", "data.token_file.document_separator_token=0"}),
      "");
}

// A job for generate, eval --data/--text/--needle or convert holds the model (and where its
// weights are) only: the fields that only training requires may be left out there, and nowhere
// else; a value it does give is still checked.
TEST(JobConfigValidation, AForwardOnlyJobNeedsOnlyTheModel) {
  constexpr char kModelOnly[] = R"pb(model { hf_dir: "models/tiny" })pb";
  const absl::StatusOr<config::JobConfig> forward =
      ParseJobConfig(kModelOnly, "model_only.textproto", {}, JobUse::kForwardOnly);
  ASSERT_TRUE(forward.ok()) << forward.status();
  EXPECT_EQ(forward->name(), "model_only");
  const std::string training(ParseJobConfig(kModelOnly, "model_only.textproto").status().message());
  for (const char* field : {"data: no data source", "optimizer.lr=0", "training.steps=0",
                            "training.global_batch_size=0", "training.seq_length=0"}) {
    EXPECT_THAT(training, HasSubstr(field));
  }
  const std::string given(ParseJobConfig(kModelOnly, "model_only.textproto",
                                         {"training.seq_length=-5", "optimizer.lr=-1"},
                                         JobUse::kForwardOnly)
                              .status()
                              .message());
  EXPECT_THAT(given, HasSubstr("training.seq_length=-5: must be in [0, 134217728]"));
  EXPECT_THAT(given, HasSubstr("optimizer.lr=-1: must be > 0"));
  EXPECT_THAT(given, Not(HasSubstr("training.steps")));
}

}  // namespace
}  // namespace kelvin::launcher
