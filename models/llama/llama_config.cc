// Llama configs: Hugging Face config.json parsing (transformers 4.x and 5.x), presets, validation.
#include "models/llama/llama_config.h"

#include <cmath>
#include <limits>
#include <nlohmann/json.hpp>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/io/regular_file.h"
#include "core/io/strict_json.h"

namespace kelvin::models {
namespace {

using nlohmann::json;

// "a string", "an object", ... for errors that name what a value is.
std::string JsonTypeName(const json& value) {
  if (value.is_object()) return "an object";
  if (value.is_array()) return "a list";
  if (value.is_string()) return "a string";
  if (value.is_boolean()) return "true or false";
  if (value.is_number_integer()) return "an integer";
  if (value.is_number()) return "a number";
  return "null";
}

// Reads an integer/number/bool field; absent fields keep `fallback` unless `required`.
class JsonFields {
 public:
  JsonFields(const json& object, const std::string& source) : object_(object), source_(source) {}

  absl::StatusOr<int64_t> Int(const std::string& key, std::optional<int64_t> fallback) const {
    const auto it = object_.find(key);
    if (it == object_.end() || it->is_null()) return Missing<int64_t>(key, fallback);
    if (!it->is_number_integer()) return WrongType(key, "an integer", *it);
    if (it->is_number_unsigned() &&
        it->get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      return absl::InvalidArgumentError(absl::StrCat(
          source_, ": field \"", key, "\" is ", it->dump(), ", expected an integer below 2^63"));
    }
    return it->get<int64_t>();
  }
  absl::StatusOr<double> Number(const std::string& key, std::optional<double> fallback) const {
    const auto it = object_.find(key);
    if (it == object_.end() || it->is_null()) return Missing<double>(key, fallback);
    if (!it->is_number()) return WrongType(key, "a number", *it);
    return it->get<double>();
  }
  absl::StatusOr<bool> Bool(const std::string& key, bool fallback) const {
    const auto it = object_.find(key);
    if (it == object_.end() || it->is_null()) return fallback;
    if (!it->is_boolean()) return WrongType(key, "true or false", *it);
    return it->get<bool>();
  }
  absl::StatusOr<std::string> String(const std::string& key, std::string fallback) const {
    const auto it = object_.find(key);
    if (it == object_.end() || it->is_null()) return fallback;
    if (!it->is_string()) return WrongType(key, "a string", *it);
    return it->get<std::string>();
  }

 private:
  template <typename T>
  absl::StatusOr<T> Missing(const std::string& key, std::optional<T> fallback) const {
    if (fallback.has_value()) return *fallback;
    return absl::InvalidArgumentError(
        absl::StrCat(source_, ": required field \"", key, "\" is missing"));
  }
  absl::Status WrongType(const std::string& key, const std::string& expected,
                         const json& value) const {
    return absl::InvalidArgumentError(absl::StrCat(source_, ": field \"", key, "\" is ",
                                                   value.dump(), ", expected ", expected, ", not ",
                                                   JsonTypeName(value)));
  }

  const json& object_;
  std::string source_;
};

// The optional number `key` of `fields` (absent or null: unset).
absl::StatusOr<std::optional<double>> OptionalNumber(const JsonFields& fields, const json& object,
                                                     const std::string& key) {
  if (!object.contains(key) || object[key].is_null()) return std::optional<double>();
  KELVIN_ASSIGN_OR_RETURN(const double value, fields.Number(key, std::nullopt));
  return value;
}

// LongRoPE's short_factor / long_factor: a list of at most kMaxHeadDim / 2 numbers (its length
// against the head dim is RopeScalingProblems' rule).
absl::StatusOr<std::vector<double>> NumberList(const json& object, const std::string& where,
                                               const std::string& key) {
  const auto it = object.find(key);
  if (it == object.end() || it->is_null()) {
    return absl::InvalidArgumentError(absl::StrCat(
        where, ": required field \"", key,
        "\" is missing (rope_type \"longrope\" needs short_factor and long_factor, head_dim / 2 "
        "numbers each)"));
  }
  if (!it->is_array() || it->size() > static_cast<size_t>(kMaxHeadDim / 2)) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, ": field \"", key, "\" must be a list of head_dim / 2 numbers, not ",
                     it->is_array() ? absl::StrCat("a list of ", it->size()) : JsonTypeName(*it)));
  }
  std::vector<double> values;
  values.reserve(it->size());
  for (const json& value : *it) {
    if (!value.is_number()) {
      return absl::InvalidArgumentError(absl::StrCat(where, ": field \"", key, "\" holds ",
                                                     value.dump(), ", expected numbers only"));
    }
    values.push_back(value.get<double>());
  }
  return values;
}

