// The weights of a Hugging Face model directory checked against the model's config before any
// model buffer is allocated: a config.json whose sizes are valid but not those of its weights
// (vocab_size, hidden_size, intermediate_size, heads, layers) is an error naming the tensor, both
// shapes and the config fields, not gigabytes allocated first.
#pragma once

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/io/hf_checkpoint.h"
#include "models/llama/llama_config.h"

namespace kelvin::models {

// Every tensor the whole model needs (all pipeline stages; SSA tensors only when present: a
// directory without them starts SSA afresh) is in `checkpoint` with the shape `config` gives it.
absl::Status CheckHfWeightsMatchConfig(const io::HfCheckpoint& checkpoint,
                                       const LlamaConfig& config);

// io::HfCheckpoint::Open(directory), then CheckHfWeightsMatchConfig: how a model's weights are
// opened before the model is built.
absl::StatusOr<io::HfCheckpoint> OpenHfWeightsFor(const std::string& directory,
                                                  const LlamaConfig& config);

}  // namespace kelvin::models
