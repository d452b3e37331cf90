// A LoRA model's merged form (Hu et al., 2021): each adapted projection W [out, in] replaced by
// W + s B A, so that a plain Llama computes what the adapted one did. In f32 on the host.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "core/tensor.h"
#include "models/llama/llama_config.h"

namespace kelvin::models {

// `tensors`: the whole model's parameters (host f32, full shapes, Hugging Face names, the LoRA
// matrices of config.lora among them). Adds s B A (ops::Gemm, f32) into each adapted projection's
// weight and removes the LoRA matrices; the other tensors stay, in their order.
void MergeLoraAdapters(const LlamaConfig& config,
                       std::vector<std::pair<std::string, Tensor>>& tensors);

// The config of the merged model: `config` without LoRA adapters or trainable sets.
LlamaConfig MergedConfig(const LlamaConfig& config);

}  // namespace kelvin::models