// The scaling's own fields (type already read). yarn and longrope without a factor take
// max_position_embeddings / original_max_position_embeddings, and without an original length the
// top-level original_max_position_embeddings (Phi-3's place; it wins, as in transformers), else
// max_position_embeddings.
absl::Status ParseRopeScaling(const json& root, const json& scaling, const std::string& source,
                              const std::string& where, LlamaConfig& config) {
  const JsonFields fields(scaling, where);
  ops::RopeConfig& rope = config.rope;
  if (rope.type == ops::RopeType::kLinear) {
    KELVIN_ASSIGN_OR_RETURN(rope.factor, fields.Number("factor", std::nullopt));
    return absl::OkStatus();
  }
  if (rope.type == ops::RopeType::kDynamic) {
    // transformers takes max_position_embeddings as dynamic NTK's original length.
    KELVIN_ASSIGN_OR_RETURN(rope.factor, fields.Number("factor", std::nullopt));
    KELVIN_ASSIGN_OR_RETURN(const int64_t original, fields.Int("original_max_position_embeddings",
                                                               config.max_position_embeddings));
    if (original != config.max_position_embeddings) {
      return absl::InvalidArgumentError(absl::StrCat(
          where, ": original_max_position_embeddings=", original,
          " with rope_type \"dynamic\": transformers ignores it (dynamic NTK scales beyond "
          "max_position_embeddings=",
          config.max_position_embeddings,
          "); remove it, or set max_position_embeddings to the original length"));
    }
    rope.original_max_position = config.max_position_embeddings;
    return absl::OkStatus();
  }
  if (rope.type == ops::RopeType::kLlama3) {
    KELVIN_ASSIGN_OR_RETURN(rope.factor, fields.Number("factor", std::nullopt));
    KELVIN_ASSIGN_OR_RETURN(rope.low_freq_factor, fields.Number("low_freq_factor", std::nullopt));
    KELVIN_ASSIGN_OR_RETURN(rope.high_freq_factor, fields.Number("high_freq_factor", std::nullopt));
    KELVIN_ASSIGN_OR_RETURN(rope.original_max_position,
                            fields.Int("original_max_position_embeddings", std::nullopt));
    return absl::OkStatus();
  }
  KELVIN_ASSIGN_OR_RETURN(const int64_t top_level_original,
                          JsonFields(root, source).Int("original_max_position_embeddings", 0));
  KELVIN_ASSIGN_OR_RETURN(rope.original_max_position, fields.Int("original_max_position_embeddings",
                                                                 config.max_position_embeddings));
  if (top_level_original != 0) rope.original_max_position = top_level_original;
  if (rope.original_max_position < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, ": original_max_position_embeddings=", rope.original_max_position,
                     " must be at least 1 (the pretraining context length)"));
  }
  const double implicit_factor = static_cast<double>(config.max_position_embeddings) /
                                 static_cast<double>(rope.original_max_position);
  KELVIN_ASSIGN_OR_RETURN(rope.factor, fields.Number("factor", implicit_factor));
  KELVIN_ASSIGN_OR_RETURN(rope.attention_factor,
                          OptionalNumber(fields, scaling, "attention_factor"));
  if (rope.type == ops::RopeType::kLongrope) {
    KELVIN_ASSIGN_OR_RETURN(rope.short_factor, NumberList(scaling, where, "short_factor"));
    KELVIN_ASSIGN_OR_RETURN(rope.long_factor, NumberList(scaling, where, "long_factor"));
    return absl::OkStatus();
  }
  KELVIN_ASSIGN_OR_RETURN(rope.beta_fast, OptionalNumber(fields, scaling, "beta_fast"));
  KELVIN_ASSIGN_OR_RETURN(rope.beta_slow, OptionalNumber(fields, scaling, "beta_slow"));
  KELVIN_ASSIGN_OR_RETURN(rope.mscale, OptionalNumber(fields, scaling, "mscale"));
  KELVIN_ASSIGN_OR_RETURN(rope.mscale_all_dim, OptionalNumber(fields, scaling, "mscale_all_dim"));
  if (scaling.contains("truncate") && !scaling["truncate"].is_null()) {
    KELVIN_ASSIGN_OR_RETURN(rope.truncate, fields.Bool("truncate", true));
  }
  return absl::OkStatus();
}

