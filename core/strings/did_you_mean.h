// "Did you mean ...?": the names closest to a mistyped one, for the errors about unknown fields,
// presets, enum values and tensors.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace kelvin::strings {

// The Levenshtein distance of `a` and `b`, letters compared without case.
int EditDistance(std::string_view a, std::string_view b);

// The candidate a user most likely meant by `name`: the nearest within a typo budget (about a third
// of the name) or one that starts with it (or it with the candidate, for names of 3 letters or
// more); "" when none is close.
std::string ClosestName(std::string_view name, const std::vector<std::string>& candidates);

// Up to `count` candidates, nearest first (ties in candidate order): a list to show when no single
// name is close, e.g. of the tensors a file holds.
std::vector<std::string> NearestNames(std::string_view name,
                                      const std::vector<std::string>& candidates, size_t count);

}  // namespace kelvin::strings
