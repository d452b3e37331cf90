// What every reader of a JSON Lines sample file checks alike: a line's shape before a JSON parser
// reads it, and a text field of a parsed line (prepare-data's samples, generate --chat's
// conversations).
#pragma once

#include <nlohmann/json_fwd.hpp>
#include <string>
#include <string_view>

#include "core/status.h"

namespace kelvin::data {

// Arrays and objects of a line nest at most this deep: a sample is a shallow object (chat tool
// calls add a few levels), and the JSON library would recurse once per level to print or copy it.
inline constexpr int kMaxLineDepth = 64;

// No NUL byte (nlohmann ends its input at one, so what follows would be dropped unread) and no
// container opened deeper than kMaxLineDepth (brackets inside strings do not count); linear in the
// line. An error names the column; the caller adds the file and line.
absl::Status CheckJsonLineShape(std::string_view text);

// `object`[key] as text: a non-empty string; else an error naming the key and `field`
// ("the sample", "\"messages\"[2]").
absl::StatusOr<std::string_view> TextField(const nlohmann::json& object, const char* key,
                                           const std::string& field);

}  // namespace kelvin::data
