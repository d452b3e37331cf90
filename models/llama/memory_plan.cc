// Llama memory plan: mirrors the buffers LlamaModel allocates (llama_model.cc: a slot per
// micro-batch in flight, the shared backward scratch), the parameters of the rank's stage and
// shards (llama_pipeline_stage.h, llama_sharding.h) and the optimizers' state.
#include "models/llama/memory_plan.h"

#include "absl/strings/str_format.h"
#include "core/context.h"
#include "models/llama/llama_pipeline_stage.h"
#include "models/llama/llama_sharding.h"

namespace kelvin::models {

int64_t MemoryPlan::Total() const {
  return parameters + master_weights + gradients + optimizer_state + activations + logits +
         backward_scratch + operator_scratch;
}

std::string MemoryPlan::ToString() const {
  auto gib = [](int64_t bytes) { return static_cast<double>(bytes) / (1 << 30); };
  return absl::StrFormat(
      "parameters %.3f GiB, master weights %.3f GiB, gradients %.3f GiB, optimizer state "
      "%.3f GiB, activations %.3f GiB (%.3f GiB per layer), logits %.3f GiB, backward scratch "
      "%.3f GiB, operator scratch %.3f GiB; total %.3f GiB",
      gib(parameters), gib(master_weights), gib(gradients), gib(optimizer_state), gib(activations),
      gib(activations_per_layer), gib(logits), gib(backward_scratch), gib(operator_scratch),
      gib(Total()));
}

MemoryPlan PlanLlamaMemory(const LlamaConfig& c, const MemoryPlanOptions& o) {
  const LlamaShardLayout shard = ShardLayoutOf(c, o.tensor_rank, o.tensor_parallel);
  const LlamaStageLayout stage =
      StageLayoutOf(c, o.pipeline_rank, o.pipeline_parallel, o.virtual_stages);
  const bool cp = o.context_parallel > 1;
  const int64_t nk = o.micro_batch * o.seq_length;                     // tokens attention sees
  const int64_t n = nk / o.context_parallel;                           // this rank's tokens
  const int64_t nl = o.sequence_parallel ? n / o.tensor_parallel : n;  // of the norm regions
  const int64_t act = static_cast<int64_t>(DTypeSize(o.activation_dtype));
  const int64_t stat = static_cast<int64_t>(DTypeSize(AccumDType(o.activation_dtype)));
  const int64_t grad = static_cast<int64_t>(DTypeSize(AccumDType(o.parameter_dtype)));
  const int64_t d_model = c.hidden_size, d = c.head_dim, f = shard.ffn;
  const int64_t heads = shard.heads, kv_heads = shard.kv_heads;
  const int64_t q = heads * d, kv = kv_heads * d;
  // SSA (llama_model.cc): tau^q [N, H] and tau^v [Nk, G] in the statistics dtype; without weight
  // sharing also the temperature sources [N, H*d], [N, G*d] and their gradients.
  const ssa::SsaOptions ssa = c.AttentionOptions();
  const bool own_sources = !ssa.weight_sharing && ssa.token_aware;
  const int64_t query_temperatures = ssa.query_temperature ? heads : 0;
  const int64_t value_temperatures = ssa.value_temperature ? kv_heads : 0;
  const int64_t query_source = own_sources && ssa.query_temperature ? q : 0;
  const int64_t value_source = own_sources && ssa.value_temperature ? kv : 0;

  // The rank's parameters: its stage's tensors, sliced by its tensor-parallel shard, by group.
  int64_t params = 0;
  int64_t group_elements[kNumParamGroups] = {};
  for (const LlamaParameterSpec& spec : StageParameterSpecs(c, stage)) {
    const ParameterShard slice = ShardOf(c, shard, spec.name);
    int64_t elements = 1;
    for (size_t i = 0; i < spec.full_shape.size(); ++i) {
      elements *= static_cast<int>(i) == slice.axis ? slice.count : spec.full_shape[i];
    }
    params += elements;
    group_elements[static_cast<int>(spec.group)] += elements;
  }
  MemoryPlan plan;
  plan.parameters = params * static_cast<int64_t>(DTypeSize(o.parameter_dtype));
  plan.gradients = params * grad;
  const int64_t replicas = int64_t{o.data_parallel} * o.context_parallel;  // ZeRO-1's shards
  const bool zero = o.distributed_optimizer && replicas > 1;
  if (!zero) {
    plan.master_weights = o.separate_master ? params * 4 : 0;
    plan.optimizer_state = 2 * params * grad;
  } else {
    // parallel/distributed_adamw.h over D = DP x CP ranks, per group of E elements with
    // S = ceil(E / D): the moments [S] each and the f32 masters' shard [S] when kept apart; the
    // gradients padded to [D * S] (their zero tail) and the reduced shard [S], in the master
    // weights' dtype (that of the gradients).
    for (const int64_t elements : group_elements) {
      if (elements == 0) continue;
      const int64_t s = (elements + replicas - 1) / replicas;
      if (o.separate_master) plan.master_weights += s * 4;
      plan.optimizer_state += 2 * s * grad;
      plan.gradients += (replicas * s - elements) * grad + s * grad;
    }
  }

  // LlamaLayerActivations: x, x_mid [Nl, D]; h_attn, h_mlp [N, D]; rstd_attn, rstd_mlp [Nl] in
  // the statistics dtype; the attention's u, attn [N, H*d], k, v [N, G*d], sources, and lse
  // [N, H], tau^q [N, H], tau^v [Nk, G] in the statistics dtype; with context parallelism the
  // gathered k, v and value source [Nk, G*d]; the MLP's gate, up, act [N, F] (H, G, F this
  // rank's). Recomputed parts live once, in the backward scratch.
  const int64_t attention_bytes = n * act * (2 * q + 2 * kv + query_source + value_source) +
                                  n * stat * (heads + query_temperatures) +
                                  nk * stat * value_temperatures +
                                  (cp ? nk * act * (2 * kv + value_source) : 0);
  const int64_t mlp_bytes = n * act * 3 * f;
  plan.activations_per_layer = act * (2 * nl * d_model + 2 * n * d_model) + stat * 2 * nl +
                               (o.recompute_attention ? 0 : attention_bytes) +
                               (o.recompute_mlp ? 0 : mlp_bytes);
  // A slot: the layers, the token and position ids, each chunk's output [Nl, D]; on the last
  // stage the final norm's output [N, D] and rstd [Nl], and the logits [N, V/TP].
  const int64_t chunks = o.virtual_stages;
  int64_t slot = stage.num_local_layers() * plan.activations_per_layer + 2 * n * 4 +
                 (cp ? nk * 4 : 0) + chunks * nl * d_model * act;
  if (stage.holds_head()) slot += n * d_model * act + nl * stat;
  const int64_t slots = o.micro_batches_in_flight;
  plan.activations = slots * slot;
  plan.logits = stage.holds_head() ? slots * n * shard.vocab * act : 0;
  // Per slot, each chunk's gradient [Nl, D]; shared: proj, dh [N, D]; du, dattn [N, H*d]; dk, dv
  // [Nk, G*d]; the source gradients [N, H*d], [Nk, G*d]; dgate, dup, dact [N, F]; with sequence
  // parallelism also a local [Nl, D] norm output, a gathered [N, D] gradient and d_proj [Nl, D]
  // (else d_proj is proj); with context parallelism this rank's dk, dv, dvalue source [N, G*d]
  // and the reordering buffer [Nk * G*d]; the recompute buffers.
  plan.backward_scratch =
      slots * chunks * nl * d_model * act + n * act * (2 * d_model + 2 * q + 3 * f + query_source) +
      nk * act * (2 * kv + value_source) +
      (cp ? act * (n * (2 * kv + value_source) + nk * kv) : 0) +
      (o.sequence_parallel ? act * (2 * nl * d_model + n * d_model) : 0) +
      (o.recompute_attention ? attention_bytes : 0) + (o.recompute_mlp ? mlp_bytes : 0);
  if (o.activation_dtype == DType::kBF16) {
    // ssa/ssa_attention.cu, one backward call over nq queries (half the rank's with context
    // parallelism: two query blocks) and the nk keys: bf16 q~ [nq, H, d], k~ [nk, G, d] and, with
    // the value temperature, v~; f32 dq~ [nq, H, d], dk~, dv~ [nk, G, d], delta [nq, H]; the
    // temperatures' f32 row terms: dz and d position [nq, H] of tau^q, dz [nk, G] of tau^v.
    const int64_t nq = cp ? n / 2 : n;
    const bool query_token = ssa.query_temperature && ssa.token_aware;
    const bool query_position = ssa.query_temperature && ssa.position_aware;
    const bool value_token = ssa.value_temperature && ssa.token_aware;
    const int64_t tiles = 2 * (nq * q + nk * kv + (ssa.value_temperature ? nk * kv : 0));
    const int64_t gradients = 4 * (nq * q + 2 * nk * kv);
    const int64_t rows = 4 * (nq * heads * (1 + (query_token ? 1 : 0) + (query_position ? 1 : 0)) +
                              (value_token ? nk * kv_heads : 0));
    plan.operator_scratch = tiles + gradients + rows + kCublasLtWorkspaceBytes;
  }
  return plan;
}

}  // namespace kelvin::models
