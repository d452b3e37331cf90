// Shapes and names of a Hugging Face checkpoint's tensors against the model config, read from the
// safetensors headers only; the config fields a wrong shape follows from are found by changing
// each size field and seeing which dimensions move.
#include "models/llama/hf_weight_check.h"

#include <algorithm>
#include <charconv>
#include <string_view>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "core/status.h"
#include "models/llama/llama_pipeline_stage.h"

namespace kelvin::models {
namespace {

// The config.json sizes a parameter's shape is made of (the layer count decides names instead).
struct SizeField {
  const char* name;
  int64_t LlamaConfig::*member;
};
constexpr SizeField kSizeFields[] = {
    {"vocab_size", &LlamaConfig::vocab_size},
    {"hidden_size", &LlamaConfig::hidden_size},
    {"intermediate_size", &LlamaConfig::intermediate_size},
    {"num_attention_heads", &LlamaConfig::num_attention_heads},
    {"num_key_value_heads", &LlamaConfig::num_key_value_heads},
    {"head_dim", &LlamaConfig::head_dim},
};

// Every parameter of the whole model (one stage holding all layers), in Hugging Face order.
// The LoRA adapters are never part of a model's checkpoint (a base's).
std::vector<LlamaParameterSpec> WholeModel(const LlamaConfig& config) {
  LlamaConfig base = config;
  base.lora.reset();
  return StageParameterSpecs(base, StageLayoutOf(base, 0, 1, 1));
}

// The unsharded shape of `tensor` under `config`.
Shape FullShape(const LlamaConfig& config, const std::string& tensor) {
  for (const LlamaParameterSpec& spec : WholeModel(config)) {
    if (spec.name == tensor) return spec.full_shape;
  }
  return {};
}

// The size fields behind the dimensions in which `found` differs from `expected` (all of them when
// the ranks differ), as "name=value".
std::vector<std::string> FieldsBehind(const LlamaConfig& config, const std::string& tensor,
                                      const Shape& expected, const Shape& found) {
  std::vector<std::string> fields;
  for (const SizeField& field : kSizeFields) {
    LlamaConfig changed = config;
    changed.*field.member += 1;
    const Shape moved = FullShape(changed, tensor);
    for (size_t i = 0; i < expected.size() && i < moved.size(); ++i) {
      const bool differs = found.size() != expected.size() || found[i] != expected[i];
      if (differs && moved[i] != expected[i]) {
        fields.push_back(absl::StrCat(field.name, "=", config.*field.member));
        break;
      }
    }
  }
  return fields;
}

// The layer of "model.layers.<l>.<suffix>", or -1.
int64_t LayerOf(absl::string_view name) {
  if (!absl::ConsumePrefix(&name, "model.layers.")) return -1;
  int64_t layer = -1;
  const auto [end, error] = std::from_chars(name.data(), name.data() + name.size(), layer);
  return error == std::errc() && end != name.data() && *end == '.' ? layer : -1;
}

}  // namespace

absl::Status CheckHfWeightsMatchConfig(const io::HfCheckpoint& checkpoint,
                                       const LlamaConfig& config) {
  int64_t layers_in_file = 0;
  for (const std::string& name : checkpoint.TensorNames()) {
    layers_in_file = std::max(layers_in_file, LayerOf(name) + 1);
  }
  for (const LlamaParameterSpec& spec : WholeModel(config)) {
    const std::string& name = spec.name;
    const Shape& expected = spec.full_shape;
    const io::SafetensorsEntry* found = checkpoint.Find(name);
    if (found == nullptr && absl::StrContains(name, ".self_attn.ssa.")) continue;
    if (found == nullptr && LayerOf(name) >= layers_in_file) {
      return absl::InvalidArgumentError(
          absl::StrCat(checkpoint.path(), " holds the weights of ", layers_in_file,
                       " layers but the model config has num_hidden_layers=", config.num_layers,
                       " (no tensor \"", name,
                       "\"): is config.json from the same model? Set num_hidden_layers to ",
                       layers_in_file, ", or use the weights that go with this config.json"));
    }
    if (found == nullptr) {
      return absl::NotFoundError(
          absl::StrCat(checkpoint.path(), " has no tensor \"", name,
                       "\", which the model config needs (is config.json from the same model?)"));
    }
    if (found->shape != expected) {
      const std::vector<std::string> fields = FieldsBehind(config, name, expected, found->shape);
      return absl::InvalidArgumentError(absl::StrCat(
          checkpoint.path(), ": tensor \"", name, "\" has shape ", ShapeToString(found->shape),
          " but the model config",
          fields.empty() ? "" : absl::StrCat(" (", absl::StrJoin(fields, ", "), ")"), " gives it ",
          ShapeToString(expected),
          ": is config.json from the same model? Fix config.json (or model.architecture), or use "
          "the weights that go with it"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<io::HfCheckpoint> OpenHfWeightsFor(const std::string& directory,
                                                  const LlamaConfig& config) {
  KELVIN_ASSIGN_OR_RETURN(io::HfCheckpoint checkpoint, io::HfCheckpoint::Open(directory));
  KELVIN_RETURN_IF_ERROR(CheckHfWeightsMatchConfig(checkpoint, config));
  return checkpoint;
}

}  // namespace kelvin::models
