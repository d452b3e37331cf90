// Gradient units from the stage's parameter specs, by chunk in reverse.
#include "models/llama/llama_gradient_units.h"

#include <map>

namespace kelvin::models {

LlamaGradientUnits GradientUnitsOf(const LlamaConfig& config, const LlamaStageLayout& stage) {
  std::map<int64_t, std::vector<std::string>> layer_parameters;  // by layer
  for (const LlamaParameterSpec& spec : StageParameterSpecs(config, stage)) {
    const std::string prefix = "model.layers.";
    if (spec.name.rfind(prefix, 0) != 0) continue;
    const int64_t layer = std::stoll(spec.name.substr(prefix.size()));
    layer_parameters[layer].push_back(spec.name);
  }
  const bool tied_over_stages = config.tie_word_embeddings && stage.stages > 1 &&
                                (stage.holds_embedding_input() || stage.holds_head());
  LlamaGradientUnits units;
  units.layer.resize(static_cast<size_t>(stage.num_local_layers()), -1);
  auto add = [&units](std::vector<std::string> names) {
    units.parameters.push_back(std::move(names));
    return static_cast<int>(units.parameters.size()) - 1;
  };
  for (int c = static_cast<int>(stage.chunks.size()) - 1; c >= 0; --c) {
    const LlamaStageLayout::Chunk& chunk = stage.chunks[static_cast<size_t>(c)];
    if (stage.ends_model(c)) {
      std::vector<std::string> head = {kFinalNormName};
      if (!config.tie_word_embeddings) head.push_back(kLmHeadName);
      units.head = add(std::move(head));
    }
    for (int64_t l = chunk.layer_end - 1; l >= chunk.layer_begin; --l) {
      units.layer[static_cast<size_t>(chunk.local_begin + l - chunk.layer_begin)] =
          add(layer_parameters.at(l));
    }
    if (stage.starts_model(c) && !tied_over_stages) units.embedding = add({kEmbeddingName});
  }
  if (tied_over_stages) units.summed_last = add({kEmbeddingName});
  return units;
}

}  // namespace kelvin::models