absl::Status ParseRope(const json& root, const std::string& source, LlamaConfig& config) {
  // A section of another type would leave RoPE at its default silently: refused.
  for (const char* section : {"rope_parameters", "rope_scaling"}) {
    const auto it = root.find(section);
    if (it != root.end() && !it->is_null() && !it->is_object()) {
      return absl::InvalidArgumentError(
          absl::StrCat(source, ": field \"", section, "\" is ", it->dump(),
                       ", expected an object (e.g. "
                       "{\"rope_type\": \"llama3\", \"factor\": 8.0, ...}) or null, not ",
                       JsonTypeName(*it)));
    }
  }
  // transformers 5 nests everything in rope_parameters; 4.x has rope_theta + rope_scaling.
  const bool v5 = root.contains("rope_parameters") && root["rope_parameters"].is_object();
  config.hf_rope_form = v5 ? HfRopeForm::kRopeParameters : HfRopeForm::kRopeScaling;
  const json& scaling =
      v5 ? root["rope_parameters"]
         : (root.contains("rope_scaling") && root["rope_scaling"].is_object() ? root["rope_scaling"]
                                                                              : json::object());
  const std::string where = absl::StrCat(source, v5 ? " rope_parameters" : " rope_scaling");
  // Beside rope_parameters, a 4.x rope_scaling or top-level rope_theta must say the same: else
  // which one a reader takes decides the model.
  if (v5) {
    const json& parameters = root["rope_parameters"];
    json older = root.contains("rope_scaling") && root["rope_scaling"].is_object()
                     ? root["rope_scaling"]
                     : json::object();
    if (root.contains("rope_theta") && !root["rope_theta"].is_null()) {
      older["rope_theta"] = root["rope_theta"];
    }
    for (const auto& [key, value] : older.items()) {
      const auto it = parameters.find(key);
      if (it != parameters.end() && *it != value) {
        return absl::InvalidArgumentError(absl::StrCat(
            source, ": rope_parameters.", key, " is ", it->dump(), " but ",
            key == "rope_theta" ? "rope_theta" : "rope_scaling." + key, " is ", value.dump(),
            ": transformers 5 reads rope_parameters; remove the other or make them equal"));
      }
    }
  }
  KELVIN_ASSIGN_OR_RETURN(config.rope.theta,
                          JsonFields(v5 ? scaling : root, source).Number("rope_theta", 10000.0));
  const JsonFields fields(scaling, where);
  KELVIN_ASSIGN_OR_RETURN(const double partial, fields.Number("partial_rotary_factor", 1.0));
  if (partial != 1.0) {
    return absl::InvalidArgumentError(absl::StrCat(
        where, ": partial_rotary_factor ", partial,
        " is not supported: Kelvin's Llama rotates the whole head (remove it, or set 1.0)"));
  }
  KELVIN_ASSIGN_OR_RETURN(std::string type, fields.String("rope_type", ""));
  if (type.empty()) {
    KELVIN_ASSIGN_OR_RETURN(type, fields.String("type", "default"));  // transformers < 4.45
  }
  if (type == "default") {
    // Default RoPE scales nothing: a factor other than 1 would be ignored.
    KELVIN_ASSIGN_OR_RETURN(const double factor, fields.Number("factor", 1.0));
    if (factor != 1.0) {
      return absl::InvalidArgumentError(absl::StrCat(
          where, ": factor ", factor,
          " with rope_type \"default\" would be ignored (default RoPE scales nothing): set "
          "rope_type \"linear\", \"yarn\", \"longrope\", \"llama3\" or \"dynamic\" with its "
          "fields, or remove the factor"));
    }
    config.rope.type = ops::RopeType::kDefault;
    return absl::OkStatus();
  }
  bool known = false;
  for (const ops::RopeType t :
       {ops::RopeType::kLinear, ops::RopeType::kYarn, ops::RopeType::kLongrope,
        ops::RopeType::kLlama3, ops::RopeType::kDynamic}) {
    if (type == ops::RopeTypeName(t)) {
      config.rope.type = t;
      known = true;
    }
  }
  if (!known) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, ": rope_type \"", type,
                     "\" is not supported (Kelvin supports default, linear, yarn, longrope, "
                     "llama3 and dynamic)"));
  }
  return ParseRopeScaling(root, scaling, source, where, config);
}

// A token id field: absent or null leaves nothing; an integer; a list of integers where `list`.
absl::Status ParseTokenIds(const json& root, const std::string& source, const std::string& key,
                           bool list, std::vector<int64_t>& ids) {
  const auto it = root.find(key);
  if (it == root.end() || it->is_null()) return absl::OkStatus();
  const json values = it->is_array() && list ? *it : json::array({*it});
  for (const json& value : values) {
    if (!value.is_number_integer() ||
        (value.is_number_unsigned() &&
         value.get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))) {
      return absl::InvalidArgumentError(absl::StrCat(source, ": field \"", key, "\" is ",
                                                     it->dump(), ", expected a token id",
                                                     list ? " or a list of them" : ""));
    }
    ids.push_back(value.get<int64_t>());
  }
  return absl::OkStatus();
}

absl::Status ParseSpecialTokens(const json& root, const std::string& source, SpecialTokenIds& ids) {
  std::vector<int64_t> bos, pad;
  KELVIN_RETURN_IF_ERROR(ParseTokenIds(root, source, "bos_token_id", false, bos));
  KELVIN_RETURN_IF_ERROR(ParseTokenIds(root, source, "eos_token_id", true, ids.eos));
  KELVIN_RETURN_IF_ERROR(ParseTokenIds(root, source, "pad_token_id", false, pad));
  if (!bos.empty()) ids.bos = bos.front();
  if (!pad.empty()) ids.pad = pad.front();
  return absl::OkStatus();
}

// config.json's "ssa" object: every field of SsaOptions (ParseSsaObject reads what this writes).
nlohmann::ordered_json SsaOptionsToJson(const ssa::SsaOptions& o) {
  nlohmann::ordered_json clamp = nullptr;
  if (o.temperature_clamp.has_value()) {
    clamp = {{"lo", o.temperature_clamp->lo}, {"hi", o.temperature_clamp->hi}};
  }
  return {{"query_temperature", o.query_temperature},
          {"value_temperature", o.value_temperature},
          {"token_aware", o.token_aware},
          {"position_aware", o.position_aware},
          {"weight_sharing", o.weight_sharing},
          {"temperature_clamp", clamp},
          {"alpha_init", o.alpha_init},
          {"temperature_lr_scale", o.temperature_lr_scale}};
}

