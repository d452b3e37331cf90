// tokenizer.json parsing (each supported part checked, the rest refused by name) and the encode
// and decode pipelines.
#include "data/tokenizer/tokenizer.h"

#include <algorithm>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <unordered_map>

#include "absl/strings/str_cat.h"
#include "core/io/regular_file.h"
#include "core/io/strict_json.h"
#include "data/tokenizer/byte_level.h"
#include "data/tokenizer/unicode_nfc.h"
#include "data/tokenizer/utf8.h"

namespace kelvin::data {
namespace {

using nlohmann::json;

constexpr char kFamily[] =
    "Kelvin reads the byte-level BPE tokenizers of Llama-3, GPT-2 and Qwen2 (NFC)";
constexpr uint64_t kMaxTokenizerJsonBytes = uint64_t{1} << 30;  // Llama-3's is 9 MB

absl::Status Unsupported(const std::string& where, const json& value) {
  return absl::InvalidArgumentError(
      absl::StrCat(where, " is ", value.dump(), ", which is not supported (", kFamily, ")"));
}

absl::Status WrongType(const std::string& where, const char* expected, const json& value) {
  return absl::InvalidArgumentError(
      absl::StrCat(where, " is ", value.dump().substr(0, 200), ", expected ", expected));
}

// `object`[key] when it is absent, null or equal to `allowed`; else the part is unsupported.
absl::Status RequireAbsentOr(const json& object, const std::string& where, const char* key,
                             const json& allowed) {
  const auto it = object.find(key);
  if (it == object.end() || it->is_null() || *it == allowed) return absl::OkStatus();
  return Unsupported(absl::StrCat(where, ".", key), *it);
}

std::string TypeOf(const json& part) {
  const auto it = part.find("type");
  return it != part.end() && it->is_string() ? it->get<std::string>() : "";
}

absl::StatusOr<BpeModel> ParseModel(const json& model, const std::string& source) {
  const std::string where = source + " model";
  if (!model.is_object()) return WrongType(where, "an object", model);
  if (TypeOf(model) != "BPE") return Unsupported(where + ".type", model.value("type", json()));
  KELVIN_RETURN_IF_ERROR(RequireAbsentOr(model, where, "dropout", json()));
  KELVIN_RETURN_IF_ERROR(RequireAbsentOr(model, where, "continuing_subword_prefix", ""));
  KELVIN_RETURN_IF_ERROR(RequireAbsentOr(model, where, "end_of_word_suffix", ""));
  KELVIN_RETURN_IF_ERROR(RequireAbsentOr(model, where, "byte_fallback", false));
  const auto vocab_it = model.find("vocab");
  if (vocab_it == model.end() || !vocab_it->is_object()) {
    return WrongType(where + ".vocab", "an object of token -> id", model.value("vocab", json()));
  }
  std::unordered_map<std::string, int32_t> vocab;
  vocab.reserve(vocab_it->size());
  for (const auto& [spelling, id] : vocab_it->items()) {
    if (!id.is_number_integer() || id.get<int64_t>() < 0 ||
        id.get<int64_t>() > std::numeric_limits<int32_t>::max()) {
      return WrongType(absl::StrCat(where, ".vocab[\"", spelling, "\"]"), "an id in [0, 2^31)", id);
    }
    vocab.emplace(spelling, id.get<int32_t>());
  }
  const auto merges_it = model.find("merges");
  if (merges_it == model.end() || !merges_it->is_array()) {
    return WrongType(where + ".merges", "an array", model.value("merges", json()));
  }
  std::vector<std::pair<std::string, std::string>> merges;
  merges.reserve(merges_it->size());
  for (size_t i = 0; i < merges_it->size(); ++i) {
    const json& merge = (*merges_it)[i];
    const std::string at = absl::StrCat(where, ".merges[", i, "]");
    if (merge.is_string()) {  // "left right" (tokenizers < 0.20)
      const std::string text = merge.get<std::string>();
      const size_t space = text.find(' ');
      if (space == std::string::npos || text.find(' ', space + 1) != std::string::npos) {
        return WrongType(at, "\"left right\"", merge);
      }
      merges.emplace_back(text.substr(0, space), text.substr(space + 1));
    } else if (merge.is_array() && merge.size() == 2 && merge[0].is_string() &&
               merge[1].is_string()) {
      merges.emplace_back(merge[0].get<std::string>(), merge[1].get<std::string>());
    } else {
      return WrongType(at, "\"left right\" or [left, right]", merge);
    }
  }
  bool ignore_merges = false;
  if (const auto it = model.find("ignore_merges"); it != model.end() && !it->is_null()) {
    if (!it->is_boolean()) return WrongType(where + ".ignore_merges", "true or false", *it);
    ignore_merges = it->get<bool>();
  }
  return BpeModel::Create(std::move(vocab), merges, ignore_merges, source);
}

// The pre-tokenizer's splits in order; ByteLevel (required, last) adds GPT-2's pattern when its
// use_regex is on.
absl::StatusOr<std::vector<SplitRegex>> ParsePreTokenizer(const json& root,
                                                          const std::string& source) {
  const auto it = root.find("pre_tokenizer");
  const std::string where = source + " pre_tokenizer";
  if (it == root.end() || it->is_null()) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, " is missing: a byte-level tokenizer has a ByteLevel pre-tokenizer (",
                     kFamily, ")"));
  }
  std::vector<std::pair<const json*, std::string>> steps;
  if (TypeOf(*it) == "Sequence") {
    const auto list = it->find("pretokenizers");
    if (list == it->end() || !list->is_array()) {
      return WrongType(where + ".pretokenizers", "an array", it->value("pretokenizers", json()));
    }
    for (size_t i = 0; i < list->size(); ++i) {
      steps.emplace_back(&(*list)[i], absl::StrCat(where, ".pretokenizers[", i, "]"));
    }
  } else {
    steps.emplace_back(&*it, where);
  }
  std::vector<SplitRegex> splits;
  for (size_t i = 0; i < steps.size(); ++i) {
    const auto& [step, at] = steps[i];
    const std::string type = TypeOf(*step);
    if (type == "Split") {
      KELVIN_RETURN_IF_ERROR(RequireAbsentOr(*step, at, "behavior", "Isolated"));
      KELVIN_RETURN_IF_ERROR(RequireAbsentOr(*step, at, "invert", false));
      const auto pattern = step->find("pattern");
      if (pattern == step->end() || !pattern->is_object() || !pattern->contains("Regex") ||
          !(*pattern)["Regex"].is_string()) {
        return Unsupported(at + ".pattern", step->value("pattern", json()));
      }
      KELVIN_ASSIGN_OR_RETURN(SplitRegex split,
                              SplitRegex::Compile((*pattern)["Regex"].get<std::string>(), at));
      splits.push_back(std::move(split));
    } else if (type == "ByteLevel") {
      if (i + 1 != steps.size()) {
        return Unsupported(at + " (a ByteLevel step before another step)", *step);
      }
      KELVIN_RETURN_IF_ERROR(RequireAbsentOr(*step, at, "add_prefix_space", false));
      const auto use_regex = step->find("use_regex");
      if (use_regex == step->end() || use_regex->is_null() || *use_regex == true) {
        KELVIN_ASSIGN_OR_RETURN(SplitRegex split, SplitRegex::Compile(kGpt2SplitPattern, at));
        splits.push_back(std::move(split));
      }
      return splits;
    } else {
      return Unsupported(at + ".type", step->value("type", json()));
    }
  }
  return absl::InvalidArgumentError(
      absl::StrCat(where, " has no ByteLevel step: Kelvin reads byte-level BPE (", kFamily, ")"));
}

}  // namespace

