// Strict JSON for the files Kelvin reads (safetensors headers, HF config.json and index files,
// checkpoint.json): linear time whatever the size, errors at their line and column (NaN,
// Infinity, numbers beyond a double, bad UTF-8, truncation), and every key that appears twice in
// an object rejected (nlohmann alone would keep the last).
#pragma once

#include <string_view>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"

namespace kelvin::io {

// Parses `text`. Errors are InvalidArgument and start with `where` (the file): "<where>: not
// well-formed JSON at line L, column C (<what>)", or "<where>: <kind> \"k\" appears twice", where
// a duplicate at the top level is called a `top_level_key_kind` ("tensor name", "key") and a
// deeper one names its enclosing keys.
absl::StatusOr<nlohmann::json> ParseStrictJson(std::string_view text, std::string_view where,
                                               std::string_view top_level_key_kind = "key");

}  // namespace kelvin::io
