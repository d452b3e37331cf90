// JsonlSampleParser: one line of a fine-tuning JSON Lines file into its token ids and training
// targets (the line formats: docs/formats.md; text samples: text_sample_encoder.h). It reads
// the line as a stream of JSON events (nlohmann's SAX interface), so the integer arrays go straight
// into the sample's vectors without a JSON document in between, and the first problem stops it with
// an error naming the file, the line and the field.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/status.h"

namespace kelvin::data {

struct JsonlSample {
  std::vector<int64_t> tokens;   // [n]
  std::vector<int64_t> targets;  // [n] 0/1, or empty when the line has no labels / loss_mask
  std::vector<std::string> ignored_keys;
};

class TextSampleEncoder;

class JsonlSampleParser {
 public:
  // With a text encoder (prepare-data --tokenizer), lines may also be text, prompt/completion or
  // chat samples (text_sample_encoder.h).
  explicit JsonlSampleParser(const TextSampleEncoder* text_encoder = nullptr)
      : text_encoder_(text_encoder) {}

  // Parses `text`, line `line` of `path`, into sample(); the vectors are reused between lines.
  absl::Status Parse(std::string_view text, const std::string& path, int64_t line);
  const JsonlSample& sample() const { return sample_; }
  // Exchanges sample() with `other` (its vectors' capacity is then reused by the next Parse).
  void SwapSample(JsonlSample& other) { std::swap(sample_, other); }

 private:
  const TextSampleEncoder* text_encoder_;
  JsonlSample sample_;
  std::vector<int64_t> labels_;  // [n] as given, before they become targets
};

}  // namespace kelvin::data