absl::StatusOr<Tokenizer> Tokenizer::FromJson(std::string_view json_text,
                                              const std::string& source) {
  KELVIN_ASSIGN_OR_RETURN(const json root, io::ParseStrictJson(json_text, source));
  if (!root.is_object()) return WrongType(source, "an object (a tokenizer.json)", root);
  bool nfc = false;  // the only normalizer Kelvin has (Qwen2's)
  if (const auto normalizer = root.find("normalizer");
      normalizer != root.end() && !normalizer->is_null()) {
    if (*normalizer != json{{"type", "NFC"}}) {
      return Unsupported(source + " normalizer", *normalizer);
    }
    nfc = true;
  }
  if (!root.contains("model")) {
    return absl::InvalidArgumentError(absl::StrCat(source, " has no \"model\""));
  }
  KELVIN_ASSIGN_OR_RETURN(BpeModel model, ParseModel(root["model"], source));
  Tokenizer tokenizer(std::move(model));
  tokenizer.nfc_ = nfc;
  KELVIN_ASSIGN_OR_RETURN(tokenizer.splits_, ParsePreTokenizer(root, source));
  int64_t max_id = tokenizer.model_.max_id();

  if (const auto added = root.find("added_tokens"); added != root.end() && !added->is_null()) {
    if (!added->is_array()) return WrongType(source + " added_tokens", "an array", *added);
    for (size_t i = 0; i < added->size(); ++i) {
      const json& token = (*added)[i];
      const std::string at = absl::StrCat(source, " added_tokens[", i, "]");
      if (!token.is_object() || !token.contains("id") || !token["id"].is_number_integer() ||
          token["id"].get<int64_t>() < 0 ||
          token["id"].get<int64_t>() > std::numeric_limits<int32_t>::max() ||
          !token.contains("content") || !token["content"].is_string() ||
          token["content"].get<std::string>().empty()) {
        return WrongType(at, "{\"id\": id, \"content\": non-empty text, ...}", token);
      }
      for (const char* flag : {"single_word", "lstrip", "rstrip"}) {
        KELVIN_RETURN_IF_ERROR(RequireAbsentOr(token, at, flag, false));
      }
      // Matched in the raw text; with a normalizer, tokenizers matches normalized ones after it.
      if (nfc) KELVIN_RETURN_IF_ERROR(RequireAbsentOr(token, at, "normalized", false));
      tokenizer.added_.push_back({token["content"].get<std::string>(), token["id"].get<int32_t>(),
                                  token.value("special", false)});
      max_id = std::max<int64_t>(max_id, token["id"].get<int32_t>());
    }
  }
  std::stable_sort(
      tokenizer.added_.begin(), tokenizer.added_.end(),
      [](const AddedToken& a, const AddedToken& b) { return a.content.size() > b.content.size(); });
  for (size_t i = 0; i < tokenizer.added_.size(); ++i) {
    const AddedToken& token = tokenizer.added_[i];
    tokenizer.starts_added_[static_cast<uint8_t>(token.content[0])] = true;
    tokenizer.added_of_id_.emplace(token.id, i);
  }
  tokenizer.vocab_size_ = max_id + 1;

  const auto processor = root.find("post_processor");
  if (processor != root.end() && !processor->is_null()) {
    std::vector<std::pair<const json*, std::string>> processors;
    const std::string where = source + " post_processor";
    if (TypeOf(*processor) == "Sequence" && processor->contains("processors") &&
        (*processor)["processors"].is_array()) {
      for (size_t i = 0; i < (*processor)["processors"].size(); ++i) {
        processors.emplace_back(&(*processor)["processors"][i],
                                absl::StrCat(where, ".processors[", i, "]"));
      }
    } else {
      processors.emplace_back(&*processor, where);
    }
    for (const auto& [part, at] : processors) {
      const std::string type = TypeOf(*part);
      if (type == "ByteLevel") continue;  // offsets only: the ids are unchanged
      if (type != "TemplateProcessing")
        return Unsupported(at + ".type", part->value("type", json()));
      const auto single = part->find("single");
      if (single == part->end() || !single->is_array()) {
        return WrongType(at + ".single", "an array", part->value("single", json()));
      }
      const json specials = part->value("special_tokens", json::object());
      for (const json& item : *single) {
        if (item.contains("Sequence")) {
          tokenizer.template_.push_back({});
        } else if (item.contains("SpecialToken") && item["SpecialToken"].contains("id") &&
                   item["SpecialToken"]["id"].is_string()) {
          const std::string name = item["SpecialToken"]["id"].get<std::string>();
          const auto entry = specials.find(name);
          if (entry == specials.end() || !entry->contains("ids") || !(*entry)["ids"].is_array()) {
            return absl::InvalidArgumentError(
                absl::StrCat(at, ".single names the special token \"", name,
                             "\", which its special_tokens do not define with ids"));
          }
          TemplatePiece piece;
          for (const json& id : (*entry)["ids"]) {
            if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() > max_id) {
              return WrongType(absl::StrCat(at, ".special_tokens[\"", name, "\"].ids"),
                               "token ids of the vocabulary", *entry);
            }
            piece.ids.push_back(id.get<int32_t>());
          }
          tokenizer.template_.push_back(std::move(piece));
        } else {
          return Unsupported(at + ".single", item);
        }
      }
    }
  }
  const auto decoder = root.find("decoder");
  if (decoder == root.end() || decoder->is_null() || TypeOf(*decoder) != "ByteLevel") {
    return Unsupported(source + " decoder", decoder == root.end() ? json() : *decoder);
  }
  return tokenizer;
}