absl::StatusOr<ssa::SsaOptions> ParseSsaObject(const json& root, const std::string& source) {
  const auto it = root.find("ssa");
  const std::string where = absl::StrCat(source, " \"ssa\"");
  if (it == root.end() || !it->is_object()) {
    return absl::InvalidArgumentError(absl::StrCat(
        source, ": model_type \"", kSsaHfModelType, "\" needs an \"ssa\" object of settings",
        it == root.end() ? "" : absl::StrCat(", got ", it->dump()),
        " (Kelvin's SSA exports write one; was config.json edited?)"));
  }
  const nlohmann::ordered_json known = SsaOptionsToJson(ssa::SsaOptions{});  // every key, in order
  for (const auto& [key, value] : it->items()) {
    if (!known.contains(key)) {
      std::vector<std::string> names;
      for (const auto& [name, unused] : known.items()) names.push_back(name);
      return absl::InvalidArgumentError(absl::StrCat(where, ": unknown setting \"", key,
                                                     "\"; known: ", absl::StrJoin(names, ", ")));
    }
  }
  const JsonFields f(*it, where);
  ssa::SsaOptions o;
  KELVIN_ASSIGN_OR_RETURN(o.query_temperature, f.Bool("query_temperature", o.query_temperature));
  KELVIN_ASSIGN_OR_RETURN(o.value_temperature, f.Bool("value_temperature", o.value_temperature));
  KELVIN_ASSIGN_OR_RETURN(o.token_aware, f.Bool("token_aware", o.token_aware));
  KELVIN_ASSIGN_OR_RETURN(o.position_aware, f.Bool("position_aware", o.position_aware));
  KELVIN_ASSIGN_OR_RETURN(o.weight_sharing, f.Bool("weight_sharing", o.weight_sharing));
  KELVIN_ASSIGN_OR_RETURN(o.alpha_init, f.Number("alpha_init", o.alpha_init));
  KELVIN_ASSIGN_OR_RETURN(o.temperature_lr_scale,
                          f.Number("temperature_lr_scale", o.temperature_lr_scale));
  const auto clamp = it->find("temperature_clamp");
  if (clamp != it->end() && !clamp->is_null()) {
    if (!clamp->is_object()) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, ": temperature_clamp is ", clamp->dump(),
                       ", expected null or {\"lo\": .., \"hi\": ..}"));
    }
    const JsonFields bounds(*clamp, absl::StrCat(where, " temperature_clamp"));
    ssa::TemperatureClamp range;
    KELVIN_ASSIGN_OR_RETURN(range.lo, bounds.Number("lo", std::nullopt));
    KELVIN_ASSIGN_OR_RETURN(range.hi, bounds.Number("hi", std::nullopt));
    o.temperature_clamp = range;
  }
  return o;
}

absl::Status Unsupported(const std::string& source, const std::string& field,
                         const std::string& value, const std::string& supported) {
  return absl::InvalidArgumentError(absl::StrCat(
      source, ": ", field, " = ", value, " is not supported (Kelvin needs ", supported, ")"));
}

}  // namespace

int64_t LlamaConfig::NumParameters() const {
  const int64_t d = hidden_size;
  const int64_t attention = d * q_size() * 2 + d * kv_size() * 2;
  const int64_t mlp = 3 * d * intermediate_size;
  int64_t ssa_per_layer = 0;
  for (const SsaParameterSpec& spec : SsaLayerParameters(*this)) {
    ssa_per_layer += NumElements(spec.shape);
  }
  const int64_t per_layer = attention + mlp + 2 * d + ssa_per_layer;
  return num_layers * per_layer + vocab_size * d * (tie_word_embeddings ? 1 : 2) + d;
}

std::vector<SsaParameterSpec> SsaLayerParameters(const LlamaConfig& c) {
  std::vector<SsaParameterSpec> specs;
  if (!c.ssa.has_value()) return specs;
  const ssa::SsaOptions& o = *c.ssa;
  const int64_t h = c.num_attention_heads, g = c.num_key_value_heads, d = c.head_dim;
  const bool own_projection = !o.weight_sharing && o.token_aware;
  if (o.query_temperature) {
    specs.push_back({"self_attn.ssa.query_readout", {h, d}, ParamGroup::kTemperature});
    specs.push_back({"self_attn.ssa.alpha", {h}, ParamGroup::kTemperature});
    if (own_projection) {
      specs.push_back({"self_attn.ssa.query_temperature_proj.weight",
                       {h * d, c.hidden_size},
                       ParamGroup::kDecay});
    }
  }
  if (o.value_temperature) {
    specs.push_back({"self_attn.ssa.value_readout", {g, d}, ParamGroup::kTemperature});
    if (own_projection) {
      specs.push_back({"self_attn.ssa.value_temperature_proj.weight",
                       {g * d, c.hidden_size},
                       ParamGroup::kDecay});
    }
  }
  return specs;
}

