// LlamaConfig: the architecture of a Llama-3 model, read from a Hugging Face config.json or taken
// from a built-in preset, and validated with messages that name the field, the value and the rule.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "core/ops/rope.h"
#include "core/status.h"

namespace kelvin::models {

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

  int64_t q_size() const { return num_attention_heads * head_dim; }   // H*d
  int64_t kv_size() const { return num_key_value_heads * head_dim; }  // G*d
  int64_t NumParameters() const;
};

// Reads `directory`/config.json (transformers 4.x `rope_theta` + `rope_scaling`, or 5.x
// `rope_parameters`). Unsupported features (biases, other activations, other model types) are
// errors naming the field.
absl::StatusOr<LlamaConfig> LlamaConfigFromHfDirectory(const std::string& directory);
absl::StatusOr<LlamaConfig> LlamaConfigFromHfJson(std::string_view json_text,
                                                  std::string_view source_name);
// config.json text that transformers' LlamaConfig loads (for export).
std::string LlamaConfigToHfJson(const LlamaConfig& config);

// Built-in architectures: "llama3-8b", "llama3.1-8b", "small-25m" (benchmarks), "tiny" (demos
// and tests; byte vocabulary).
absl::StatusOr<LlamaConfig> LlamaPreset(std::string_view name);
std::vector<std::string> LlamaPresetNames();

// Every violated rule, one per line, fields named as in the job config ("model.<field>").
absl::Status ValidateLlamaConfig(const LlamaConfig& config);

}  // namespace kelvin::models
