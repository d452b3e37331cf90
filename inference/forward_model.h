// A job's model for forward-only use (generation, scoring, the needle grid): where it runs (the
// device asked for, else the job's training.device: f32 on the CPU, bf16 on CUDA), its weights
// (this rank's shard under tensor parallelism) from the chosen checkpoint of checkpoint.dir
// (newest, a step, the best; any layout wrote it), else from model.hf_dir; and its tokenizer.
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "configs/kelvin.pb.h"
#include "core/status.h"
#include "data/tokenizer/tokenizer.h"
#include "models/llama/llama_model.h"
#include "training/checkpoint/checkpoint.h"
#include "training/job/job_setup.h"

namespace kelvin::inference {

// Where a forward-only model runs (the commands' --device).
enum class InferenceDevice {
  kJob,   // not given: the job's training.device (AUTO: CUDA when a GPU is usable)
  kCpu,   // --device cpu
  kCuda,  // --device cuda
};
// Where a forward-only command runs the job's model: on `device` (kJob: training.device, AUTO as
// the trainer decides it, training::ResolvePlacement) in f32 on the CPU and bf16 on CUDA whatever
// model.precision says (a checkpoint holds f32 weights), on the GPU node-local rank `local_rank`
// takes in training. CUDA asked for (--device cuda, or training.device=CUDA without --device) where
// no GPU is usable, or for a model whose head_dim the CUDA attention does not run, is an error
// that says what to do instead; AUTO then stays on the CPU.
absl::StatusOr<training::TrainingPlacement> ResolveInferencePlacement(const config::JobConfig& job,
                                                                      InferenceDevice device,
                                                                      int local_rank);

// The model placed as `placement` says (ResolveInferencePlacement) with its trained weights (a
// frozen-base job's checkpoint over its base: model.hf_dir's, else the seed's draw); an
// error when there are none (no checkpoint and no model.hf_dir), naming what is missing; a
// checkpoint of another model names its first foreign tensor (an SSA one, the flag). A frozen-base
// checkpoint's trainable tensors go over the job's base, which must be the one it records.
// `tp`: the tensor-parallel group the model is split over (nullptr: this process holds it whole),
// its communicator working on placement.ctx's device.
absl::StatusOr<std::unique_ptr<models::LlamaModel>> LoadInferenceModel(
    const config::JobConfig& job, const training::CheckpointChoice& choice,
    const training::TrainingPlacement& placement, parallel::Communicator* tp = nullptr);

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

}  // namespace kelvin::inference