absl::StatusOr<Tokenizer> Tokenizer::FromDirectory(const std::string& directory) {
  const std::string path = (std::filesystem::path(directory) / "tokenizer.json").string();
  absl::StatusOr<std::string> text = io::ReadRegularFile(path, "tokenizer", kMaxTokenizerJsonBytes);
  if (absl::IsNotFound(text.status())) {
    return absl::NotFoundError(
        absl::StrCat("cannot read ", path,
                     ": the tokenizer is the model directory's tokenizer.json (as "
                     "save_pretrained writes it)"));
  }
  if (!text.ok()) return text.status();
  KELVIN_ASSIGN_OR_RETURN(Tokenizer tokenizer, FromJson(*text, path));

  const std::string template_path =
      (std::filesystem::path(directory) / "chat_template.jinja").string();
  std::error_code error;
  if (std::filesystem::exists(template_path, error)) {
    KELVIN_ASSIGN_OR_RETURN(tokenizer.chat_template_,
                            io::ReadRegularFile(template_path, "chat template", 16 << 20));
  }
  const std::string config_path =
      (std::filesystem::path(directory) / "tokenizer_config.json").string();
  if (!std::filesystem::exists(config_path, error)) return tokenizer;
  KELVIN_ASSIGN_OR_RETURN(const std::string config_text,
                          io::ReadRegularFile(config_path, "tokenizer config", 64 << 20));
  KELVIN_ASSIGN_OR_RETURN(const json config, io::ParseStrictJson(config_text, config_path));
  if (!config.is_object()) return WrongType(config_path, "an object", config);
  if (const auto it = config.find("chat_template"); it != config.end() && it->is_string()) {
    tokenizer.chat_template_ = it->get<std::string>();
  }
  for (auto [key, id] :
       {std::pair{"bos_token", &tokenizer.bos_id_}, std::pair{"eos_token", &tokenizer.eos_id_}}) {
    const auto it = config.find(key);
    if (it == config.end() || it->is_null()) continue;
    const json& name = it->is_object() ? it->value("content", json()) : *it;
    if (!name.is_string()) return WrongType(absl::StrCat(config_path, " ", key), "a token", *it);
    *id = tokenizer.TokenId(name.get<std::string>());
    if (!id->has_value()) {
      return absl::InvalidArgumentError(absl::StrCat(
          config_path, ": ", key, " \"", name.get<std::string>(), "\" is no token of ", path));
    }
  }
  return tokenizer;
}

