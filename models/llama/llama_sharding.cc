// The tensor-parallel layout of Llama: which slice of each parameter a rank holds.
#include "models/llama/llama_sharding.h"

#include <string_view>

#include "core/check.h"
#include "models/llama/llama_peft.h"

namespace kelvin::models {

LlamaShardLayout ShardLayoutOf(const LlamaConfig& c, int tp_rank, int tp_size) {
  const int64_t tp = tp_size, h = c.num_attention_heads, g = c.num_key_value_heads;
  KELVIN_CHECK(tp >= 1 && tp_rank >= 0 && tp_rank < tp) << "tp rank " << tp_rank << " of " << tp;
  KELVIN_CHECK(h % tp == 0 && (g % tp == 0 || tp % g == 0) && c.intermediate_size % tp == 0 &&
               c.vocab_size % tp == 0)
      << "tensor_parallel=" << tp << " must divide num_attention_heads=" << h
      << ", intermediate_size=" << c.intermediate_size << ", vocab_size=" << c.vocab_size
      << " and divide or be a multiple of num_key_value_heads=" << g;
  LlamaShardLayout s;
  s.tp_rank = tp_rank;
  s.tp_size = tp_size;
  s.heads = h / tp;
  s.head_begin = tp_rank * s.heads;
  s.kv_replicated = g < tp;
  s.kv_heads = s.kv_replicated ? 1 : g / tp;
  s.kv_begin = s.kv_replicated ? tp_rank * g / tp : tp_rank * s.kv_heads;
  s.ffn = c.intermediate_size / tp;
  s.ffn_begin = tp_rank * s.ffn;
  s.vocab = c.vocab_size / tp;
  s.vocab_begin = tp_rank * s.vocab;
  return s;
}

ParameterShard ShardOf(const LlamaConfig& c, const LlamaShardLayout& s, const std::string& name) {
  const int64_t d = c.head_dim;
  auto ends_with = [&](const char* suffix) { return name.ends_with(suffix); };
  if (s.tp_size == 1) return {};
  if (IsLoraParameter(name)) {
    const bool is_a = name.ends_with(".lora_A.weight");
    const std::string base =
        name.substr(0, name.size() - std::string_view(".lora_A.weight").size()) + ".weight";
    const bool column = !base.ends_with("o_proj.weight") && !base.ends_with("down_proj.weight");
    if (column) {  // A [r, D] whole, its gradient partial; B [out, r] split like W's rows
      return is_a ? ParameterShard{.partial_over_tensor_parallel = true} : ShardOf(c, s, base);
    }
    // A [r, in] split like W's columns; B [out, r] whole, its gradient partial (each rank's z is
    // its input slice's share of x A^T).
    return is_a ? ShardOf(c, s, base) : ParameterShard{.partial_over_tensor_parallel = true};
  }
  if (ends_with("embed_tokens.weight") || name == "lm_head.weight") {
    return {0, s.vocab_begin, s.vocab};
  }
  if (ends_with("q_proj.weight") || ends_with("ssa.query_temperature_proj.weight")) {
    return {0, s.head_begin * d, s.heads * d};
  }
  if (ends_with("ssa.query_readout") || ends_with("ssa.alpha")) return {0, s.head_begin, s.heads};
  if (ends_with("k_proj.weight") || ends_with("v_proj.weight") ||
      ends_with("ssa.value_temperature_proj.weight")) {
    return {0, s.kv_begin * d, s.kv_heads * d, s.kv_replicated};
  }
  if (ends_with("ssa.value_readout")) return {0, s.kv_begin, s.kv_heads, s.kv_replicated};
  if (ends_with("o_proj.weight")) return {1, s.head_begin * d, s.heads * d};
  if (ends_with("gate_proj.weight") || ends_with("up_proj.weight")) {
    return {0, s.ffn_begin, s.ffn};
  }
  if (ends_with("down_proj.weight")) return {1, s.ffn_begin, s.ffn};
  KELVIN_CHECK(ends_with("layernorm.weight") || name == "model.norm.weight")
      << "no tensor-parallel layout for parameter " << name;
  return {};
}

io::TensorRegion RegionOf(const ParameterShard& shard, const Shape& full_shape) {
  if (shard.axis < 0) return io::TensorRegion::Whole(full_shape);
  return io::TensorRegion::Slice(full_shape, shard.axis, shard.begin, shard.count);
}

}  // namespace kelvin::models
