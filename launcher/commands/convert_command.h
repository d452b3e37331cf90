// `kelvin convert`: one process (under mpirun or srun, rank 0 alone) whatever layout wrote the
// checkpoint. A full fine-tune's checkpoint is streamed: each tensor read whole from the pieces and
// the Hugging Face directory (models/llama/hf_model_directory.h) written a shard at a time, with no
// model in memory. A frozen-base job's (trainable tensors alone) is put over its base in a model
// on the CPU (f32), which is then written merged or as a peft adapter
// (models/llama/model_export.h). No GPU either way.
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "configs/kelvin.pb.h"
#include "core/dtype.h"
#include "launcher/commands/command_line.h"
#include "training/checkpoint/checkpoint.h"

namespace kelvin::launcher {

struct ConvertOptions {
  training::CheckpointChoice checkpoint;  // the newest, a step's or the best
  DType dtype = DType::kF32;  // of the written weights: f32 (the masters, exact) or bf16 (RNE)
  // --tokenizer DIR: its tokenizer files go into the export (in place of model.hf_dir's), and its
  // bos and eos ids into config.json and generation_config.json. "" for none.
  std::string tokenizer = "";
  // --format: what to write; AUTO follows the job's training.export_format (itself AUTO:
  // PEFT_ADAPTER with model.lora, else MERGED).
  config::ExportFormat::Format format = config::ExportFormat::AUTO;
};

// Writes the weights of the chosen complete checkpoint of checkpoint.dir (an error naming the
// field when there is none; the checkpoint must be this job's and of its model) to `directory` as
// a Hugging Face model (config.json + safetensors) or a peft adapter directory. Returns the
// checkpoint's step.
absl::StatusOr<int64_t> ConvertCheckpointToHf(const config::JobConfig& job,
                                              const std::string& directory,
                                              const ConvertOptions& options = {});

void AddConvertCommand(CommandLine& line);

}  // namespace kelvin::launcher
