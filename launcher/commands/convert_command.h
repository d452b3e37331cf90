// `kelvin convert`: one process (under mpirun or srun, rank 0 alone) whatever layout wrote the
// checkpoint. It reads each tensor whole from the checkpoint's pieces and writes the Hugging Face
// directory (models/llama/hf_model_directory.h) a shard at a time, with no model or optimizer in
// memory and no GPU.
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
};

// Writes the weights of the chosen complete checkpoint of checkpoint.dir (an error naming the
// field when there is none; the checkpoint must be this job's and of its model) to `directory` as
// a Hugging Face model (config.json + safetensors). Returns the checkpoint's step.
absl::StatusOr<int64_t> ConvertCheckpointToHf(const config::JobConfig& job,
                                              const std::string& directory,
                                              const ConvertOptions& options = {});

void AddConvertCommand(CommandLine& line);

}  // namespace kelvin::launcher
