// The memory plan of a Llama training step, computed from the config before anything is
// allocated: parameters, gradients, optimizer state and the activations kept for backward, per
// category, for one rank holding the whole model. Logged at the start of training.
#pragma once

#include <string>

#include "core/dtype.h"
#include "models/llama/llama_config.h"

namespace kelvin::models {

struct MemoryPlanOptions {
  int64_t micro_batch = 1;               // B
  int64_t seq_length = 1;                // T
  DType activation_dtype = DType::kF32;  // bf16 on CUDA
  DType parameter_dtype = DType::kF32;   // the copy the forward reads
  bool separate_master = false;          // f32 master weights kept apart (bf16 training)
};

struct MemoryPlan {
  int64_t parameters = 0;             // bytes of the forward's parameter copy
  int64_t master_weights = 0;         // f32 master copy when separate
  int64_t gradients = 0;              // f32 (AccumDType) gradients
  int64_t optimizer_state = 0;        // AdamW m and v
  int64_t activations_per_layer = 0;  // kept for backward, one decoder layer
  int64_t activations = 0;            // all layers + embedding output + final norm
  int64_t logits = 0;                 // [N, V], reused in place for dlogits
  int64_t backward_scratch = 0;       // gradient buffers of one layer
  int64_t Total() const;
  std::string ToString() const;  // one line per category, in GiB
};

MemoryPlan PlanLlamaMemory(const LlamaConfig& config, const MemoryPlanOptions& options);

}  // namespace kelvin::models
