// The memory plan of a Llama training step (or of a forward-only model) on one rank, computed from
// the config and the rank's place in the parallel layout before anything is allocated: parameters,
// gradients, optimizer state and the activations kept for backward, per category. It mirrors the
// buffers LlamaModel and the optimizers allocate (tests check it against them byte for byte).
// Logged at the start of training for the first and the last pipeline stage.
#pragma once

#include <string>

#include "core/dtype.h"
#include "models/llama/llama_config.h"
#include "ssa/attention_backend.h"

namespace kelvin::models {

struct MemoryPlanOptions {
  int64_t micro_batch = 1;               // B
  int64_t seq_length = 1;                // T
  DType activation_dtype = DType::kF32;  // bf16 on CUDA
  DType parameter_dtype = DType::kF32;   // the copy the forward reads
  bool separate_master = false;          // f32 master weights kept apart (bf16 training)
  bool recompute_attention = false;      // LlamaRecompute: recomputed in backward, not kept
  bool recompute_mlp = false;
  // The rank's place in the layout; the defaults are one rank holding the whole model.
  int tensor_parallel = 1, tensor_rank = 0;
  bool sequence_parallel = false;
  int context_parallel = 1;  // the rank holds T / CP tokens of each row
  int pipeline_parallel = 1, pipeline_rank = 0, virtual_stages = 1;
  // Activation slots: the most micro-batches in flight on the rank under its pipeline schedule
  // (parallel::PeakInFlightMicroBatches; 1 without pipeline parallelism).
  int64_t micro_batches_in_flight = 1;
  int data_parallel = 1;
  bool distributed_optimizer = false;  // ZeRO-1: moments and separate masters sharded over DP x CP
  // The SSA attention core on CUDA (model.attention_backend): its backward's scratch is counted;
  // AUTO counts the larger of the two.
  ssa::AttentionBackend attention_backend = ssa::AttentionBackend::kFused;
  // A forward-only model (LlamaPlacement::forward_only: evaluation, generation): its parameter
  // values alone, no master weights, gradients or optimizer state. Its activation slots and
  // scratch are a training model's (the forward writes the same buffers).
  bool forward_only = false;
};

// Frozen parameters (LlamaConfig::trainable) count in `parameters` only; master weights,
// gradients and optimizer state are those of the trainable ones.
struct MemoryPlan {
  int64_t parameters = 0;       // bytes of the forward's parameter copy
  int64_t master_weights = 0;   // f32 master copy when separate (ZeRO-1: this rank's shard)
  int64_t gradients = 0;        // f32 (AccumDType) gradients (ZeRO-1: and the exchange buffers)
  int64_t optimizer_state = 0;  // AdamW m and v (ZeRO-1: of this rank's shards)
  int64_t activations_per_layer = 0;  // kept for backward, one decoder layer, one micro-batch
  int64_t activations = 0;            // every slot: the rank's layers and its stage buffers
  int64_t logits = 0;                 // [N, V/TP] per slot on the last stage, reused for dlogits
  int64_t backward_scratch = 0;       // one layer's gradients and recomputed activations, chunk
                                      // gradients per slot
  // The most any one operator call takes for itself and gives back (the device allocator keeps
  // it cached): on CUDA (bf16 plans) the SSA attention backward's bf16 q~, k~, v~, its core's
  // gradients of them and workspace, and row terms, plus the cuBLASLt workspace; 0 for CPU (f32)
  // plans. With LoRA dropout in training at least the backward's masked input and its gradient
  // [N, in] of the widest adapted input.
  int64_t operator_scratch = 0;
  int64_t Total() const;
  std::string ToString() const;  // every category, in GiB
};

MemoryPlan PlanLlamaMemory(const LlamaConfig& config, const MemoryPlanOptions& options);

}  // namespace kelvin::models
