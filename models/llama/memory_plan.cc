// Llama memory plan: mirrors the buffers LlamaModel allocates (llama_model.cc: a slot per
// micro-batch in flight, the shared backward scratch), the parameters of the rank's stage and
// shards (llama_pipeline_stage.h, llama_sharding.h) and the optimizers' state.
#include "models/llama/memory_plan.h"

#include "absl/strings/str_format.h"
#include "core/context.h"
#include "core/saturating_size.h"
#include "models/llama/llama_activations.h"
#include "models/llama/llama_pipeline_stage.h"
#include "models/llama/llama_sharding.h"
#include "ssa/attention_scratch.h"

namespace kelvin::models {

int64_t MemoryPlan::Total() const {
  const SaturatingSize total = SaturatingSize(parameters) + master_weights + gradients +
                               optimizer_state + activations + logits + backward_scratch +
                               operator_scratch;
  return total.value();
}

std::string MemoryPlan::ToString() const {
  if (Total() == SaturatingSize::kSaturated) {
    return "more than 8 EiB: the sizes are beyond any machine (the counts saturate)";
  }
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
  // Sizes saturate rather than wrap (core/saturating_size.h): a huge job plans "too large".
  using Size = SaturatingSize;
  const Size nk = Size(o.micro_batch) * o.seq_length;               // tokens attention sees
  const Size n = nk / o.context_parallel;                           // this rank's tokens
  const Size nl = o.sequence_parallel ? n / o.tensor_parallel : n;  // of the norm regions
  const Size act = static_cast<int64_t>(DTypeSize(o.activation_dtype));
  const Size stat = static_cast<int64_t>(DTypeSize(AccumDType(o.activation_dtype)));
  const Size grad = static_cast<int64_t>(DTypeSize(AccumDType(o.parameter_dtype)));
  const Size d_model = c.hidden_size, d = c.head_dim, f = shard.ffn;
  const Size heads = shard.heads, kv_heads = shard.kv_heads;
  const ssa::SsaOptions ssa = c.AttentionOptions();
  const TokenSplits splits{.context_parallel = cp, .sequence_parallel = o.sequence_parallel};

  // The rank's parameters: its stage's tensors, sliced by its tensor-parallel shard; the trainable
  // ones by group (a frozen parameter has its values alone: ParameterSet).
  Size params = 0, trainable = 0;
  Size group_elements[kNumParamGroups] = {};
  for (const LlamaParameterSpec& spec : StageParameterSpecs(c, stage)) {
    const ParameterShard slice = ShardOf(c, shard, spec.name);
    Size elements = 1;
    for (size_t i = 0; i < spec.full_shape.size(); ++i) {
      elements = elements * (static_cast<int>(i) == slice.axis ? slice.count : spec.full_shape[i]);
    }
    params += elements;
    if (!spec.trainable) continue;
    trainable += elements;
    group_elements[static_cast<int>(spec.group)] += elements;
  }
  MemoryPlan plan;
  plan.parameters = (params * static_cast<int64_t>(DTypeSize(o.parameter_dtype))).value();
  plan.gradients = o.forward_only ? 0 : (trainable * grad).value();
  const Size replicas = Size(o.data_parallel) * o.context_parallel;  // ZeRO-1's shards
  const bool zero = o.distributed_optimizer && replicas.value() > 1;
  // A forward-only model (ParameterSet::AllocateForwardOnly) keeps no masters or moments.
  if (!o.forward_only && !zero) {
    plan.master_weights = o.separate_master ? (trainable * 4).value() : 0;
    plan.optimizer_state = (trainable * grad * 2).value();
  } else if (!o.forward_only) {
    Size masters = 0, state = 0, gradients = plan.gradients;
    // parallel/distributed_adamw.h over D = DP x CP ranks, per group of E elements with
    // S = ceil(E / D): the moments [S] each and the f32 masters' shard [S] when kept apart; the
    // gradients padded to [D * S] (their zero tail) and the reduced shard [S], in the master
    // weights' dtype (that of the gradients).
    for (const Size elements : group_elements) {
      if (elements.value() == 0) continue;
      const Size s = (elements + replicas - 1) / replicas;
      if (o.separate_master) masters += s * 4;
      state += s * grad * 2;
      gradients += (replicas * s - elements) * grad + s * grad;
    }
    plan.master_weights = masters.value();
    plan.optimizer_state = state.value();
    plan.gradients = gradients.value();
  }

  // LlamaLayerActivations (llama_activations.h): each field the layout needs, kept per layer, or
  // when recomputed once in the backward scratch.
  const ActivationSizes<Size> sizes{.local_tokens = nl,
                                    .tokens = n,
                                    .key_tokens = nk,
                                    .model = d_model,
                                    .heads = heads,
                                    .kv_heads = kv_heads,
                                    .head_dim = d,
                                    .ffn = f};
  const LlamaRecompute recompute{o.recompute_attention, o.recompute_mlp};
  Size per_layer = 0, recompute_buffers = 0;
  for (const LlamaActivationField& field : LlamaActivationFields()) {
    if (!ActivationNeeded(field.need, ssa, splits)) continue;
    const Size bytes = ActivationElements(field, sizes) * (field.statistics ? stat : act);
    (Recomputed(field, recompute) ? recompute_buffers : per_layer) += bytes;
  }
  plan.activations_per_layer = per_layer.value();
  // A slot: the layers, the token and position ids, each chunk's output [Nl, D]; on the last
  // stage the final norm's output [N, D] and rstd [Nl], and the logits [N, V/TP].
  const Size chunks = o.virtual_stages;
  Size slot = Size(stage.num_local_layers()) * per_layer + n * 2 * 4 + (cp ? nk * 4 : Size(0)) +
              chunks * nl * d_model * act;
  if (stage.holds_head()) slot += n * d_model * act + nl * stat;
  const Size slots = o.micro_batches_in_flight;
  plan.activations = (slots * slot).value();
  plan.logits = stage.holds_head() ? (slots * n * shard.vocab * act).value() : 0;
  // Per slot, each chunk's gradient [Nl, D]; the scratch every layer shares (LlamaScratch, in
  // llama_activations.h); the recompute buffers.
  Size shared_scratch = 0;
  for (const LlamaScratchField& field : LlamaScratchFields()) {
    if (ActivationNeeded(field.need, ssa, splits)) {
      shared_scratch += ActivationElements(field, sizes) * act;
    }
  }
  plan.backward_scratch =
      (slots * chunks * nl * d_model * act + shared_scratch + recompute_buffers).value();
  if (o.activation_dtype == DType::kBF16) {
    // One backward call of the CUDA operator over nq queries (half the rank's with context
    // parallelism: two query blocks) and the nk keys, as the operator reports it, and cuBLASLt's
    // workspace.
    const ssa::AttentionCallSize call{
        .queries = cp ? n / 2 : n, .keys = nk, .heads = heads, .kv_heads = kv_heads, .head_dim = d};
    plan.operator_scratch = (ssa::AttentionBackwardScratchBytes(ssa, call, o.attention_backend) +
                             kCublasLtWorkspaceBytes)
                                .value();
  }
  if (c.lora.has_value() && c.lora->dropout > 0 && !o.forward_only) {
    Size widest = 0;  // the adapted projections' local input features
    for (const LoraTarget target : c.lora->targets) {
      const Size in = target == LoraTarget::kO      ? heads * d
                      : target == LoraTarget::kDown ? f
                                                    : d_model;
      widest = std::max(widest.value(), in.value());
    }
    plan.operator_scratch = std::max(plan.operator_scratch, (n * widest * act * 2).value());
  }
  return plan;
}

}  // namespace kelvin::models
