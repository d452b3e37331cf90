// Edit distances and the closest names (see did_you_mean.h).
#include "core/strings/did_you_mean.h"

#include <algorithm>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"

namespace kelvin::strings {

int EditDistance(std::string_view a, std::string_view b) {
  std::vector<int> row(b.size() + 1);  // distances of a's prefix so far to each prefix of b
  for (size_t j = 0; j <= b.size(); ++j) row[j] = static_cast<int>(j);
  for (size_t i = 1; i <= a.size(); ++i) {
    int diagonal = row[0];
    row[0] = static_cast<int>(i);
    for (size_t j = 1; j <= b.size(); ++j) {
      const int above = row[j];
      const bool same = absl::ascii_tolower(static_cast<unsigned char>(a[i - 1])) ==
                        absl::ascii_tolower(static_cast<unsigned char>(b[j - 1]));
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (same ? 0 : 1)});
      diagonal = above;
    }
  }
  return row[b.size()];
}

std::string ClosestName(std::string_view name, const std::vector<std::string>& candidates) {
  const int typo_budget = std::max<int>(2, static_cast<int>(name.size()) / 3);
  const absl::string_view typed(name.data(), name.size());
  std::string best;
  int best_distance = 0;
  for (const std::string& candidate : candidates) {
    const int distance = EditDistance(name, candidate);
    const bool prefix = name.size() >= 3 && (absl::StartsWithIgnoreCase(candidate, typed) ||
                                             absl::StartsWithIgnoreCase(typed, candidate));
    if ((distance <= typo_budget || prefix) && (best.empty() || distance < best_distance)) {
      best = candidate;
      best_distance = distance;
    }
  }
  return best;
}

std::vector<std::string> NearestNames(std::string_view name,
                                      const std::vector<std::string>& candidates, size_t count) {
  std::vector<std::pair<int, size_t>> ranked;  // (distance, index in candidates)
  for (size_t i = 0; i < candidates.size(); ++i) {
    ranked.emplace_back(EditDistance(name, candidates[i]), i);
  }
  const size_t shown = std::min(count, ranked.size());
  std::partial_sort(ranked.begin(), ranked.begin() + static_cast<std::ptrdiff_t>(shown),
                    ranked.end());
  std::vector<std::string> nearest;
  for (size_t i = 0; i < shown; ++i) nearest.push_back(candidates[ranked[i].second]);
  return nearest;
}

}  // namespace kelvin::strings
