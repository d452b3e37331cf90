// How one pipeline rank holds Llama: Megatron's interleaved placement of consecutive layers into
// model chunks, and every stage's parameters in declaration order (Hugging Face names, full
// shapes, optimizer groups), the one place that says which rank holds what.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/optim/parameter_set.h"
#include "core/tensor.h"
#include "models/llama/llama_config.h"

namespace kelvin::models {

// With P pipeline ranks and V model chunks per rank, chunk c of rank r is virtual stage
// s = c * P + r and holds layers [s * L / (P V), (s + 1) * L / (P V)); virtual stage 0 starts with
// the embedding, the last one (P V - 1) ends with the final norm and the LM head. With tied
// embeddings the last stage holds its own copy of the embedding (its LM head), kept equal to the
// first stage's by summing their gradients.
struct LlamaStageLayout {
  struct Chunk {
    int virtual_stage = 0;
    int64_t layer_begin = 0, layer_end = 0;  // the layers [layer_begin, layer_end)
    int64_t local_begin = 0;                 // the first layer's index among this rank's layers
  };
  int rank = 0, stages = 1, virtual_stages = 1;
  std::vector<Chunk> chunks;  // [V], by chunk

  int64_t num_local_layers() const;
  bool holds_embedding_input() const { return rank == 0; }  // virtual stage 0
  bool holds_head() const { return rank == stages - 1; }    // the last virtual stage
  bool starts_model(int chunk) const;                       // chunk is virtual stage 0
  bool ends_model(int chunk) const;                         // chunk is the last one
};

// The layout of pipeline rank `rank` of `stages` with `virtual_stages` chunks each (the grid
// validated that P V divides L; checked here). One rank (1, 1): every layer in one chunk.
LlamaStageLayout StageLayoutOf(const LlamaConfig& config, int rank, int stages, int virtual_stages);

struct LlamaParameterSpec {
  std::string name;  // Hugging Face name
  Shape full_shape;  // before tensor-parallel sharding
  ParamGroup group;
  bool trainable = true;  // false: frozen (LlamaConfig::trainable)
};

// The parameters pipeline rank `stage.rank` holds, in declaration order: the embedding (virtual
// stage 0, or the tied LM head of the last stage), each chunk's layers, then the final norm and
// the untied LM head (last stage). For one rank this is the whole model in Hugging Face order.
// Each layer's LoRA parameters (LoraLayerParameters) follow its SSA ones.
std::vector<LlamaParameterSpec> StageParameterSpecs(const LlamaConfig& config,
                                                    const LlamaStageLayout& stage);

// "model.layers.<layer>.<suffix>".
std::string LayerParameterName(int64_t layer, std::string_view suffix);

inline constexpr const char* kEmbeddingName = "model.embed_tokens.weight";
inline constexpr const char* kFinalNormName = "model.norm.weight";
inline constexpr const char* kLmHeadName = "lm_head.weight";

}  // namespace kelvin::models
