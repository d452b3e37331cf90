// The job's model for the commands that only run it forward (generate, eval --data / --text /
// --needle): where it runs (--device, else the job's training.device: f32 on the CPU, bf16 on
// CUDA), its weights (this rank's shard under tensor parallelism) from the chosen checkpoint of
// checkpoint.dir (newest, --step N, --best; any layout wrote it), else from model.hf_dir.
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "configs/kelvin.pb.h"
#include "core/status.h"
#include "data/tokenizer/tokenizer.h"
#include "launcher/commands/command_line.h"
#include "models/llama/llama_model.h"
#include "training/checkpoint/checkpoint.h"
#include "training/job/job_setup.h"

namespace kelvin::launcher {

// The job of a Hugging Face model directory given in place of a job file: model.hf_dir, its name.
config::JobConfig JobOfModelDirectory(const std::string& directory);

// The job of a forward-only command (`command` names it in errors, e.g. "generate"): JOB is a
// Hugging Face model directory (JobOfModelDirectory) or a job file with its --set overrides,
// validated for JobUse::kForwardOnly (a data source, optimizer.lr, training.steps, the batch and
// training.seq_length may be left out).
absl::StatusOr<config::JobConfig> LoadForwardOnlyJob(const std::string& command,
                                                     const JobArguments& job);
// The usage error's exit code when --set is given with a model directory (it changes job files).
std::optional<int> CheckNoSetOnModelDirectory(const JobArguments& job);

// --device of the forward-only commands.
enum class InferenceDevice {
  kJob,   // not given: the job's training.device (AUTO: CUDA when a GPU is usable)
  kCpu,   // --device cpu
  kCuda,  // --device cuda
};
// --device cpu|cuda on `command`, into `device` (kJob when it is not given).
void AddDeviceOption(CommandLine& line, CLI::App* command, InferenceDevice& device);

// Where a forward-only command runs the job's model: on `device` (kJob: training.device, AUTO as
// the trainer decides it, training::ResolvePlacement) in f32 on the CPU and bf16 on CUDA whatever
// model.precision says (a checkpoint holds f32 weights), on the GPU node-local rank `local_rank`
// takes in training. CUDA asked for (--device cuda, or training.device=CUDA without --device) where
// no GPU is usable, or for a model whose head_dim the CUDA attention does not run, is an error
// that says what to do instead; AUTO then stays on the CPU.
absl::StatusOr<training::TrainingPlacement> ResolveInferencePlacement(const config::JobConfig& job,
                                                                      InferenceDevice device,
                                                                      int local_rank);

// The model placed as `placement` says (ResolveInferencePlacement) with its trained weights; an
// error when there are none (no checkpoint and no model.hf_dir), naming what is missing; a
// checkpoint of another model names its first foreign tensor (an SSA one, the flag).
// `tp`: the tensor-parallel group the model is split over (nullptr: this process holds it whole),
// its communicator working on placement.ctx's device.
absl::StatusOr<std::unique_ptr<models::LlamaModel>> LoadInferenceModel(
    const config::JobConfig& job, const training::CheckpointChoice& choice,
    const training::TrainingPlacement& placement, parallel::Communicator* tp = nullptr);

// --tokenizer DIR on `command`: the directory of the tokenizer (tokenizer.json, with
// tokenizer_config.json and a chat template when it has them) of a model that has none of its
// own, e.g. one trained from a preset; it replaces model.hf_dir's.
void AddTokenizerOption(CommandLine& line, CLI::App* command, std::string& directory);

// The tokenizer of `directory` (`named` says where it came from in errors: "--tokenizer DIR" or
// "model.hf_dir=DIR"): an error when it has no tokenizer.json or its ids exceed the model's
// `vocab_size` (naming both numbers).
absl::StatusOr<data::Tokenizer> LoadTokenizerOfModel(const std::string& directory,
                                                     const std::string& named, int64_t vocab_size);

// The model's tokenizer: `tokenizer_dir`'s (--tokenizer; any problem with it is an error) when
// given, else model.hf_dir's when it has a tokenizer.json Kelvin reads, else nullopt. When
// `needed_by` names what needs it (e.g. "text prompts"), its absence or a load error is the error
// "<needed_by> need the model's tokenizer: <why>; <instead>"; otherwise the caller goes on without
// one, with a warning when model.hf_dir's is there but unusable.
absl::StatusOr<std::optional<data::Tokenizer>> LoadModelTokenizer(const config::JobConfig& job,
                                                                  const std::string& tokenizer_dir,
                                                                  const std::string& needed_by,
                                                                  const std::string& instead);

}  // namespace kelvin::launcher
