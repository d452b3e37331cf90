// LlamaConfig: the architecture of a Llama-3 model, read from a Hugging Face config.json or taken
// from a built-in preset, and validated with messages that name the field, the value and the rule.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/ops/rope.h"
#include "core/optim/parameter_set.h"
#include "core/status.h"
#include "models/llama/llama_peft.h"
#include "ssa/ssa_options.h"

namespace kelvin::models {

// The largest sizes Kelvin accepts, wherever they come from (config.json, a preset, the job):
// far beyond any Llama (Llama-3.1-405B: hidden 16384, FFN 53248, 126 layers, 128 heads, head
// dim 128, a 128256-token vocabulary), small enough that loops over them end quickly and that
// sizes derived from them are checked, not wrapped.
inline constexpr int64_t kMaxHiddenSize = int64_t{1} << 17;        // 131072
inline constexpr int64_t kMaxIntermediateSize = int64_t{1} << 20;  // 1048576
inline constexpr int64_t kMaxLayers = 4096;
inline constexpr int64_t kMaxHeads = 4096;  // query heads, and key/value heads
inline constexpr int64_t kMaxHeadDim = 4096;
inline constexpr int64_t kMaxVocabSize = int64_t{1} << 24;  // 16777216
inline constexpr int64_t kMaxPositions = int64_t{1} << 27;  // 134217728 tokens of context

// The special tokens of a model's config.json, kept so that an export names them again (training
// uses none; generation stops at eos). Unset when the source does not say (presets).
struct SpecialTokenIds {
  std::optional<int64_t> bos;
  std::vector<int64_t> eos;  // Llama-3 Instruct has several (128001, 128008, 128009)
  std::optional<int64_t> pad;
};

// config.json's model_type and architecture of an SSA model (models/llama/hf/ holds its code).
inline constexpr char kSsaHfModelType[] = "ssa_llama";
inline constexpr char kSsaHfArchitecture[] = "SsaLlamaForCausalLM";

// How config.json spells RoPE: transformers 5's "rope_parameters" (rope_theta inside), or 4.x's
// top-level "rope_theta" with "rope_scaling". A plain Llama's export writes the form its source
// used; an SSA export always writes rope_parameters (LlamaConfigToHfJson says why).
enum class HfRopeForm { kRopeParameters, kRopeScaling };

struct LlamaConfig {
  int64_t hidden_size = 0;          // D
  int64_t intermediate_size = 0;    // F
  int64_t num_layers = 0;           // L
  int64_t num_attention_heads = 0;  // H
  int64_t num_key_value_heads = 0;  // G
  int64_t head_dim = 0;             // d (D / H unless config.json says otherwise)
  int64_t vocab_size = 0;           // V
  int64_t max_position_embeddings = 0;
  double rms_norm_eps = 1e-5;
  bool tie_word_embeddings = false;
  ops::RopeConfig rope;
  HfRopeForm hf_rope_form = HfRopeForm::kRopeParameters;  // presets: the pinned transformers 5's
  SpecialTokenIds special_tokens;
  // Selective Self-Attention (docs/ssa.md); unset = vanilla attention. From the job config's
  // model.ssa, or the "ssa" object of an SSA export's config.json.
  std::optional<ssa::SsaOptions> ssa;
  // Parameter-efficient fine-tuning (llama_peft.h), from the job's model.lora and model.peft,
  // never from config.json: LoRA adapters beside the targeted projections (unset: none), and the
  // sets that train on a frozen base (unset: every parameter trains).
  std::optional<LoraOptions> lora;
  std::optional<TrainableSets> trainable;

