// Turns a validated job config into the objects a run needs: the model's architecture (preset or
// Hugging Face directory, then the config's overrides) and the model with its initial weights
// (the data: training/job/data_sources.h). Every error names the config field at fault.
#pragma once

#include <memory>

#include "configs/kelvin.pb.h"
#include "models/llama/llama_model.h"

namespace kelvin::training {

absl::StatusOr<models::LlamaConfig> ResolveModelArchitecture(const config::ModelConfig& model);
// As ResolveModelArchitecture, for planning on a machine that may not see the weights: when
// model.hf_dir's config.json cannot be read, the preset its directory's name names
// (models::LlamaPresetNamedIn) stands in, and `note` says so; without one the error says which
// --set to add.
absl::StatusOr<models::LlamaConfig> ResolveArchitectureToPlan(const config::ModelConfig& model,
                                                              std::string& note);
// Every output location the job names can be written here, checked by writing and removing a
// probe file (nothing else is created): checkpoint.dir, training.export_hf_dir,
// logging.tensorboard_dir and launch.run_dir are directories or can be made (their nearest
// existing ancestor takes the probe), none is the filesystem root, the export is not model.hf_dir,
// and logging.metrics_file is not a directory and its directory can be made. Train checks at
// start (not after its steps), launch before the job queues; the error names the field.
absl::Status CheckOutputLocations(const config::JobConfig& job);
// `path` (named `field` in errors) is a writable directory, or one that can be created (its nearest
// existing ancestor takes the probe file; nothing is created).
absl::Status CheckDirectoryCanBeWritten(const std::string& field, const std::string& path);
// `directory` can take an export of the job's model in `format` (training.export_hf_dir, kelvin
// convert's --out): not the filesystem root, not model.hf_dir (the model the job starts from), not
// inside one of checkpoint.dir's checkpoints (their rotation would delete it), not holding the
// other format's files (models::CheckExportTarget). `label` names it in errors
// ("training.export_hf_dir=\"DIR\"", "--out DIR").
absl::Status CheckExportDirectory(const std::string& label, const std::string& directory,
                                  const config::JobConfig& job, models::ExportFormat format);
// The export format `requested` (training.export_format, or kelvin convert's --format; `label`
// names it in errors) for the job: AUTO is PEFT_ADAPTER with model.lora, else MERGED;
// PEFT_ADAPTER without model.lora is an error saying why and what to set instead.
absl::StatusOr<models::ExportFormat> ResolveExportFormat(const config::JobConfig& job,
                                                         config::ExportFormat::Format requested,
                                                         const std::string& label);
// training.seq_length within the model's max_position_embeddings, and a RoPE scaling that training
// can use (dynamic NTK is for inference only).
absl::Status CheckSequenceLength(const config::JobConfig& job, const models::LlamaConfig& arch);
// What an export of the job's model says produced it: the source model (model.hf_dir, whose
// tokenizer files it copies, named by its directory's name, or model.preset), the job's name and
// its data section with file names for paths (the card names no local directory); the caller adds
// the steps and losses.
models::HfExportProvenance ExportProvenanceOf(const config::JobConfig& job);
// model.ssa (defaults resolved) as the SSA code's flags.
ssa::SsaOptions SsaOptionsFromConfig(const config::SsaConfig& ssa);

// Where a rank trains and in which dtype.
struct TrainingPlacement {
  Context ctx = Context::Cpu();
  DType dtype = DType::kF32;  // the model's: f32 on the CPU, bf16 (f32 masters) on CUDA
  // f32 masters apart from an f32 model too (tests: LlamaPlacement::separate_master).
  bool separate_master = false;
};
// The model's dtype when training on CUDA (`cuda`) or the CPU: model.precision AUTO gives bf16 on
// CUDA, f32 on the CPU; FP32 on CUDA and BF16 on the CPU are errors naming the fields.
absl::StatusOr<DType> ResolveModelDType(const config::JobConfig& job, bool cuda);
// training.device (AUTO: CUDA when a device is usable, else the CPU) and model.precision
// (ResolveModelDType). On CUDA the rank of node-local index `local_rank` takes GPU
// local_rank % (the node's GPUs): ranks beyond the GPUs share them, which the trainer's MPI
// communicators allow (they stage device tensors through host memory).
absl::StatusOr<TrainingPlacement> ResolvePlacement(const config::JobConfig& job, int local_rank);

// model.attention_backend as the SSA operator takes it.
ssa::AttentionBackend AttentionBackendOf(const config::JobConfig& job);
// The same, FailedPrecondition naming the field when it is CUDNN and the cuDNN core cannot run on
// ctx's device (the CPU included), with why.
absl::StatusOr<ssa::AttentionBackend> AttentionBackendFor(const config::JobConfig& job,
                                                          const Context& ctx);

// This rank's part of the model (the whole model without parallelism) placed as `placement` says,
// loaded from model.hf_dir or randomly initialised from the seed; gradient_shards: the
// distributed optimizer's shard count (1 without it).
absl::StatusOr<std::unique_ptr<models::LlamaModel>> BuildModel(
    const config::JobConfig& job, const models::LlamaConfig& arch,
    const models::LlamaParallelism& parallelism, const TrainingPlacement& placement,
    int64_t gradient_shards);

}  // namespace kelvin::training
