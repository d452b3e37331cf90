// The order in which a step's backward finishes one pipeline rank's gradients, as units of
// parameters that parallel::GradientBuckets packs into buckets and starts reducing as each
// bucket's units finish.
#pragma once

#include <string>
#include <vector>

#include "models/llama/llama_config.h"
#include "models/llama/llama_pipeline_stage.h"

namespace kelvin::models {

struct LlamaGradientUnits {
  // [units] parameter names, in finishing order: per chunk from the last, its head (final norm,
  // untied LM head) when it ends the model, its layers from the last, its embedding when it starts
  // the model; then a tied embedding over pipeline stages.
  std::vector<std::vector<std::string>> parameters;
  int head = -1;           // the head's unit (-1: not on this rank)
  std::vector<int> layer;  // [local layers] each layer's unit, by local layer index
  int embedding = -1;      // the embedding's unit, final after chunk 0's backward (-1: none)
  // A tied embedding over pipeline stages (first and last stage): final only once FinishGradients
  // summed its copies over the two stages (-1: none).
  int summed_last = -1;
};

LlamaGradientUnits GradientUnitsOf(const LlamaConfig& config, const LlamaStageLayout& stage);

}  // namespace kelvin::models
