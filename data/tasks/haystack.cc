// The filler's sentences and the needles' draws (see haystack.h).
#include "data/tasks/haystack.h"

#include <algorithm>

#include "data/sampling/random.h"
#include "data/tasks/passkey_task.h"

namespace kelvin::data {

std::vector<int64_t> FillerBoundaries(int64_t budget) {
  std::vector<int64_t> sentence_lengths;
  for (size_t begin = 0; begin < kPasskeyFiller.size();) {
    const size_t end = kPasskeyFiller.find(". ", begin) + 2;  // each sentence ends in ". "
    sentence_lengths.push_back(static_cast<int64_t>(end - begin));
    begin = end;
  }
  std::vector<int64_t> boundaries = {0};
  for (size_t s = 0;; s = (s + 1) % sentence_lengths.size()) {
    const int64_t next = boundaries.back() + sentence_lengths[s];
    if (next > budget) return boundaries;
    boundaries.push_back(next);
  }
}

int64_t DrawBoundary(std::mt19937_64& rng, const std::vector<int64_t>& boundaries,
                     const DepthRange& depths) {
  const double width = static_cast<double>(boundaries.back());
  const auto depth_of = [&](int64_t boundary) { return width > 0 ? boundary / width : 0.0; };
  std::vector<int64_t> inside;
  for (const int64_t b : boundaries) {
    if (depth_of(b) >= depths.min && depth_of(b) <= depths.max) inside.push_back(b);
  }
  if (!inside.empty()) return inside[UniformBelow(rng, inside.size())];
  const auto distance = [&](int64_t b) {
    return std::max({depths.min - depth_of(b), depth_of(b) - depths.max, 0.0});
  };
  return *std::min_element(boundaries.begin(), boundaries.end(),
                           [&](int64_t a, int64_t b) { return distance(a) < distance(b); });
}

int32_t DrawFiveDigits(std::mt19937_64& rng) {
  return 10000 + static_cast<int32_t>(UniformBelow(rng, 90000));
}

std::string FillerText(int64_t begin, int64_t end) {
  const auto period = static_cast<int64_t>(kPasskeyFiller.size());
  std::string text;
  text.reserve(static_cast<size_t>(std::max<int64_t>(end - begin, 0)));
  for (int64_t i = begin; i < end; ++i) text.push_back(kPasskeyFiller[i % period]);
  return text;
}

}  // namespace kelvin::data
