// Llama memory plan: mirrors the buffers LlamaModel allocates (llama_model.cc).
#include "models/llama/memory_plan.h"

#include "absl/strings/str_format.h"

namespace kelvin::models {

int64_t MemoryPlan::Total() const {
  return parameters + master_weights + gradients + optimizer_state + activations + logits +
         backward_scratch;
}

std::string MemoryPlan::ToString() const {
  auto gib = [](int64_t bytes) { return static_cast<double>(bytes) / (1 << 30); };
  return absl::StrFormat(
      "parameters %.3f GiB, master weights %.3f GiB, gradients %.3f GiB, optimizer state "
      "%.3f GiB, activations %.3f GiB (%.3f GiB per layer), logits %.3f GiB, backward scratch "
      "%.3f GiB; total %.3f GiB",
      gib(parameters), gib(master_weights), gib(gradients), gib(optimizer_state), gib(activations),
      gib(activations_per_layer), gib(logits), gib(backward_scratch), gib(Total()));
}

MemoryPlan PlanLlamaMemory(const LlamaConfig& c, const MemoryPlanOptions& o) {
  const int64_t n = o.micro_batch * o.seq_length;  // tokens
  const int64_t act = static_cast<int64_t>(DTypeSize(o.activation_dtype));
  const int64_t stat = static_cast<int64_t>(DTypeSize(AccumDType(o.activation_dtype)));
  const int64_t grad = static_cast<int64_t>(DTypeSize(AccumDType(o.parameter_dtype)));
  const int64_t d_model = c.hidden_size, f = c.intermediate_size;
  const int64_t q = c.q_size(), kv = c.kv_size(), heads = c.num_attention_heads;
  const int64_t params = c.NumParameters();
  // SSA (llama_model.cc): tau^q [N, H] and tau^v [N, G] in the statistics dtype; without weight
  // sharing also the temperature sources [N, H*d], [N, G*d] and their gradients.
  const ssa::SsaOptions ssa = c.AttentionOptions();
  const bool own_sources = !ssa.weight_sharing && ssa.token_aware;
  const int64_t temperatures =
      (ssa.query_temperature ? heads : 0) + (ssa.value_temperature ? c.num_key_value_heads : 0);
  const int64_t sources =
      own_sources ? (ssa.query_temperature ? q : 0) + (ssa.value_temperature ? kv : 0) : 0;

  MemoryPlan plan;
  plan.parameters = params * static_cast<int64_t>(DTypeSize(o.parameter_dtype));
  plan.master_weights = o.separate_master ? params * 4 : 0;
  plan.gradients = params * grad;
  plan.optimizer_state = 2 * params * grad;
  // LlamaLayerActivations: x, h_attn, x_mid, h_mlp [N, D]; u, attn [N, H*d]; k, v [N, G*d];
  // gate, up, act [N, F]; rstd_attn, rstd_mlp [N] and lse [N, H] in the statistics dtype.
  plan.activations_per_layer = n * act * (4 * d_model + 2 * q + 2 * kv + 3 * f + sources) +
                               n * stat * (2 + heads + temperatures);
  // Plus the final norm's input and output [N, D], its rstd [N] and the token/position ids.
  plan.activations =
      c.num_layers * plan.activations_per_layer + 2 * n * d_model * act + n * stat + 2 * n * 4;
  plan.logits = n * c.vocab_size * act;
  // dx, dh, d_proj [N, D]; du, dattn [N, H*d]; dk, dv [N, G*d]; dgate, dup, dact [N, F].
  plan.backward_scratch = n * act * (3 * d_model + 2 * q + 2 * kv + 3 * f + sources);
  return plan;
}

}  // namespace kelvin::models
