// Layer placement over pipeline ranks and the parameters each rank declares.
#include "models/llama/llama_pipeline_stage.h"

#include "absl/strings/str_cat.h"
#include "core/logging.h"

namespace kelvin::models {

int64_t LlamaStageLayout::num_local_layers() const {
  int64_t count = 0;
  for (const Chunk& c : chunks) count += c.layer_end - c.layer_begin;
  return count;
}

bool LlamaStageLayout::starts_model(int chunk) const { return chunks[chunk].virtual_stage == 0; }

bool LlamaStageLayout::ends_model(int chunk) const {
  return chunks[chunk].virtual_stage == stages * virtual_stages - 1;
}

LlamaStageLayout StageLayoutOf(const LlamaConfig& config, int rank, int stages,
                               int virtual_stages) {
  const int64_t virtual_total = static_cast<int64_t>(stages) * virtual_stages;
  KELVIN_CHECK(rank >= 0 && rank < stages && virtual_stages >= 1 &&
               config.num_layers % virtual_total == 0)
      << "pipeline rank " << rank << " of " << stages << " with " << virtual_stages
      << " chunks each cannot hold " << config.num_layers << " layers evenly";
  const int64_t per_stage = config.num_layers / virtual_total;
  LlamaStageLayout layout{rank, stages, virtual_stages, {}};
  int64_t local = 0;
  for (int c = 0; c < virtual_stages; ++c) {
    const int s = c * stages + rank;
    layout.chunks.push_back({s, s * per_stage, (s + 1) * per_stage, local});
    local += per_stage;
  }
  return layout;
}

std::string LayerParameterName(int64_t layer, std::string_view suffix) {
  return absl::StrCat("model.layers.", layer, ".", std::string(suffix));
}

std::vector<LlamaParameterSpec> StageParameterSpecs(const LlamaConfig& config,
                                                    const LlamaStageLayout& stage) {
  const int64_t d_model = config.hidden_size, f = config.intermediate_size;
  std::vector<LlamaParameterSpec> specs;
  const bool tied_head = config.tie_word_embeddings && stage.holds_head();
  if (stage.holds_embedding_input() || tied_head) {
    specs.push_back({kEmbeddingName, {config.vocab_size, d_model}, ParamGroup::kDecay});
  }
  for (const LlamaStageLayout::Chunk& chunk : stage.chunks) {
    for (int64_t l = chunk.layer_begin; l < chunk.layer_end; ++l) {
      auto add = [&](std::string_view suffix, const Shape& shape, ParamGroup group) {
        specs.push_back({LayerParameterName(l, suffix), shape, group});
      };
      add("input_layernorm.weight", {d_model}, ParamGroup::kNoDecay);
      add("self_attn.q_proj.weight", {config.q_size(), d_model}, ParamGroup::kDecay);
      add("self_attn.k_proj.weight", {config.kv_size(), d_model}, ParamGroup::kDecay);
      add("self_attn.v_proj.weight", {config.kv_size(), d_model}, ParamGroup::kDecay);
      add("self_attn.o_proj.weight", {d_model, config.q_size()}, ParamGroup::kDecay);
      add("post_attention_layernorm.weight", {d_model}, ParamGroup::kNoDecay);
      add("mlp.gate_proj.weight", {f, d_model}, ParamGroup::kDecay);
      add("mlp.up_proj.weight", {f, d_model}, ParamGroup::kDecay);
      add("mlp.down_proj.weight", {d_model, f}, ParamGroup::kDecay);
      for (const SsaParameterSpec& spec : SsaLayerParameters(config)) {
        add(spec.suffix, spec.shape, spec.group);
      }
      if (config.lora.has_value()) {
        for (const LoraParameterSpec& spec :
             LoraLayerParameters(*config.lora, d_model, config.q_size(), config.kv_size(), f)) {
          add(spec.suffix, spec.shape, ParamGroup::kDecay);
        }
      }
    }
  }
  if (stage.holds_head()) {
    specs.push_back({kFinalNormName, {d_model}, ParamGroup::kNoDecay});
    if (!config.tie_word_embeddings) {
      specs.push_back({kLmHeadName, {config.vocab_size, d_model}, ParamGroup::kDecay});
    }
  }
  for (LlamaParameterSpec& spec : specs) spec.trainable = IsTrainable(config.trainable, spec.name);
  return specs;
}

}  // namespace kelvin::models
