// A job checkpoint's weights read into a forward-only model: each of the model's parameters (this
// rank's region of it: its tensor shard, its pipeline stage's tensors) from the f32 master weights
// the checkpoint holds under its Hugging Face name, whatever layout wrote it; the optimizer state
// beside them is not read.
#pragma once

#include <string>

#include "core/status.h"
#include "models/llama/llama_model.h"

namespace kelvin::inference {

// Reads the weights of the checkpoint at `path` (job `job_name`'s) into `model`: those the
// checkpoint holds (the trainable ones over a frozen base, which `model` already holds); an error
// naming the file and the tensor on any mismatch, and naming the first tensor of another model when
// the checkpoint holds one.
absl::Status ReadCheckpointWeights(const std::string& path, const std::string& job_name,
                                   models::LlamaModel& model);

}  // namespace kelvin::inference
