// Parsing and applying the normalizer steps.
#include "data/tokenizer/normalizer.h"

#include <nlohmann/json.hpp>

#include "data/tokenizer/tokenizer_json.h"
#include "data/tokenizer/unicode_nfc.h"

namespace kelvin::data {

using nlohmann::json;

std::string ReplaceAll(std::string_view text, std::string_view pattern,
                       std::string_view replacement) {
  std::string out;
  out.reserve(text.size());
  size_t at = 0;
  for (size_t found; !pattern.empty() && (found = text.find(pattern, at)) != text.npos;
       at = found + pattern.size()) {
    out.append(text.substr(at, found - at)).append(replacement);
  }
  out.append(text.substr(at));
  return out;
}

absl::StatusOr<Normalizer> Normalizer::Parse(const json& value, const std::string& where) {
  Normalizer normalizer;
  if (value.is_null()) return normalizer;
  KELVIN_ASSIGN_OR_RETURN(const auto steps, SequenceSteps(value, where, "normalizers"));
  for (const auto& [step, at] : steps) {
    const std::string type = JsonType(*step);
    if (type == "NFC" && step->size() == 1) {
      normalizer.steps_.push_back({Step::Kind::kNfc, "", ""});
    } else if (type == "Prepend" && step->contains("prepend") && (*step)["prepend"].is_string()) {
      normalizer.steps_.push_back({Step::Kind::kPrepend, (*step)["prepend"], ""});
    } else if (type == "Replace" && step->contains("pattern") && (*step)["pattern"].is_object() &&
               (*step)["pattern"].size() == 1 && (*step)["pattern"].contains("String") &&
               (*step)["pattern"]["String"].is_string() &&
               !(*step)["pattern"]["String"].get<std::string>().empty() &&
               step->contains("content") && (*step)["content"].is_string()) {
      normalizer.steps_.push_back(
          {Step::Kind::kReplace, (*step)["pattern"]["String"], (*step)["content"]});
    } else {
      return Unsupported(at, *step);
    }
  }
  return normalizer;
}

std::string Normalizer::Apply(std::string_view text) const {
  std::string out(text);
  for (const Step& step : steps_) {
    switch (step.kind) {
      case Step::Kind::kNfc:
        out = NfcNormalize(out);
        break;
      case Step::Kind::kPrepend:
        if (!out.empty()) out.insert(0, step.text);
        break;
      case Step::Kind::kReplace:
        out = ReplaceAll(out, step.text, step.replacement);
        break;
    }
  }
  return out;
}

}  // namespace kelvin::data
