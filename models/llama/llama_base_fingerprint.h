// The identity of the weights a frozen-base job trains on (model.peft): a CRC-32C over the whole
// model's base tensors as their source holds them, the same on every layout (each rank computes it
// over every tensor, whichever it holds), so that a checkpoint of the trainable tensors can refuse
// a resume over another base.
#pragma once

#include <cstdint>
#include <random>
#include <string>

#include "core/io/hf_checkpoint.h"
#include "models/llama/llama_config.h"

namespace kelvin::models {

// What a frozen base is: where it came from (for messages) and its fingerprint.
struct LlamaBase {
  std::string source;  // the Hugging Face directory, or "random weights from seed N"
  uint32_t fingerprint = 0;
};

// The stream LlamaModel::InitRandom draws parameter `name` from (the seed and the name: the same on
// every layout).
std::mt19937_64 ParameterStream(const std::string& name, uint64_t seed);
// The standard deviation of InitRandom's normal draws (every parameter but the norms, which start
// at one, and LoRA's).
inline constexpr double kInitStddev = 0.02;

// Over the whole model's parameters other than LoRA's, in declaration order, that `checkpoint`
// holds: each one's name, dtype, shape and bytes as stored, chained into one CRC-32C. Reads every
// such tensor's mapped bytes once (no copy).
LlamaBase HfBaseOf(const io::HfCheckpoint& checkpoint, const LlamaConfig& config);

// A random base (InitRandom from `seed`): each drawn parameter's name, full shape and the first
// values of its stream chained into one CRC-32C. The values are a function of the seed, the name
// and the shape alone, so the stream's head identifies the whole draw (and a change of the
// architecture or of the drawing code changes it) without drawing the model again.
LlamaBase RandomBaseOf(const LlamaConfig& config, uint64_t seed);

}  // namespace kelvin::models