std::string SsaSettingsThatNeed(std::string_view tensor_name) {
  const size_t at = tensor_name.find(".self_attn.ssa.");
  if (at == std::string_view::npos) return "";
  const std::string_view suffix =
      tensor_name.substr(at + std::string_view(".self_attn.ssa.").size());
  std::string settings = "model.ssa.enabled=true";
  if (suffix.starts_with("query_readout") || suffix.starts_with("alpha")) {
    absl::StrAppend(&settings, " and model.ssa.query_temperature=true");
  } else if (suffix.starts_with("value_readout")) {
    absl::StrAppend(&settings, " and model.ssa.value_temperature=true");
  } else if (suffix.find("temperature_proj") != std::string_view::npos) {
    absl::StrAppend(&settings, " and model.ssa.weight_sharing=false (with token_aware=true)");
  }
  return settings;
}

absl::StatusOr<LlamaConfig> LlamaConfigFromHfJson(std::string_view json_text,
                                                  std::string_view source_name) {
  const std::string source(source_name);
  KELVIN_ASSIGN_OR_RETURN(const json root, io::ParseStrictJson(json_text, source));
  if (!root.is_object()) {
    return absl::InvalidArgumentError(
        absl::StrCat(source, ": is a JSON ", root.type_name(),
                     ", not an object of settings (is this a Hugging Face config.json?)"));
  }
  const JsonFields f(root, source);
  KELVIN_ASSIGN_OR_RETURN(const std::string model_type, f.String("model_type", "llama"));
  if (model_type != "llama" && model_type != kSsaHfModelType) {
    return Unsupported(
        source, "model_type", model_type,
        absl::StrCat("\"llama\" or \"", kSsaHfModelType, "\" (Kelvin's SSA export)"));
  }
  KELVIN_ASSIGN_OR_RETURN(const std::string act, f.String("hidden_act", "silu"));
  if (act != "silu") return Unsupported(source, "hidden_act", act, "\"silu\"");
  for (const char* bias : {"attention_bias", "mlp_bias"}) {
    KELVIN_ASSIGN_OR_RETURN(const bool has_bias, f.Bool(bias, false));
    if (has_bias) return Unsupported(source, bias, "true", "false");
  }
  LlamaConfig c;
  KELVIN_ASSIGN_OR_RETURN(c.hidden_size, f.Int("hidden_size", std::nullopt));
  KELVIN_ASSIGN_OR_RETURN(c.intermediate_size, f.Int("intermediate_size", std::nullopt));
  KELVIN_ASSIGN_OR_RETURN(c.num_layers, f.Int("num_hidden_layers", std::nullopt));
  KELVIN_ASSIGN_OR_RETURN(c.num_attention_heads, f.Int("num_attention_heads", std::nullopt));
  KELVIN_ASSIGN_OR_RETURN(c.num_key_value_heads,
                          f.Int("num_key_value_heads", c.num_attention_heads));
  KELVIN_ASSIGN_OR_RETURN(c.vocab_size, f.Int("vocab_size", std::nullopt));
  KELVIN_ASSIGN_OR_RETURN(c.max_position_embeddings, f.Int("max_position_embeddings", 2048));
  KELVIN_ASSIGN_OR_RETURN(c.rms_norm_eps, f.Number("rms_norm_eps", 1e-6));
  KELVIN_ASSIGN_OR_RETURN(c.tie_word_embeddings, f.Bool("tie_word_embeddings", false));
  const int64_t default_head_dim =
      c.num_attention_heads > 0 ? c.hidden_size / c.num_attention_heads : 0;
  KELVIN_ASSIGN_OR_RETURN(c.head_dim, f.Int("head_dim", default_head_dim));
  KELVIN_RETURN_IF_ERROR(ParseRope(root, source, c));
  KELVIN_RETURN_IF_ERROR(ParseSpecialTokens(root, source, c.special_tokens));
  if (model_type == kSsaHfModelType) {
    KELVIN_ASSIGN_OR_RETURN(c.ssa, ParseSsaObject(root, source));
  }
  return c;
}

absl::StatusOr<LlamaConfig> LlamaConfigFromHfDirectory(const std::string& directory) {
  const std::string path = directory + "/config.json";
  constexpr uint64_t kMaxConfigBytes = 1 << 20;  // a config.json is a few KB
  absl::StatusOr<std::string> text = io::ReadRegularFile(path, "model config", kMaxConfigBytes);
  if (absl::IsNotFound(text.status())) {
    return absl::NotFoundError(
        absl::StrCat("cannot read ", path,
                     ": model.hf_dir must be a Hugging Face model directory with a "
                     "config.json (as save_pretrained writes it)"));
  }
  if (!text.ok()) return text.status();
  return LlamaConfigFromHfJson(*text, path);
}