  int64_t q_size() const { return num_attention_heads * head_dim; }   // H*d
  int64_t kv_size() const { return num_key_value_heads * head_dim; }  // G*d
  // What the attention operator runs: the SSA flags, or both temperatures off (vanilla).
  ssa::SsaOptions AttentionOptions() const { return ssa.value_or(ssa::VanillaAttentionOptions()); }
  int64_t NumParameters() const;  // SSA parameters included
  // The most positions a forward or decoder takes: max_position_embeddings, or with dynamic NTK
  // scaling, which exists to run beyond it (its original length), kMaxPositions.
  int64_t PositionLimit() const {
    return rope.type == ops::RopeType::kDynamic ? kMaxPositions : max_position_embeddings;
  }
};

// One SSA parameter of a decoder layer: its name after "model.layers.<l>.", shape and group.
struct SsaParameterSpec {
  std::string suffix;
  Shape shape;
  ParamGroup group;
};

// The SSA parameters of one layer under the config's flags (none without SSA):
//   self_attn.ssa.query_readout [H, d], self_attn.ssa.alpha [H]  (query temperature on)
//   self_attn.ssa.value_readout [G, d]                           (value temperature on)
//   self_attn.ssa.query_temperature_proj.weight [H*d, D], ...value_temperature_proj.weight
//   [G*d, D]  (weight_sharing off and token_aware on: W_tmp, sharded by head like W_q / W_v)
// Read-outs and alpha are in the kTemperature group (no decay, scaled lr); W_tmp decays.
std::vector<SsaParameterSpec> SsaLayerParameters(const LlamaConfig& config);

// For the name of an SSA parameter (".self_attn.ssa.<suffix>", possibly inside a longer checkpoint
// name), the job settings under which a model has it, e.g. "model.ssa.enabled=true and
// model.ssa.value_temperature=true"; "" for any other name.
std::string SsaSettingsThatNeed(std::string_view tensor_name);

// Reads `directory`/config.json (transformers 4.x `rope_theta` + `rope_scaling`, or 5.x
// `rope_parameters`), its bos/eos/pad token ids, and of an SSA export (model_type "ssa_llama")
// the "ssa" object (every key of SsaOptions; an unknown key, a wrong type or a missing object is
// an error naming it). Unsupported features (biases, other activations, other model types) are
// errors naming the field.
absl::StatusOr<LlamaConfig> LlamaConfigFromHfDirectory(const std::string& directory);
absl::StatusOr<LlamaConfig> LlamaConfigFromHfJson(std::string_view json_text,
                                                  std::string_view source_name);
// config.json text for weights of `weights_dtype` (f32 or bf16, named in torch_dtype and dtype):
// transformers' LlamaConfig without SSA; with SSA, model_type "ssa_llama", the architecture
// SsaLlamaForCausalLM, an auto_map to the modeling code shipped beside it and the "ssa" object.
std::string LlamaConfigToHfJson(const LlamaConfig& config, DType weights_dtype = DType::kF32);

// Built-in architectures: "llama3-8b", "llama3.1-8b", "small-25m" (benchmarks), "tiny" (demos
// and tests; byte vocabulary).
absl::StatusOr<LlamaConfig> LlamaPreset(std::string_view name);
std::vector<std::string> LlamaPresetNames();
// The preset a model directory's name names ("Meta-Llama-3.1-8B-Instruct": "llama3.1-8b"; the
// longest preset name found in it, ignoring case and separators), or nullopt.
std::optional<std::string> LlamaPresetNamedIn(std::string_view directory_name);

// Every violated rule, one per line, fields named as in the job config ("model.<field>"); the
// message starts with "the model's architecture (<source>)", e.g. source "config.json of
// model.hf_dir=/m", so that the user knows which file or setting to mend.
absl::Status ValidateLlamaConfig(const LlamaConfig& config, std::string_view source = "");

// The rules of a RoPE scaling, one problem per line with the fields under `path` (e.g.
// "model.architecture.rope_scaling"): the one check of config.json's and the job's values. Every
// scaling: factor >= 1 and original_max_position_embeddings in [1, kMaxPositions]; llama3:
// 0 < low_freq_factor < high_freq_factor; yarn: rope_theta > 1, beta_fast >= beta_slow, finite
// mscales, attention_factor > 0; longrope: head_dim / 2 positive short and long factors (not
// checked while head_dim is 0, unknown), attention_factor > 0. Default RoPE: none.
std::vector<std::string> RopeScalingProblems(const ops::RopeConfig& rope, int64_t head_dim,
                                             std::string_view path);

}  // namespace kelvin::models
