// One JSON Lines fine-tuning sample, parsed from nlohmann's SAX events (see jsonl_sample_parser.h).
#include "data/sft/jsonl_sample_parser.h"

#include <algorithm>
#include <limits>
#include <unordered_set>

#include "absl/strings/str_cat.h"
#include "core/io/strict_json.h"
#include "core/ops/cross_entropy.h"
#include "data/sft/json_line.h"
#include "data/sft/text_sample_encoder.h"
#include "nlohmann/json.hpp"

namespace kelvin::data {
namespace {

using nlohmann::json;

// The three keys a sample may carry, each an array of integers.
struct ArrayField {
  const char* key;
  bool (*valid)(int64_t);
  const char* rule;  // what `valid` checks, for the error message
};

constexpr ArrayField kInputIds = {
    "input_ids", [](int64_t id) { return id >= 0 && id <= std::numeric_limits<int32_t>::max(); },
    "token ids are integers in [0, 2^31)"};
constexpr ArrayField kLabels = {"labels", [](int64_t) { return true; },
                                "labels are integers (-100, or the token id itself)"};
constexpr ArrayField kLossMask = {"loss_mask",
                                  [](int64_t value) { return value == 0 || value == 1; },
                                  "a loss mask holds 1 (training target) or 0 (no loss)"};

// Receives the line's JSON events: the top-level object's keys pick where each array's integers
// go (`values_[f]` for field f); every other key's value is skipped and the key recorded.
// Returning false stops the parse with `error` set.
class SampleEvents final : public json::json_sax_t {
 public:
  SampleEvents(std::vector<int64_t>* tokens, std::vector<int64_t>* labels,
               std::vector<int64_t>* loss_mask, std::vector<std::string>* ignored_keys)
      : values_{tokens, labels, loss_mask}, ignored_keys_(ignored_keys) {}

  std::string error;
  bool seen[3] = {false, false, false};  // input_ids, labels, loss_mask

  bool null() override { return Scalar("null", "null"); }
  bool boolean(bool value) override { return Scalar("a boolean", value ? "true" : "false"); }
  bool number_integer(number_integer_t value) override { return Integer(value); }
  bool number_unsigned(number_unsigned_t value) override {
    if (value > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      return Scalar("a number", absl::StrCat(value));
    }
    return Integer(static_cast<int64_t>(value));
  }
  bool number_float(number_float_t, const string_t& text) override {
    return Scalar("a number", text);
  }
  bool string(string_t& value) override {
    return InSkippedValue() || Scalar("a string", json(value).dump());
  }
  bool binary(binary_t&) override { return Scalar("binary data", "binary data"); }
  bool start_object(std::size_t) override { return Open("an object", /*is_array=*/false); }
  bool end_object() override { return Close(); }
  bool start_array(std::size_t) override { return Open("an array", /*is_array=*/true); }
  bool end_array() override { return Close(); }

  bool key(string_t& name) override {
    if (depth_ != 1) return true;  // inside a skipped value
    field_ = kSkipped;
    for (int f = 0; f < 3; ++f) {
      if (name == kFields[f]->key) field_ = f;
    }
    if (field_ == kSkipped) {  // counted once per line however often it repeats
      if (ignored_seen_.insert(name).second) ignored_keys_->push_back(name);
    } else if (seen[field_]) {
      return Stop(absl::StrCat("\"", name, "\" appears twice in the object"));
    } else {
      seen[field_] = true;
    }
    return true;
  }

  // nlohmann's message reads "[json.exception.parse_error.101] parse error at line 1, column 20:
  // syntax error while parsing array - unexpected end of input; expected ']'": keep from "column".
  bool parse_error(std::size_t, const std::string&,
                   const nlohmann::detail::exception& exception) override {
    const std::string what = exception.what();
    const size_t column = what.find("column ");
    return Stop(absl::StrCat("not valid JSON (each line must be one JSON object): ",
                             column == std::string::npos ? what : what.substr(column)));
  }

 private:
  static constexpr int kSkipped = -1;
  static constexpr const ArrayField* kFields[3] = {&kInputIds, &kLabels, &kLossMask};

  bool Stop(std::string message) {
    error = std::move(message);
    return false;
  }

  // True while the events are the elements of one of the three arrays.
  bool InArray() const { return depth_ == 2 && field_ != kSkipped; }
  // True while the events are (inside) the value of another key: nothing to check or keep.
  bool InSkippedValue() const { return depth_ >= 1 && field_ == kSkipped; }

  bool NotAnArray(const char* kind) {
    return Stop(
        absl::StrCat("\"", kFields[field_]->key, "\" is ", kind, ", not an array of integers"));
  }

  bool BadElement(absl::string_view shown) {
    const ArrayField& field = *kFields[field_];
    return Stop(absl::StrCat("\"", field.key, "\"[", values_[field_]->size(), "] is ", shown, ": ",
                             field.rule));
  }

  bool Integer(int64_t value) {
    if (InSkippedValue()) return true;
    if (InArray()) {
      if (!kFields[field_]->valid(value)) return BadElement(absl::StrCat(value));
      values_[field_]->push_back(value);
      return true;
    }
    return Scalar("a number", absl::StrCat(value));
  }