namespace {

// rope_type and the type's own fields in transformers' names (the optional ones only when set).
json RopeToJson(const ops::RopeConfig& r) {
  json j = {{"rope_type", ops::RopeTypeName(r.type)}};
  if (r.type == ops::RopeType::kDefault) return j;
  j["factor"] = r.factor;
  // dynamic's original length is max_position_embeddings, written beside.
  if (r.type == ops::RopeType::kLinear || r.type == ops::RopeType::kDynamic) return j;
  j["original_max_position_embeddings"] = r.original_max_position;
  if (r.type == ops::RopeType::kLlama3) {
    j["low_freq_factor"] = r.low_freq_factor;
    j["high_freq_factor"] = r.high_freq_factor;
    return j;
  }
  const auto optional = [&](const char* key, const auto& value) {
    if (value.has_value()) j[key] = *value;
  };
  optional("attention_factor", r.attention_factor);
  if (r.type == ops::RopeType::kLongrope) {
    j["short_factor"] = r.short_factor;
    j["long_factor"] = r.long_factor;
    return j;
  }
  optional("beta_fast", r.beta_fast);
  optional("beta_slow", r.beta_slow);
  optional("mscale", r.mscale);
  optional("mscale_all_dim", r.mscale_all_dim);
  optional("truncate", r.truncate);
  return j;
}

}  // namespace

std::string LlamaConfigToHfJson(const LlamaConfig& c, DType weights_dtype) {
  KELVIN_CHECK(weights_dtype == DType::kF32 || weights_dtype == DType::kBF16)
      << "Hugging Face exports are f32 or bf16, not " << DTypeName(weights_dtype);
  const char* torch_dtype = weights_dtype == DType::kF32 ? "float32" : "bfloat16";
  json root = {{"architectures", {c.ssa.has_value() ? kSsaHfArchitecture : "LlamaForCausalLM"}},
               {"model_type", c.ssa.has_value() ? kSsaHfModelType : "llama"},
               {"hidden_act", "silu"},
               {"attention_bias", false},
               {"mlp_bias", false},
               {"hidden_size", c.hidden_size},
               {"intermediate_size", c.intermediate_size},
               {"num_hidden_layers", c.num_layers},
               {"num_attention_heads", c.num_attention_heads},
               {"num_key_value_heads", c.num_key_value_heads},
               {"head_dim", c.head_dim},
               {"vocab_size", c.vocab_size},
               {"max_position_embeddings", c.max_position_embeddings},
               {"rms_norm_eps", c.rms_norm_eps},
               {"tie_word_embeddings", c.tie_word_embeddings},
               // transformers 5 reads "dtype", 4.x and other stacks "torch_dtype".
               {"dtype", torch_dtype},
               {"torch_dtype", torch_dtype}};
  const SpecialTokenIds& ids = c.special_tokens;
  if (ids.bos.has_value()) root["bos_token_id"] = *ids.bos;
  if (ids.eos.size() == 1) root["eos_token_id"] = ids.eos.front();
  if (ids.eos.size() > 1) root["eos_token_id"] = ids.eos;
  if (ids.pad.has_value()) root["pad_token_id"] = *ids.pad;
  if (c.ssa.has_value()) {
    root["ssa"] = SsaOptionsToJson(*c.ssa);
    root["auto_map"] = {{"AutoConfig", "configuration_ssa_llama.SsaLlamaConfig"},
                        {"AutoModel", "modeling_ssa_llama.SsaLlamaModel"},
                        {"AutoModelForCausalLM", "modeling_ssa_llama.SsaLlamaForCausalLM"}};
  }
  json rope = RopeToJson(c.rope);
  // An SSA export always takes transformers 5's layout (its modeling code runs on transformers 5):
  // AutoTokenizer reads config.json without the remote code, as a generic config, which fails on
  // a 4.x rope_scaling; rope_parameters it reads. A plain Llama keeps its source's layout.
  if (c.hf_rope_form == HfRopeForm::kRopeParameters || c.ssa.has_value()) {
    rope["rope_theta"] = c.rope.theta;
    root["rope_parameters"] = rope;
  } else {
    root["rope_theta"] = c.rope.theta;
    if (c.rope.type != ops::RopeType::kDefault) root["rope_scaling"] = rope;
  }
  return root.dump(2) + "\n";
}

