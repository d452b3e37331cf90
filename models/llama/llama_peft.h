// Parameter-efficient fine-tuning of Llama: the trainable sets (which parameters train on a frozen
// base) and the LoRA adapters' settings and parameters, named as Hugging Face's peft names them
// inside the model (the adapter export adds peft's "base_model.model." prefix).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/optim/parameter_set.h"
#include "core/tensor.h"

namespace kelvin::models {

// The projections of a decoder layer that LoRA can adapt (peft's target_modules names).
enum class LoraTarget { kQ, kK, kV, kO, kGate, kUp, kDown };
inline constexpr int kNumLoraTargets = 7;

// LoRA (Hu et al., 2021): W x + s B A x beside a frozen W [out, in], A [r, in], B [out, r].
struct LoraOptions {
  int64_t rank = 8;     // r
  double alpha = 16.0;  // the scale's numerator
  bool rslora = false;  // s = alpha / sqrt(r) (Kalajdzievski, 2023) instead of alpha / r
  // Dropout on the adapter's input in training forwards (peft's lora_dropout): s B A dropout(x),
  // in [0, 1). LlamaModel::SetLoraDropout says which forwards draw masks.
  double dropout = 0.0;
  std::vector<LoraTarget> targets;  // each once, in LoraTarget order
  double Scale() const;             // s
};

// Which parameters a parameter-efficient fine-tune trains; every other one (the base) is frozen.
struct TrainableSets {
  bool adapters = false;    // the LoRA A and B matrices
  bool ssa = false;         // SSA's read-outs, alphas and (without weight sharing) W_tmp
  bool norms = false;       // the RMSNorm weights, the final norm's included
  bool embeddings = false;  // the embedding and the LM head
};

// The name peft gives a projection ("q_proj", ..., "down_proj") and its module path inside a
// layer ("self_attn.q_proj", "mlp.down_proj").
const char* LoraTargetName(LoraTarget target);
std::string LoraTargetModule(LoraTarget target);
// The target named `name` ("q_proj" or "q", ...), or nullopt.
std::optional<LoraTarget> LoraTargetNamed(std::string_view name);
// Whether the projection is column-parallel under tensor parallelism (q, k, v, gate, up: its
// output split) rather than row-parallel (o, down: its input split).
bool IsColumnParallel(LoraTarget target);

// One LoRA parameter of a decoder layer: its name after "model.layers.<l>.", e.g.
// "self_attn.q_proj.lora_A.weight" [r, in], "self_attn.q_proj.lora_B.weight" [out, r].
struct LoraParameterSpec {
  std::string suffix;
  Shape shape;
  LoraTarget target;
  bool is_a;  // lora_A (else lora_B)
};
// A then B of each target, in target order; `in` and `out` of each projection from the shapes
// given (d_model D, q_size H*d, kv_size G*d, ffn F).
std::vector<LoraParameterSpec> LoraLayerParameters(const LoraOptions& lora, int64_t d_model,
                                                   int64_t q_size, int64_t kv_size, int64_t ffn);

// Whether the parameter named `name` trains: every one without `sets` (a full fine-tune), else
// the members of the sets it enables.
bool IsTrainable(const std::optional<TrainableSets>& sets, std::string_view name);

// Whether `name` is a LoRA parameter (".lora_A.weight" / ".lora_B.weight").
bool IsLoraParameter(std::string_view name);

}  // namespace kelvin::models
