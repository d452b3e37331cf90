// Finding and parsing a model directory's chat templates (see model_template.h).
#include "data/chat_template/model_template.h"

#include <filesystem>
#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "core/io/regular_file.h"
#include "core/io/strict_json.h"

namespace kelvin::chat_template {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

constexpr uint64_t kMaxTemplateBytes = 16 << 20;

// The template file at `path`, or nullopt when there is none; a dangling link or an unreadable
// file is an error.
absl::StatusOr<std::optional<std::string>> ReadTemplateFile(const fs::path& path) {
  std::error_code error;
  const fs::file_status link = fs::symlink_status(path, error);
  if (error || !fs::exists(link)) return std::nullopt;
  if (fs::is_symlink(link) && !fs::exists(path, error)) {
    return absl::InvalidArgumentError(absl::StrCat(
        path.string(), " is a broken symbolic link (to ", fs::read_symlink(path, error).string(),
        "): restore the file it points to, or remove the link"));
  }
  KELVIN_ASSIGN_OR_RETURN(std::string text,
                          io::ReadRegularFile(path.string(), "chat template", kMaxTemplateBytes));
  return text;
}

std::string Shown(const json& value) {
  std::string text = value.dump();
  return text.size() > 80 ? text.substr(0, 80) + "..." : text;
}

}  // namespace

absl::StatusOr<ModelTemplate> ModelTemplate::FromDirectory(const std::string& directory) {
  ModelTemplate model;
  const fs::path dir(directory);
  std::map<std::string, std::pair<std::string, std::string>> sources;  // name -> (text, where)
  const fs::path config_path = dir / "tokenizer_config.json";
  std::error_code error;
  if (fs::exists(config_path, error)) {
    KELVIN_ASSIGN_OR_RETURN(
        const std::string text,
        io::ReadRegularFile(config_path.string(), "tokenizer config", 64 << 20));
    KELVIN_ASSIGN_OR_RETURN(const json config, io::ParseStrictJson(text, config_path.string()));
    if (!config.is_object()) {
      return absl::InvalidArgumentError(
          absl::StrCat(config_path.string(), " is ", Shown(config), ", expected an object"));
    }
    const std::string field = absl::StrCat(config_path.string(), "'s chat_template");
    if (const auto it = config.find("chat_template"); it != config.end() && !it->is_null()) {
      if (it->is_string()) {
        sources["default"] = {it->get<std::string>(), field};
      } else if (it->is_array()) {
        for (size_t i = 0; i < it->size(); ++i) {
          const json& entry = (*it)[i];
          if (!entry.is_object() || !entry.contains("name") || !entry.contains("template") ||
              !entry["name"].is_string() || !entry["template"].is_string()) {
            return absl::InvalidArgumentError(absl::StrCat(
                field, "[", i, "] is ", Shown(entry),
                ", not a {\"name\": \"...\", \"template\": \"...\"} object: a list of chat "
                "templates names each one"));
          }
          sources[entry["name"].get<std::string>()] = {
              entry["template"].get<std::string>(),
              absl::StrCat(field, " \"", entry["name"].get<std::string>(), "\"")};
        }
        if (it->empty()) {
          return absl::InvalidArgumentError(absl::StrCat(field, " is an empty list"));
        }
      } else {
        return absl::InvalidArgumentError(
            absl::StrCat(field, " is ", Shown(*it),
                         ", not a string (a template) or a list of {\"name\", "
                         "\"template\"} objects"));
      }
    }
    for (const char* key : {"bos_token", "eos_token", "unk_token", "sep_token", "pad_token",
                            "cls_token", "mask_token"}) {
      const auto token = config.find(key);
      if (token == config.end() || token->is_null()) continue;
      if (token->is_string()) {
        model.special_tokens_.Set(key, Value::String(token->get<std::string>()));
      } else if (token->is_object() && token->contains("content") &&
                 (*token)["content"].is_string()) {
        model.special_tokens_.Set(key, Value::String((*token)["content"].get<std::string>()));
      }
    }
  }
  // Template files take priority over tokenizer_config.json's entries (transformers 5).
  std::map<std::string, std::pair<std::string, std::string>> files;
  KELVIN_ASSIGN_OR_RETURN(std::optional<std::string> main_file,
                          ReadTemplateFile(dir / "chat_template.jinja"));
  if (main_file) files["default"] = {*main_file, (dir / "chat_template.jinja").string()};
  const fs::path extra_dir = dir / "additional_chat_templates";
  if (fs::is_directory(extra_dir, error)) {
    for (const fs::directory_entry& entry : fs::directory_iterator(extra_dir, error)) {
      if (entry.path().extension() != ".jinja") continue;
      KELVIN_ASSIGN_OR_RETURN(std::optional<std::string> text, ReadTemplateFile(entry.path()));
      if (text) files[entry.path().stem().string()] = {*text, entry.path().string()};
    }
  }
  if (!files.empty()) sources = std::move(files);
  if (sources.empty()) {
    return absl::NotFoundError(
        absl::StrCat(directory,
                     " has no chat template (no chat_template.jinja, and no \"chat_template\" in "
                     "tokenizer_config.json)"));
  }
  for (auto& [name, source] : sources) {
    KELVIN_ASSIGN_OR_RETURN(Template parsed, Template::Parse(source.first, source.second));
    model.templates_.emplace(name, std::move(parsed));
  }
  model.source_ = sources.size() == 1 ? sources.begin()->second.second : directory;
  return model;
}

absl::StatusOr<ModelTemplate> ModelTemplate::FromSource(std::string_view source, std::string name,
                                                        Dict special_tokens) {
  ModelTemplate model;
  KELVIN_ASSIGN_OR_RETURN(Template parsed, Template::Parse(source, name));
  model.templates_.emplace("default", std::move(parsed));
  model.special_tokens_ = std::move(special_tokens);
  model.source_ = std::move(name);
  return model;
}

absl::StatusOr<const Template*> ModelTemplate::Select(bool has_tools,
                                                      const std::string& name) const {
  std::string chosen = name;
  if (chosen.empty()) {
    chosen = has_tools && templates_.contains("tool_use") ? "tool_use" : "default";
  }
  if (const auto it = templates_.find(chosen); it != templates_.end()) return &it->second;
  std::string names;
  for (const auto& [known, parsed] : templates_)
    absl::StrAppend(&names, names.empty() ? "" : ", ", known);
  return absl::InvalidArgumentError(absl::StrCat(
      source_, " has no chat template named \"", chosen, "\" (it has ", names,
      name.empty() ? "; transformers renders \"default\", or \"tool_use\" when tools are given)"
                   : ")"));
}

std::optional<std::string> ModelTemplate::SpecialToken(const std::string& key) const {
  const Value* value = special_tokens_.Find(key);
  if (value == nullptr || !value->is_string()) return std::nullopt;
  return value->str();
}

}  // namespace kelvin::chat_template