std::optional<int32_t> Tokenizer::TokenId(std::string_view token) const {
  for (const AddedToken& added : added_) {
    if (added.content == token) return added.id;
  }
  return model_.Id(token);
}

absl::Status Tokenizer::EncodeOrdinaryText(std::string_view raw, std::vector<int32_t>& ids) const {
  const std::string normalized = nfc_ ? NfcNormalize(raw) : std::string();
  const std::string_view text = nfc_ ? std::string_view(normalized) : raw;
  std::vector<std::string_view> pieces = {text}, next;
  for (const SplitRegex& split : splits_) {
    next.clear();
    for (const std::string_view piece : pieces) KELVIN_RETURN_IF_ERROR(split.Split(piece, next));
    pieces.swap(next);
  }
  for (const std::string_view piece : pieces) model_.Encode(piece, ids);
  return absl::OkStatus();
}

absl::Status Tokenizer::Encode(std::string_view text, bool add_special_tokens,
                               std::vector<int32_t>& ids) const {
  if (const std::optional<size_t> bad = FirstInvalidUtf8(text); bad.has_value()) {
    return absl::InvalidArgumentError(
        absl::StrCat("the text is not valid UTF-8 at byte ", *bad, " (of ", text.size(), ")"));
  }
  const auto encode_text = [&]() -> absl::Status {
    size_t ordinary = 0;  // text[ordinary, i) has no added token
    for (size_t i = 0; i < text.size();) {
      const AddedToken* match = nullptr;
      if (!starts_added_[static_cast<uint8_t>(text[i])]) {
        ++i;
        continue;
      }
      for (const AddedToken& added : added_) {  // longest first: the first match is the longest
        if (text.compare(i, added.content.size(), added.content) == 0) {
          match = &added;
          break;
        }
      }
      if (match == nullptr) {
        ++i;
        continue;
      }
      KELVIN_RETURN_IF_ERROR(EncodeOrdinaryText(text.substr(ordinary, i - ordinary), ids));
      ids.push_back(match->id);
      i += match->content.size();
      ordinary = i;
    }
    return EncodeOrdinaryText(text.substr(ordinary), ids);
  };
  if (!add_special_tokens || template_.empty()) return encode_text();
  for (const TemplatePiece& piece : template_) {
    if (piece.ids.empty()) {
      KELVIN_RETURN_IF_ERROR(encode_text());
    } else {
      ids.insert(ids.end(), piece.ids.begin(), piece.ids.end());
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> Tokenizer::Decode(const std::vector<int32_t>& ids,
                                              bool skip_special_tokens) const {
  std::string text;
  for (const int32_t id : ids) {
    if (const auto added = added_of_id_.find(id); added != added_of_id_.end()) {
      const AddedToken& token = added_[added->second];
      if (!(skip_special_tokens && token.special)) text += token.content;
      continue;
    }
    const std::string* spelling = model_.Spelling(id);
    if (spelling == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat(
          "token id ", id, " is no token of the tokenizer (its ids are below ", vocab_size_, ")"));
    }
    const std::optional<std::string> bytes = BytesOfByteLevelChars(*spelling);
    if (!bytes.has_value()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "token id ", id, " (\"", *spelling, "\") is not spelled in the byte-level alphabet"));
    }
    text += *bytes;
  }
  return text;
}

}  // namespace kelvin::data