absl::StatusOr<LlamaConfig> LlamaPreset(std::string_view name) {
  LlamaConfig c;
  c.rms_norm_eps = 1e-5;
  if (name == "llama3-8b" || name == "llama3.1-8b") {
    c.hidden_size = 4096;
    c.intermediate_size = 14336;
    c.num_layers = 32;
    c.num_attention_heads = 32;
    c.num_key_value_heads = 8;
    c.vocab_size = 128256;
    c.max_position_embeddings = 8192;
    c.rope.theta = 500000.0;
    if (name == "llama3.1-8b") {
      c.max_position_embeddings = 131072;
      c.rope.type = ops::RopeType::kLlama3;  // factor 8, low 1, high 4, original 8192: defaults
    }
  } else if (name == "llama3.2-1b" || name == "llama3.2-3b") {
    // Meta's config.json of Llama-3.2-1B / -3B: tied embeddings, llama3 RoPE scaling by 32.
    const bool small = name == "llama3.2-1b";
    c.hidden_size = small ? 2048 : 3072;
    c.intermediate_size = 8192;
    c.num_layers = small ? 16 : 28;
    c.num_attention_heads = small ? 32 : 24;
    c.num_key_value_heads = 8;
    c.vocab_size = 128256;
    c.max_position_embeddings = 131072;
    c.tie_word_embeddings = true;
    c.rope.theta = 500000.0;
    c.rope.type = ops::RopeType::kLlama3;
    c.rope.factor = 32.0;
  } else if (name == "small-25m") {
    c.hidden_size = 512;
    c.intermediate_size = 1536;
    c.num_layers = 8;
    c.num_attention_heads = 8;
    c.num_key_value_heads = 4;
    c.vocab_size = 8192;
    c.max_position_embeddings = 4096;
    c.rope.theta = 10000.0;
  } else if (name == "tiny") {
    c.hidden_size = 128;
    c.intermediate_size = 384;
    c.num_layers = 4;
    c.num_attention_heads = 4;
    c.num_key_value_heads = 2;
    c.vocab_size = 260;  // the passkey task's byte vocabulary (data/tasks/passkey_task.h)
    c.max_position_embeddings = 4096;
    c.rope.theta = 10000.0;
  } else {
    return absl::InvalidArgumentError(absl::StrCat("model.preset=\"", std::string(name),
                                                   "\" is not a preset; "
                                                   "known presets: ",
                                                   absl::StrJoin(LlamaPresetNames(), ", ")));
  }
  c.head_dim = c.hidden_size / c.num_attention_heads;
  return c;
}

std::vector<std::string> LlamaPresetNames() {
  return {"llama3-8b", "llama3.1-8b", "llama3.2-1b", "llama3.2-3b", "small-25m", "tiny"};
}

std::vector<std::string> RopeScalingProblems(const ops::RopeConfig& rope, int64_t head_dim,
                                             std::string_view path) {
  std::vector<std::string> problems;
  if (rope.type == ops::RopeType::kDefault) return problems;
  const std::string at(path);
  const auto add = [&](auto&&... parts) { problems.push_back(absl::StrCat(at, parts...)); };
  // Non-finite values fail every comparison below.
  if (!(rope.factor >= 1) || !std::isfinite(rope.factor)) {
    add(".factor=", rope.factor, ": must be >= 1");
  }
  if (rope.type != ops::RopeType::kLinear &&
      (rope.original_max_position < 1 || rope.original_max_position > kMaxPositions)) {
    add(".original_max_position_embeddings=", rope.original_max_position, ": must be in [1, ",
        kMaxPositions, "]");
  }
  if (rope.type == ops::RopeType::kDynamic && head_dim > 0 && head_dim <= 2) {
    add(": rope_type \"dynamic\" needs head_dim > 2 (its base is raised to d / (d - 2)), got ",
        head_dim);
  }
  if (rope.attention_factor.has_value() &&
      (!(*rope.attention_factor > 0) || !std::isfinite(*rope.attention_factor))) {
    add(".attention_factor=", *rope.attention_factor, ": must be a number > 0");
  }
  if (rope.type == ops::RopeType::kLlama3) {
    if (!(rope.low_freq_factor > 0))
      add(".low_freq_factor=", rope.low_freq_factor, ": must be > 0");
    if (!(rope.high_freq_factor > rope.low_freq_factor) || !std::isfinite(rope.high_freq_factor)) {
      add(": high_freq_factor=", rope.high_freq_factor,
          " must be a number > low_freq_factor=", rope.low_freq_factor);
    }
  }
  if (rope.type == ops::RopeType::kYarn) {
    if (!(rope.theta > 1)) {
      add(": rope_theta=", rope.theta,
          " must be > 1 for yarn (its correction range divides by "
          "ln rope_theta)");
    }
    for (const auto& [name, value] : {std::pair{"beta_fast", rope.beta_fast},
                                      {"beta_slow", rope.beta_slow},
                                      {"mscale", rope.mscale},
                                      {"mscale_all_dim", rope.mscale_all_dim}}) {
      if (value.has_value() && !std::isfinite(*value))
        add(".", name, "=", *value, ": must be finite");
    }
    const double fast = rope.beta_fast.value_or(0) != 0 ? *rope.beta_fast : 32.0;
    const double slow = rope.beta_slow.value_or(0) != 0 ? *rope.beta_slow : 1.0;
    if (!(fast >= slow) || !(slow > 0)) {
      add(": beta_fast=", fast, " and beta_slow=", slow,
          " (unset or 0: 32 and 1) must satisfy beta_fast >= beta_slow > 0");
    }
  }
  if (rope.type == ops::RopeType::kLongrope) {
    for (const auto& [name, factors] :
         {std::pair{"short_factor", &rope.short_factor}, {"long_factor", &rope.long_factor}}) {
      if (head_dim > 0 && static_cast<int64_t>(factors->size()) != head_dim / 2) {
        add(".", name, ": has ", factors->size(),
            " numbers, must have head_dim / 2 = ", head_dim / 2);
      }
      for (const double f : *factors) {
        if (!(f > 0) || !std::isfinite(f)) {
          add(".", name, ": holds ", f, ", every factor must be a number > 0");
          break;
        }
      }
    }
    if (!rope.attention_factor.has_value() && rope.factor > 1 && rope.original_max_position < 2) {
      add(".original_max_position_embeddings=", rope.original_max_position,
          ": must be >= 2 to derive the attention factor (or set attention_factor)");
    }
  }
  return problems;
}

