// The error vocabulary shared by the parsers of tokenizer.json's parts: what a part is, and the
// messages for a value of the wrong type or a part Kelvin does not implement.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "core/status.h"

namespace kelvin::data {

// The families Kelvin reads, for "not supported" messages.
inline constexpr char kTokenizerFamilies[] =
    "Kelvin reads the BPE tokenizers of Llama-3, GPT-2 and Qwen2 (byte-level) and of Llama-2, "
    "TinyLlama and Mistral (SentencePiece-style with byte fallback)";

// `object`[key], or null when `object` is not an object or has no such key.
const nlohmann::json& Field(const nlohmann::json& object, const char* key);
// `part`["type"] when it is a string, else "".
std::string JsonType(const nlohmann::json& part);
// "`where` is VALUE, which is not supported (families)"; VALUE cut to 200 characters.
absl::Status Unsupported(const std::string& where, const nlohmann::json& value);
// "`where` is VALUE, expected `expected`"; VALUE cut to 200 characters.
absl::Status WrongType(const std::string& where, const char* expected, const nlohmann::json& value);
// OK when `object`[key] is absent, null or equal to `allowed`; else Unsupported(where.key).
absl::Status RequireAbsentOr(const nlohmann::json& object, const std::string& where,
                             const char* key, const nlohmann::json& allowed);
// `object`[key] as a boolean: `fallback` when absent or null, an error when another type.
absl::StatusOr<bool> OptionalBool(const nlohmann::json& object, const std::string& where,
                                  const char* key, bool fallback);
// `object`[key] when it is one character of valid UTF-8, else WrongType(where.key, "one
// character").
absl::StatusOr<std::string> OneCharacter(const nlohmann::json& object, const std::string& where,
                                         const char* key);
// The steps of a part and where each is: the items of `value`[`list_key`] ("where.list_key[i]")
// when `value` is a {"type": "Sequence"}, else `value` alone ("where"). A Sequence whose
// `list_key` is not an array is an error. The pointers point into `value`.
absl::StatusOr<std::vector<std::pair<const nlohmann::json*, std::string>>> SequenceSteps(
    const nlohmann::json& value, const std::string& where, const char* list_key);

}  // namespace kelvin::data
