// The trainable sets by parameter name, and the LoRA targets, scale and parameter shapes.
#include "models/llama/llama_peft.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "core/check.h"

namespace kelvin::models {
namespace {

constexpr LoraTarget kAllTargets[] = {LoraTarget::kQ,   LoraTarget::kK,    LoraTarget::kV,
                                      LoraTarget::kO,   LoraTarget::kGate, LoraTarget::kUp,
                                      LoraTarget::kDown};

}  // namespace

double LoraOptions::Scale() const {
  const double r = static_cast<double>(rank);
  return rslora ? alpha / std::sqrt(r) : alpha / r;
}

const char* LoraTargetName(LoraTarget target) {
  switch (target) {
    case LoraTarget::kQ:
      return "q_proj";
    case LoraTarget::kK:
      return "k_proj";
    case LoraTarget::kV:
      return "v_proj";
    case LoraTarget::kO:
      return "o_proj";
    case LoraTarget::kGate:
      return "gate_proj";
    case LoraTarget::kUp:
      return "up_proj";
    case LoraTarget::kDown:
      return "down_proj";
  }
  KELVIN_FATAL() << "unknown LoRA target " << static_cast<int>(target);
  return "";
}

std::string LoraTargetModule(LoraTarget target) {
  const bool attention = target == LoraTarget::kQ || target == LoraTarget::kK ||
                         target == LoraTarget::kV || target == LoraTarget::kO;
  return absl::StrCat(attention ? "self_attn." : "mlp.", LoraTargetName(target));
}

std::optional<LoraTarget> LoraTargetNamed(std::string_view name) {
  for (const LoraTarget target : kAllTargets) {
    const std::string_view full = LoraTargetName(target);
    if (name == full || name == full.substr(0, full.size() - std::string_view("_proj").size())) {
      return target;
    }
  }
  return std::nullopt;
}

bool IsColumnParallel(LoraTarget target) {
  return target != LoraTarget::kO && target != LoraTarget::kDown;
}

std::vector<LoraParameterSpec> LoraLayerParameters(const LoraOptions& lora, int64_t d_model,
                                                   int64_t q_size, int64_t kv_size, int64_t ffn) {
  std::vector<LoraParameterSpec> specs;
  for (const LoraTarget target : lora.targets) {
    int64_t in = d_model, out = d_model;  // [out, in] of the base projection
    switch (target) {
      case LoraTarget::kQ:
        out = q_size;
        break;
      case LoraTarget::kK:
      case LoraTarget::kV:
        out = kv_size;
        break;
      case LoraTarget::kO:
        in = q_size;
        break;
      case LoraTarget::kGate:
      case LoraTarget::kUp:
        out = ffn;
        break;
      case LoraTarget::kDown:
        in = ffn;
        break;
    }
    const std::string module = LoraTargetModule(target);
    specs.push_back({absl::StrCat(module, ".lora_A.weight"), {lora.rank, in}, target, true});
    specs.push_back({absl::StrCat(module, ".lora_B.weight"), {out, lora.rank}, target, false});
  }
  return specs;
}

bool IsLoraParameter(std::string_view name) {
  return name.ends_with(".lora_A.weight") || name.ends_with(".lora_B.weight");
}

bool IsTrainable(const std::optional<TrainableSets>& sets, std::string_view name) {
  if (!sets.has_value()) return true;
  if (IsLoraParameter(name)) return sets->adapters;
  if (name.find(".self_attn.ssa.") != std::string_view::npos) return sets->ssa;
  if (name.ends_with("layernorm.weight") || name == "model.norm.weight") return sets->norms;
  if (name == "model.embed_tokens.weight" || name == "lm_head.weight") return sets->embeddings;
  return false;  // the base's projections
}

}  // namespace kelvin::models
