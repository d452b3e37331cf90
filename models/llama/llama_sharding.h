// How one tensor-parallel rank holds Llama (Megatron-style): which query heads, KV heads, FFN
// columns and vocabulary rows it holds, and where each parameter's local tensor sits in the full
// one. Every parameter keeps its Hugging Face name.
#pragma once

#include <cstdint>
#include <string>

#include "core/io/tensor_region.h"
#include "models/llama/llama_config.h"

namespace kelvin::models {

// Query heads, FFN columns and the vocabulary are split evenly over the TP ranks; KV heads are
// split when TP divides G and replicated (each rank keeping the one its query heads use) when G
// divides TP; the SSA read-outs, alphas and temperature projections follow their heads
// (docs/ssa.md, "Forward": no extra communication); norms are replicated. A LoRA adapter shards
// with its base projection: beside a column-parallel one (q, k, v, gate, up) A [r, D] is whole on
// every rank and B [out, r] split like the output; beside a row-parallel one (o, down) A [r, in]
// is split like the input and B [D, r] whole (its intermediate x A^T [N, r] is then a partial sum
// per rank, which the layer all-reduces over the TP group before B).
struct LlamaShardLayout {
  int tp_rank = 0, tp_size = 1;
  int64_t head_begin = 0, heads = 0;   // query heads [head_begin, head_begin + heads)
  int64_t kv_begin = 0, kv_heads = 0;  // KV heads held
  bool kv_replicated = false;          // TP > G: tp_size / G ranks hold each KV head
  int64_t ffn_begin = 0, ffn = 0;      // intermediate columns
  int64_t vocab_begin = 0, vocab = 0;  // vocabulary rows (embedding, LM head, logits)
};

// The layout of rank `tp_rank` of `tp_size` (the grid validated the divisibility; checked here).
LlamaShardLayout ShardLayoutOf(const LlamaConfig& config, int tp_rank, int tp_size);

// Where a parameter's local tensor sits in the full one: the slice [begin, begin + count) of the
// full tensor along `axis`.
struct ParameterShard {
  int axis = -1;  // -1: replicated (the whole tensor on every rank)
  int64_t begin = 0, count = 0;
  // Replicated over a subgroup whose gradients must be summed: the KV-head parameters when
  // kv_replicated (norms need no sum without sequence parallelism: every rank computes the same).
  bool replicated_kv = false;
  // Whole on every rank but its gradient partial per rank, summed over the TP group: LoRA's A
  // beside a column-parallel projection (each rank's B slice sees its output slice only) and its
  // B beside a row-parallel one (each rank's z is its input slice's partial sum).
  bool partial_over_tensor_parallel = false;
};

// The shard of the parameter named `name` (a Hugging Face name, SSA ones included).
ParameterShard ShardOf(const LlamaConfig& config, const LlamaShardLayout& layout,
                       const std::string& name);

// Where `shard` sits in its parameter's full tensor of `full_shape`.
io::TensorRegion RegionOf(const ParameterShard& shard, const Shape& full_shape);

}  // namespace kelvin::models