  bool Scalar(const char* kind, absl::string_view shown) {
    if (depth_ == 0) return TopLevelNotAnObject(kind);
    if (InArray()) return BadElement(shown);
    if (depth_ == 1 && field_ != kSkipped) return NotAnArray(kind);
    return true;
  }

  bool Open(const char* kind, bool is_array) {
    if (depth_ == 0 && is_array) return TopLevelNotAnObject(kind);
    if (InArray()) return BadElement(kind);
    if (depth_ == 1 && field_ != kSkipped && !is_array) return NotAnArray(kind);
    ++depth_;
    return true;
  }

  bool Close() {
    --depth_;
    if (depth_ == 1) field_ = kSkipped;
    return true;
  }

  bool TopLevelNotAnObject(const char* kind) {
    return Stop(absl::StrCat("the line is ", kind, ", not an object with \"input_ids\""));
  }

  std::vector<int64_t>* values_[3];
  std::vector<std::string>* ignored_keys_;
  std::unordered_set<std::string> ignored_seen_;  // ignored_keys_ as a set: linear in the keys
  int depth_ = 0;  // containers open: 1 inside the sample's object, 2 inside one of its values
  int field_ = kSkipped;
};

}  // namespace

absl::Status JsonlSampleParser::Parse(std::string_view text, const std::string& path,
                                      int64_t line) {
  const auto line_error = [&](absl::string_view detail) {
    return absl::InvalidArgumentError(absl::StrCat(path, ":", line, ": ", detail));
  };
  if (const absl::Status shape = CheckJsonLineShape(text); !shape.ok()) {
    return line_error(shape.message());
  }
  if (text_encoder_ != nullptr) {
    // Text samples are parsed whole (their strings are the payload) and strictly: a key twice,
    // at any depth, is an error as in every JSON file Kelvin reads (and as the event parser below
    // refuses input_ids twice), not its last value. Input_ids lines and lines that are no JSON go
    // on to the event parser, which names their problem.
    const absl::StatusOr<json> parsed = io::ParseStrictJson(text, absl::StrCat(path, ":", line));
    if (!parsed.ok() && json::accept(text)) return parsed.status();  // JSON, but refused
    if (parsed.ok() && parsed->is_object()) {
      const json& object = *parsed;
      const absl::StatusOr<bool> encoded = text_encoder_->Encode(object, text, sample_);
      if (!encoded.ok()) return line_error(encoded.status().message());
      if (*encoded) return absl::OkStatus();
      if (!object.contains("input_ids")) {
        return line_error(
            "no \"text\", \"prompt\", \"messages\" or \"input_ids\": give one sample kind per "
            "line");
      }
    }
  }
  sample_.tokens.clear();
  sample_.targets.clear();
  sample_.ignored_keys.clear();
  labels_.clear();
  SampleEvents events(&sample_.tokens, &labels_, &sample_.targets, &sample_.ignored_keys);
  if (!json::sax_parse(text.data(), text.data() + text.size(), &events)) {
    return line_error(events.error);
  }
  const auto [has_tokens, has_labels, has_loss_mask] = events.seen;
  if (!has_tokens) {
    const std::vector<std::string>& keys = sample_.ignored_keys;
    for (const char* kind : {"text", "prompt", "messages"}) {  // the kinds a text encoder reads
      if (text_encoder_ == nullptr && std::find(keys.begin(), keys.end(), kind) != keys.end()) {
        return line_error(absl::StrCat("a \"", kind,
                                       "\" sample is text, which needs the model's tokenizer: "
                                       "give prepare-data --tokenizer DIR"));
      }
    }
    return line_error("no \"input_ids\": each sample needs its token ids");
  }
  if (has_labels && has_loss_mask) {
    return line_error("both \"labels\" and \"loss_mask\": give one of them");
  }
  const size_t n = sample_.tokens.size();
  if (n == 0) return line_error("\"input_ids\" is empty");
  const auto length_error = [&](const char* key, size_t length) {
    return line_error(
        absl::StrCat("\"", key, "\" has ", length, " entries but \"input_ids\" has ", n));
  };
  if (has_loss_mask && sample_.targets.size() != n) {
    return length_error("loss_mask", sample_.targets.size());
  }
  if (!has_labels) return absl::OkStatus();
  if (labels_.size() != n) return length_error("labels", labels_.size());
  for (size_t i = 0; i < n; ++i) {
    if (labels_[i] != ops::kIgnoreIndex && labels_[i] != sample_.tokens[i]) {
      return line_error(absl::StrCat(
          "\"labels\"[", i, "] is ", labels_[i], " but \"input_ids\"[", i, "] is ",
          sample_.tokens[i],
          ": labels must be the input_ids themselves where the token is a training target and "
          "-100 where it is not (Hugging Face's unshifted labels)"));
    }
    sample_.targets.push_back(labels_[i] == ops::kIgnoreIndex ? 0 : 1);
  }
  return absl::OkStatus();
}

}  // namespace kelvin::data