std::optional<std::string> LlamaPresetNamedIn(std::string_view directory_name) {
  const auto normal = [](std::string_view text) {  // lowercase letters, digits and dots
    std::string kept;
    for (const char c : text) {
      if (absl::ascii_isalnum(static_cast<unsigned char>(c)) || c == '.') {
        kept += absl::ascii_tolower(static_cast<unsigned char>(c));
      }
    }
    return kept;
  };
  const std::string name = normal(directory_name);
  std::optional<std::string> best;
  for (const std::string& preset : LlamaPresetNames()) {
    const std::string key = normal(preset);
    if (name.find(key) != std::string::npos && (!best || key.size() > normal(*best).size())) {
      best = preset;
    }
  }
  return best;
}

absl::Status ValidateLlamaConfig(const LlamaConfig& c, std::string_view source) {
  std::vector<std::string> problems;
  // `field` as config.json and the job's model.architecture both name it, or `field (job_name)`.
  auto in_range = [&](const std::string& field, int64_t value, int64_t max,
                      const std::string& job_name = "") {
    if (value < 1 || value > max) {
      problems.push_back(
          absl::StrCat("model.", field, "=", value,
                       job_name.empty() ? "" : absl::StrCat(" (", job_name, " in a job)"),
                       ": must be in [1, ", max, "]"));
    }
  };
  in_range("hidden_size", c.hidden_size, kMaxHiddenSize);
  in_range("intermediate_size", c.intermediate_size, kMaxIntermediateSize);
  in_range("num_hidden_layers", c.num_layers, kMaxLayers, "model.architecture.num_layers");
  in_range("num_attention_heads", c.num_attention_heads, kMaxHeads);
  in_range("num_key_value_heads", c.num_key_value_heads, kMaxHeads);
  in_range("head_dim", c.head_dim, kMaxHeadDim);
  in_range("vocab_size", c.vocab_size, kMaxVocabSize);
  in_range("max_position_embeddings", c.max_position_embeddings, kMaxPositions);
  if (c.num_key_value_heads > 0 && c.num_attention_heads % c.num_key_value_heads != 0) {
    problems.push_back(
        absl::StrCat("model.num_key_value_heads=", c.num_key_value_heads,
                     " does not divide num_attention_heads=", c.num_attention_heads));
  }
  if (c.head_dim % 2 != 0) {
    problems.push_back(absl::StrCat("model.head_dim=", c.head_dim, ": must be even (RoPE pairs)"));
  }
  if (!(c.rms_norm_eps > 0) || !std::isfinite(c.rms_norm_eps)) {
    problems.push_back(absl::StrCat("model.rms_norm_eps=", c.rms_norm_eps, ": must be > 0"));
  }
  if (!(c.rope.theta > 0) || !std::isfinite(c.rope.theta)) {
    problems.push_back(absl::StrCat("model.rope_theta=", c.rope.theta, ": must be > 0"));
  }
  if (c.rope.type != ops::RopeType::kDefault) {
    for (std::string& problem : RopeScalingProblems(c.rope, c.head_dim, "model.rope_scaling")) {
      problems.push_back(std::move(problem));
    }
  }
  auto token_id_in_vocabulary = [&](const std::string& field, int64_t id) {
    if (id < 0 || id >= c.vocab_size) {
      problems.push_back(absl::StrCat("config.json's ", field, "=", id,
                                      " is not a token of the vocabulary [0, ", c.vocab_size, ")"));
    }
  };
  if (c.special_tokens.bos) token_id_in_vocabulary("bos_token_id", *c.special_tokens.bos);
  for (const int64_t id : c.special_tokens.eos) token_id_in_vocabulary("eos_token_id", id);
  if (c.special_tokens.pad) token_id_in_vocabulary("pad_token_id", *c.special_tokens.pad);
  if (c.ssa.has_value()) {
    for (std::string& problem : ssa::SsaOptionsProblems(*c.ssa, "model.ssa")) {
      problems.push_back(std::move(problem));
    }
  }
  if (problems.empty()) return absl::OkStatus();
  const std::string from = source.empty() ? "" : absl::StrCat(" (", std::string(source), ")");
  if (problems.size() == 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("the model's architecture", from, " is invalid: ", problems[0]));
  }
  return absl::InvalidArgumentError(absl::StrCat("the model's architecture", from, " has ",
                                                 problems.size(), " problems:\n  ",
                                                 absl::StrJoin(problems, "\n  ")));
}

}  // namespace kelvin::models
