// tokenizer.json parsing (each part by its parser, the model and post-processor here) and the
// encode and decode pipelines.
#include "data/tokenizer/tokenizer.h"

#include <algorithm>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/io/regular_file.h"
#include "core/io/strict_json.h"
#include "core/logging.h"
#include "data/tokenizer/tokenizer_json.h"
#include "data/tokenizer/utf8.h"

namespace kelvin::data {
namespace {

using nlohmann::json;

constexpr uint64_t kMaxTokenizerJsonBytes = uint64_t{1} << 30;  // Llama-3's is 9 MB

absl::StatusOr<BpeModel> ParseModel(const json& model, bool byte_level, const std::string& source) {
  const std::string where = source + " model";
  KELVIN_RETURN_IF_ERROR(RequireAbsentOr(model, where, "dropout", json()));
  KELVIN_RETURN_IF_ERROR(RequireAbsentOr(model, where, "continuing_subword_prefix", ""));
  KELVIN_RETURN_IF_ERROR(RequireAbsentOr(model, where, "end_of_word_suffix", ""));
  BpeOptions options;
  options.byte_level = byte_level;
  KELVIN_ASSIGN_OR_RETURN(options.byte_fallback,
                          OptionalBool(model, where, "byte_fallback", false));
  KELVIN_ASSIGN_OR_RETURN(options.fuse_unk, OptionalBool(model, where, "fuse_unk", false));
  KELVIN_ASSIGN_OR_RETURN(options.ignore_merges,
                          OptionalBool(model, where, "ignore_merges", false));
  if (const auto unk = model.find("unk_token"); unk != model.end() && !unk->is_null()) {
    if (!unk->is_string()) return WrongType(where + ".unk_token", "a token or null", *unk);
    options.unk_token = unk->get<std::string>();
  }
  const auto vocab_it = model.find("vocab");
  if (vocab_it == model.end() || !vocab_it->is_object()) {
    return WrongType(where + ".vocab", "an object of token -> id", Field(model, "vocab"));
  }
  BpeModel::Vocab vocab;
  vocab.reserve(vocab_it->size());
  for (const auto& [spelling, id] : vocab_it->items()) {
    if (!id.is_number_integer() || id.get<int64_t>() < 0 ||
        id.get<int64_t>() > std::numeric_limits<int32_t>::max()) {
      return WrongType(absl::StrCat(where, ".vocab[\"", spelling.substr(0, 80), "\"]"),
                       "an id in [0, 2^31)", id);
    }
    vocab.emplace(spelling, id.get<int32_t>());
  }
  const auto merges_it = model.find("merges");
  if (merges_it == model.end() || !merges_it->is_array()) {
    return WrongType(where + ".merges", "an array", Field(model, "merges"));
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
  return BpeModel::Create(std::move(vocab), merges, options, source);
}

// The post-processor's single-sequence template (TemplateProcessing; a ByteLevel step changes
// offsets only): special tokens' ids, an empty entry for the text.
absl::StatusOr<std::vector<std::vector<int32_t>>> ParseTemplate(const json& root,
                                                                int64_t vocab_size,
                                                                const std::string& source) {
  std::vector<std::vector<int32_t>> pieces;
  const auto processor = root.find("post_processor");
  if (processor == root.end() || processor->is_null()) return pieces;
  std::vector<std::pair<const json*, std::string>> processors;
  const std::string where = source + " post_processor";
  if (JsonType(*processor) == "Sequence" && processor->contains("processors") &&
      (*processor)["processors"].is_array()) {
    for (size_t i = 0; i < (*processor)["processors"].size(); ++i) {
      processors.emplace_back(&(*processor)["processors"][i],
                              absl::StrCat(where, ".processors[", i, "]"));
    }
  } else {
    processors.emplace_back(&*processor, where);
  }
  for (const auto& [part, at] : processors) {
    const std::string type = JsonType(*part);
    if (type == "ByteLevel") continue;
    if (type != "TemplateProcessing") return Unsupported(at + ".type", Field(*part, "type"));
    const auto single = part->find("single");
    if (single == part->end() || !single->is_array()) {
      return WrongType(at + ".single", "an array", Field(*part, "single"));
    }
    const json& specials = Field(*part, "special_tokens");
    for (const json& item : *single) {
      if (item.contains("Sequence")) {
        pieces.emplace_back();
      } else if (item.contains("SpecialToken") && item["SpecialToken"].contains("id") &&
                 item["SpecialToken"]["id"].is_string()) {
        const std::string name = item["SpecialToken"]["id"].get<std::string>();
        const auto entry = specials.is_object() ? specials.find(name) : specials.end();
        if (entry == specials.end() || !entry->contains("ids") || !(*entry)["ids"].is_array() ||
            (*entry)["ids"].empty()) {
          return absl::InvalidArgumentError(
              absl::StrCat(at, ".single names the special token \"", name,
                           "\", which its special_tokens do not define with ids"));
        }
        std::vector<int32_t> ids;
        for (const json& id : (*entry)["ids"]) {
          if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() >= vocab_size) {
            return WrongType(absl::StrCat(at, ".special_tokens[\"", name, "\"].ids"),
                             "token ids of the vocabulary", *entry);
          }
          ids.push_back(id.get<int32_t>());
        }
        pieces.push_back(std::move(ids));
      } else {
        return Unsupported(at + ".single", item);
      }
    }
  }
  return pieces;
}

std::string ByteList(const std::vector<int>& bytes) {
  std::vector<std::string> shown;
  for (size_t i = 0; i < bytes.size() && i < 24; ++i) shown.push_back(absl::StrCat(bytes[i]));
  return absl::StrCat(absl::StrJoin(shown, ", "), bytes.size() > 24 ? ", ..." : "");
}

}  // namespace

absl::StatusOr<Tokenizer> Tokenizer::FromJson(std::string_view json_text,
                                              const std::string& source) {
  KELVIN_ASSIGN_OR_RETURN(const json root, io::ParseStrictJson(json_text, source));
  if (!root.is_object()) return WrongType(source, "an object (a tokenizer.json)", root);
  // The model's type first: it says best what a tokenizer of another kind is.
  const auto model = root.find("model");
  if (model == root.end()) {
    return absl::InvalidArgumentError(absl::StrCat(source, " has no \"model\""));
  }
  if (!model->is_object()) return WrongType(source + " model", "an object", *model);
  if (JsonType(*model) != "BPE") {
    return Unsupported(source + " model.type", Field(*model, "type"));
  }
  const auto part = [&root](const char* key) {
    const auto it = root.find(key);
    return it == root.end() ? json() : *it;
  };
  KELVIN_ASSIGN_OR_RETURN(Normalizer normalizer,
                          Normalizer::Parse(part("normalizer"), source + " normalizer"));
  KELVIN_ASSIGN_OR_RETURN(PreTokenizer pre_tokenizer,
                          PreTokenizer::Parse(part("pre_tokenizer"), source + " pre_tokenizer"));
  KELVIN_ASSIGN_OR_RETURN(TokenDecoder decoder,
                          TokenDecoder::Parse(part("decoder"), source + " decoder"));
  if (pre_tokenizer.byte_level() != decoder.byte_level()) {
    return absl::InvalidArgumentError(absl::StrCat(
        source, ": the pre_tokenizer ", pre_tokenizer.byte_level() ? "has" : "has no",
        " ByteLevel step but the decoder ", decoder.byte_level() ? "has one" : "has none",
        ": a byte-level tokenizer has both, a SentencePiece-style one neither (",
        kTokenizerFamilies, ")"));
  }
  KELVIN_ASSIGN_OR_RETURN(BpeModel bpe, ParseModel(*model, pre_tokenizer.byte_level(), source));
  Tokenizer tokenizer(std::move(bpe));
  tokenizer.source_ = source;
  tokenizer.normalizer_ = std::move(normalizer);
  tokenizer.pre_tokenizer_ = std::move(pre_tokenizer);
  tokenizer.decoder_ = std::move(decoder);
  KELVIN_ASSIGN_OR_RETURN(tokenizer.added_,
                          AddedVocabulary::Parse(part("added_tokens"), tokenizer.model_,
                                                 tokenizer.normalizer_, source + " added_tokens"));
  tokenizer.vocab_size_ =
      std::max<int64_t>(tokenizer.model_.max_id(), tokenizer.added_.max_id()) + 1;
  KELVIN_ASSIGN_OR_RETURN(tokenizer.template_, ParseTemplate(root, tokenizer.vocab_size_, source));

  const std::vector<int> missing = tokenizer.model_.MissingBytes();
  if (!missing.empty()) {
    const BpeOptions& options = tokenizer.model_.options();
    KLOG(WARNING) << source << " model.vocab has no token for " << missing.size()
                  << " of the 256 bytes (" << ByteList(missing) << "): "
                  << (options.byte_fallback ? "their <0xNN> tokens or the unknown token"
                      : options.unk_token.has_value()
                          ? "the unknown token \"" + *options.unk_token + "\""
                          : "nothing (they are dropped)")
                  << " stands for them when a text holds them, as in tokenizers";
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

  const std::string config_path =
      (std::filesystem::path(directory) / "tokenizer_config.json").string();
  std::error_code error;
  if (!std::filesystem::exists(config_path, error)) return tokenizer;
  KELVIN_ASSIGN_OR_RETURN(const std::string config_text,
                          io::ReadRegularFile(config_path, "tokenizer config", 64 << 20));
  KELVIN_ASSIGN_OR_RETURN(const json config, io::ParseStrictJson(config_text, config_path));
  if (!config.is_object()) return WrongType(config_path, "an object", config);
  for (auto [key, id] :
       {std::pair{"bos_token", &tokenizer.bos_id_}, std::pair{"eos_token", &tokenizer.eos_id_}}) {
    const auto it = config.find(key);
    if (it == config.end() || it->is_null()) continue;
    const json& name = it->is_object() ? Field(*it, "content") : *it;
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
  const std::optional<int32_t> added = added_.Id(token);
  return added.has_value() ? added : model_.Id(token);
}

bool Tokenizer::HasToken(int32_t id) const {
  return added_.Token(id) != nullptr || model_.Spelling(id) != nullptr;
}

absl::Status Tokenizer::EncodeSegment(std::string_view segment, size_t offset,
                                      std::vector<int32_t>& ids, DroppedUnits& dropped) const {
  const bool normalizes = !normalizer_.empty();
  const std::string normalized = normalizes ? normalizer_.Apply(segment) : std::string();
  const std::string_view text = normalizes ? std::string_view(normalized) : segment;
  const std::vector<TextSegment> parts = added_.has_normalized()
                                             ? added_.Split(text, /*normalized=*/true)
                                             : std::vector<TextSegment>{{0, text.size(), -1}};
  std::string storage;
  std::vector<std::string_view> pieces;
  for (const TextSegment& part : parts) {
    if (part.id >= 0) {
      ids.push_back(part.id);
      continue;
    }
    pieces.clear();
    KELVIN_RETURN_IF_ERROR(pre_tokenizer_.Split(text.substr(part.begin, part.end - part.begin),
                                                offset == 0 && part.begin == 0, storage, pieces));
    for (const std::string_view piece : pieces) {
      // Offsets in the input where the piece views it, else the segment's start.
      const bool views_text =
          piece.data() >= text.data() && piece.data() < text.data() + text.size() && !normalizes;
      const bool first_drop = dropped.count == 0;
      model_.Encode(piece, offset + (views_text ? piece.data() - text.data() : 0), ids, dropped);
      if (first_drop && dropped.count > 0) dropped.first_exact = views_text;
    }
  }
  return absl::OkStatus();
}

absl::Status Tokenizer::Encode(std::string_view text, bool add_special_tokens,
                               std::vector<int32_t>& ids) const {
  if (const std::optional<size_t> bad = FirstInvalidUtf8(text); bad.has_value()) {
    return absl::InvalidArgumentError(
        absl::StrCat("the text is not valid UTF-8 at byte ", *bad, " (of ", text.size(), ")"));
  }
  DroppedUnits dropped;
  const auto encode_text = [&]() -> absl::Status {
    for (const TextSegment& segment : added_.Split(text, /*normalized=*/false)) {
      if (segment.id >= 0) {
        ids.push_back(segment.id);
      } else {
        KELVIN_RETURN_IF_ERROR(EncodeSegment(
            text.substr(segment.begin, segment.end - segment.begin), segment.begin, ids, dropped));
      }
    }
    return absl::OkStatus();
  };
  if (!add_special_tokens || template_.empty()) {
    KELVIN_RETURN_IF_ERROR(encode_text());
  } else {
    for (const std::vector<int32_t>& piece : template_) {
      if (piece.empty()) {
        KELVIN_RETURN_IF_ERROR(encode_text());
      } else {
        ids.insert(ids.end(), piece.begin(), piece.end());
      }
    }
  }
  if (dropped.count > 0 && !reported_drop_->exchange(true)) {
    const size_t at = dropped.first_offset;
    KLOG(WARNING) << source_ << ": a text lost " << dropped.count
                  << " byte(s) or character(s) that no token spells, the first "
                  << (dropped.first_exact ? "at byte " : "at or after byte ") << at
                  << ", as tokenizers drops them; this is said once per tokenizer";
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> Tokenizer::Decode(const std::vector<int32_t>& ids,
                                              bool skip_special_tokens) const {
  std::vector<std::string> tokens;
  tokens.reserve(ids.size());
  for (const int32_t id : ids) {
    const std::string* token = added_.Token(id);
    if (token == nullptr) token = model_.Spelling(id);
    if (token == nullptr) continue;  // an id beyond the tokenizer: tokenizers skips it
    if (skip_special_tokens && added_.IsSpecial(*token)) continue;
    tokens.push_back(*token);
  }
  return decoder_.Decode(std::move(tokens));
}

}  // namespace kelvin::data
