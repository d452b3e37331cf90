// Fuzzing the Hugging Face config.json reader: 4000 deterministic mutations of Llama-3.1-8B's
// config.json (transformers 4.x) and of the tiny fixture's (5.x) through LlamaConfigFromHfJson and
// ValidateLlamaConfig: each a clear error naming the source, or a config within llama_config.h's
// limits that exports and reads back unchanged. A FIFO, a directory and devices in place of
// config.json are errors returned at once.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "models/llama/llama_config.h"
#include "tests/core/io/test_files.h"
#include "tests/testing/deadline.h"
#include "tests/testing/files.h"
#include "tests/testing/json_text_mutations.h"

namespace kelvin::models {
namespace {

namespace fs = std::filesystem;
using Json = nlohmann::ordered_json;
using ::testing::HasSubstr;

// Meta-Llama-3.1-8B's config.json, as transformers 4.43 wrote it.
constexpr char kLlama31Config[] = R"({
  "architectures": ["LlamaForCausalLM"],
  "attention_bias": false,
  "attention_dropout": 0.0,
  "bos_token_id": 128000,
  "eos_token_id": 128001,
  "hidden_act": "silu",
  "hidden_size": 4096,
  "initializer_range": 0.02,
  "intermediate_size": 14336,
  "max_position_embeddings": 131072,
  "mlp_bias": false,
  "model_type": "llama",
  "num_attention_heads": 32,
  "num_hidden_layers": 32,
  "num_key_value_heads": 8,
  "pretraining_tp": 1,
  "rms_norm_eps": 1e-05,
  "rope_scaling": {
    "factor": 8.0,
    "low_freq_factor": 1.0,
    "high_freq_factor": 4.0,
    "original_max_position_embeddings": 8192,
    "rope_type": "llama3"
  },
  "rope_theta": 500000.0,
  "tie_word_embeddings": false,
  "torch_dtype": "bfloat16",
  "transformers_version": "4.43.0.dev0",
  "use_cache": true,
  "vocab_size": 128256
}
)";

using testing::ScratchDir;

const std::vector<std::string>& Keys() {  // every key the reader looks at, and a foreign one
  static const std::vector<std::string> keys = {
      "hidden_size",         "intermediate_size",       "num_hidden_layers",
      "num_attention_heads", "num_key_value_heads",     "head_dim",
      "vocab_size",          "max_position_embeddings", "rms_norm_eps",
      "rope_theta",          "tie_word_embeddings",     "model_type",
      "hidden_act",          "attention_bias",          "mlp_bias",
      "rope_scaling",        "rope_parameters",         "torch_dtype"};
  return keys;
}

Json SpecialValue(std::mt19937_64& rng) {
  const std::vector<Json> values = {0,
                                    -1,
                                    1,
                                    2,
                                    3,
                                    7,
                                    8,
                                    64,
                                    4096,
                                    int64_t{1} << 31,
                                    int64_t{1} << 40,
                                    int64_t{1} << 62,
                                    std::numeric_limits<int64_t>::max(),
                                    std::numeric_limits<int64_t>::min(),
                                    std::numeric_limits<uint64_t>::max(),
                                    uint64_t{1} << 63,
                                    1e308,
                                    -1e308,
                                    4.9e-324,
                                    0.5,
                                    4096.0,
                                    1e-5,
                                    -0.0,
                                    "4096",
                                    "llama",
                                    "llama3",
                                    "",
                                    true,
                                    false,
                                    nullptr,
                                    Json::array(),
                                    Json::object(),
                                    Json::array({4096}),
                                    Json::object({{"rope_type", "llama3"}})};
  return values[rng() % values.size()];
}

// Literals that replace a number of the text: beyond a double or an int64, JSON's missing NaN
// and Infinity, malformed numbers.
// Beside MutateJsonText's own: malformed forms and sizes at and beyond the limits.
const std::vector<std::string>& SpecialNumbers() {
  static const std::vector<std::string> numbers = {"nan",
                                                   "0x10",
                                                   "01",
                                                   "1.",
                                                   "1",
                                                   ".5",
                                                   "+1",
                                                   "1e",
                                                   "--1",
                                                   "4096.0",
                                                   "-1",
                                                   "1E+2",
                                                   "2147483648",
                                                   "1099511627776",
                                                   "4611686018427387904",
                                                   "4097",
                                                   "131073"};
  return numbers;
}

// A Llama 3 RoPE scaling section with values around and beyond its rules (some keys left out).
Json RopeVariant(std::mt19937_64& rng, bool v5) {
  const auto any = [&rng](const std::vector<Json>& from) { return from[rng() % from.size()]; };
  switch (rng() % 4) {
    case 0:
      return any({nullptr, Json::array(), "llama3", 8, Json::object(), true});
    case 1: {
      Json rope = {{any({"rope_type", "type"}),
                    any({"default", "linear", "dynamic", "yarn", "longrope", "LLAMA3", "", 3})}};
      if (v5) rope["rope_theta"] = any({10000.0, 0, -1, 1e308, "1e4"});
      return rope;
    }
    default: {
      Json rope = Json::object();
      const auto maybe = [&](const char* key, const std::vector<Json>& values) {
        if (rng() % 10 != 0) rope[key] = any(values);
      };
      maybe("rope_type", {"llama3", "llama3", "llama3", "default"});
      maybe("factor", {8.0, 1, 1.0, 0.999, 0, -1, -8.0, 1e-300, 1e308, 0.5, 32, "8"});
      maybe("low_freq_factor", {1.0, 0, -1, 4.0, 1e-300, 1e308, 8});
      maybe("high_freq_factor", {4.0, 1.0, 0, 1e308, 0.5, 1.0000001, nullptr});
      maybe("original_max_position_embeddings",
            {8192, 0, -1, 1, int64_t{1} << 27, (int64_t{1} << 27) + 1, int64_t{1} << 40, 8192.0});
      if (v5) maybe("rope_theta", {500000.0, 10000, 0, -1.0, 4.9e-324});
      return rope;
    }
  }
}

// A mutated config: structural edits of the parsed JSON, then edits of its text.
struct Mutation {
  std::string text;
  std::vector<std::string> edits;  // what was done, for failure messages
};

Mutation Mutate(const Json& base, bool v5, std::mt19937_64& rng) {
  const auto pick = [&rng](size_t lo, size_t hi) {  // uniform in [lo, hi]
    return std::uniform_int_distribution<size_t>(lo, hi)(rng);
  };
  Mutation m;
  Json json = base;
  const std::string rope_key = v5 ? "rope_parameters" : "rope_scaling";
  for (size_t n = pick(0, 2); n > 0; --n) {
    const std::string& key = Keys()[pick(0, Keys().size() - 1)];
    switch (pick(0, 3)) {
      case 0:
        json.erase(key);
        m.edits.push_back(absl::StrCat("delete \"", key, "\""));
        break;
      case 1: {
        const Json value = SpecialValue(rng);
        if (pick(0, 2) == 0 && json.contains(rope_key) && json[rope_key].is_object()) {
          const std::vector<std::string> rope_keys = {
              "factor",           "low_freq_factor",
              "high_freq_factor", "original_max_position_embeddings",
              "rope_type",        "type",
              "rope_theta"};
          const std::string& inner = rope_keys[pick(0, rope_keys.size() - 1)];
          json[rope_key][inner] = value;
          m.edits.push_back(absl::StrCat(rope_key, ".", inner, " = ", value.dump()));
        } else {
          json[key] = value;
          m.edits.push_back(absl::StrCat("\"", key, "\" = ", value.dump()));
        }
        break;
      }
      default: {
        const Json rope = RopeVariant(rng, v5);
        json[pick(0, 4) == 0 ? (v5 ? "rope_scaling" : "rope_parameters") : rope_key] = rope;
        m.edits.push_back(absl::StrCat("rope section = ", rope.dump()));
        break;
      }
    }
  }
  std::string text = json.dump(pick(0, 1) ? 2 : -1);
  // Text edits mostly break the JSON: fewer of them after structural edits, which keep it valid.
  const size_t text_edits = m.edits.empty() ? pick(1, 2) : pick(0, 2) / 2;
  for (size_t n = text_edits; n > 0; --n) {
    const std::string& key = Keys()[pick(0, Keys().size() - 1)];
    testing::MutateJsonText(text, m.edits, rng, SpecialNumbers(),
                            absl::StrCat("\"", key, "\": ", SpecialValue(rng).dump(), ","),
                            "config");
  }
  m.text = std::move(text);
  return m;
}

// An accepted architecture keeps every limit of llama_config.h.
void ExpectWithinLimits(const LlamaConfig& c, const std::string& context) {
  const auto in = [&](const char* field, int64_t value, int64_t max) {
    EXPECT_TRUE(value >= 1 && value <= max) << field << "=" << value << "\n" << context;
  };
  in("hidden_size", c.hidden_size, kMaxHiddenSize);
  in("intermediate_size", c.intermediate_size, kMaxIntermediateSize);
  in("num_layers", c.num_layers, kMaxLayers);
  in("num_attention_heads", c.num_attention_heads, kMaxHeads);
  in("num_key_value_heads", c.num_key_value_heads, kMaxHeads);
  in("head_dim", c.head_dim, kMaxHeadDim);
  in("vocab_size", c.vocab_size, kMaxVocabSize);
  in("max_position_embeddings", c.max_position_embeddings, kMaxPositions);
  if (c.num_key_value_heads > 0) {
    EXPECT_EQ(c.num_attention_heads % c.num_key_value_heads, 0) << context;
  }
  EXPECT_EQ(c.head_dim % 2, 0) << context;
  EXPECT_TRUE(std::isfinite(c.rms_norm_eps) && c.rms_norm_eps > 0) << c.rms_norm_eps << context;
  EXPECT_TRUE(std::isfinite(c.rope.theta) && c.rope.theta > 0) << c.rope.theta << context;
  if (c.rope.type != ops::RopeType::kDefault) {
    EXPECT_GE(c.rope.factor, 1) << context;
    if (c.rope.type != ops::RopeType::kLinear) {
      in("original_max_position_embeddings", c.rope.original_max_position, kMaxPositions);
    }
  }
  if (c.rope.type == ops::RopeType::kLlama3) {
    EXPECT_GT(c.rope.low_freq_factor, 0) << context;
    EXPECT_TRUE(std::isfinite(c.rope.high_freq_factor) &&
                c.rope.high_freq_factor > c.rope.low_freq_factor)
        << c.rope.high_freq_factor << context;
  }
  if (c.rope.type == ops::RopeType::kLongrope) {
    EXPECT_EQ(static_cast<int64_t>(c.rope.short_factor.size()), c.head_dim / 2) << context;
    EXPECT_EQ(static_cast<int64_t>(c.rope.long_factor.size()), c.head_dim / 2) << context;
  }
  EXPECT_GT(c.NumParameters(), 0) << context;
}

bool SameArchitecture(const LlamaConfig& a, const LlamaConfig& b) {
  return a.hidden_size == b.hidden_size && a.intermediate_size == b.intermediate_size &&
         a.num_layers == b.num_layers && a.num_attention_heads == b.num_attention_heads &&
         a.num_key_value_heads == b.num_key_value_heads && a.head_dim == b.head_dim &&
         a.vocab_size == b.vocab_size && a.max_position_embeddings == b.max_position_embeddings &&
         a.rms_norm_eps == b.rms_norm_eps && a.tie_word_embeddings == b.tie_word_embeddings &&
         a.rope == b.rope && (a.ssa.has_value() || a.hf_rope_form == b.hf_rope_form);
}

std::string Printable(const std::string& text) {  // the first 1500 bytes, escaped
  std::string out;
  for (const char ch : text.substr(0, 1500)) {
    const auto byte = static_cast<unsigned char>(ch);
    out += (byte >= 32 && byte < 127) || ch == '\n'
               ? std::string(1, ch)
               : absl::StrCat("\\x", absl::Hex(byte, absl::kZeroPad2));
  }
  return out;
}

TEST(HfConfigFuzz, MutatedConfigsAreErrorsNamingTheFileOrValidArchitectures) {
  const Json bases[] = {Json::parse(kLlama31Config),
                        Json::parse(testing::FileBytes(fs::path(KELVIN_FIXTURES_DIR) /
                                                       "llama_tiny/model/config.json"))};
  ASSERT_TRUE(bases[1].contains("rope_parameters"));  // the transformers 5.x layout
  for (const Json& base : bases) {                    // the bases themselves are valid
    const absl::StatusOr<LlamaConfig> config = LlamaConfigFromHfJson(base.dump(2), "base");
    ASSERT_TRUE(config.ok()) << config.status();
    ASSERT_TRUE(ValidateLlamaConfig(*config, "base").ok());
  }
  ScratchDir dir;
  ASSERT_FALSE(dir.path().empty());
  testing::Deadline deadline(std::chrono::seconds(120), "HfConfigFuzz");
  std::mt19937_64 rng(20240917);
  int parse_errors = 0, invalid = 0, valid = 0, from_files = 0;
  constexpr int kCases = 4000;
  for (int iteration = 0; iteration < kCases; ++iteration) {
    const bool v5 = iteration % 2 == 1;
    const Mutation m = Mutate(bases[v5 ? 1 : 0], v5, rng);
    const std::string source = absl::StrCat("fuzz/", iteration, "/config.json");
    const std::string context = absl::StrCat("case ", iteration, ": ", absl::StrJoin(m.edits, "; "),
                                             "\n", Printable(m.text));
    deadline.Set(context);
    absl::StatusOr<LlamaConfig> config = LlamaConfigFromHfJson(m.text, source);
    if (iteration % 10 == 0) {  // the same through a file: same outcome, the path named
      ++from_files;
      const std::string model = absl::StrCat(dir.path(), "/m", iteration);
      fs::create_directory(model);
      std::ofstream(model + "/config.json", std::ios::binary) << m.text;
      const absl::StatusOr<LlamaConfig> from_file = LlamaConfigFromHfDirectory(model);
      EXPECT_EQ(from_file.ok(), config.ok()) << from_file.status() << "\n" << context;
      if (!from_file.ok()) {
        EXPECT_THAT(std::string(from_file.status().message()), HasSubstr(model + "/config.json"))
            << context;
      }
      fs::remove_all(model);
    }
    if (!config.ok()) {
      ++parse_errors;
      EXPECT_THAT(std::string(config.status().message()), HasSubstr(source)) << context;
      continue;
    }
    const absl::Status validated = ValidateLlamaConfig(*config, source);
    if (!validated.ok()) {
      ++invalid;
      EXPECT_THAT(std::string(validated.message()), HasSubstr(source)) << context;
      continue;
    }
    ++valid;
    ExpectWithinLimits(*config, context);
    // What Kelvin exports from it reads back as the same architecture.
    const absl::StatusOr<LlamaConfig> again =
        LlamaConfigFromHfJson(LlamaConfigToHfJson(*config), "export");
    ASSERT_TRUE(again.ok()) << again.status() << "\n" << context;
    EXPECT_TRUE(SameArchitecture(*config, *again)) << LlamaConfigToHfJson(*config) << context;
    EXPECT_TRUE(ValidateLlamaConfig(*again, "export").ok()) << context;
  }
  EXPECT_TRUE(fs::is_empty(dir.path()));  // nothing left behind
  std::printf("HfConfigFuzz: %d cases: %d parse errors, %d invalid architectures, %d valid\n",
              kCases, parse_errors, invalid, valid);
  RecordProperty("parse_errors", parse_errors);
  RecordProperty("invalid", invalid);
  RecordProperty("valid", valid);
  // Every outcome is reached often (a fuzz test that only ever rejects tests nothing).
  EXPECT_GT(parse_errors, kCases / 4);
  EXPECT_GT(invalid, kCases / 20);
  EXPECT_GT(valid, kCases / 10);
  EXPECT_EQ(from_files, kCases / 10);
}

// What is not a regular file in place of config.json is an error naming it, returned at once
// (a FIFO would block an open or a read for ever without a writer).
TEST(HfConfigFuzz, AFifoADirectoryOrADeviceInPlaceOfConfigJsonIsAPromptError) {
  ScratchDir dir;
  ASSERT_FALSE(dir.path().empty());
  testing::Deadline deadline(std::chrono::seconds(20), "HfConfigFuzz special files");
  const auto expect_error = [&](const std::string& model, const std::string& what) -> std::string {
    deadline.Set(what);
    const absl::StatusOr<LlamaConfig> config = LlamaConfigFromHfDirectory(model);
    EXPECT_FALSE(config.ok()) << what;
    if (config.ok()) return "";
    EXPECT_THAT(std::string(config.status().message()), HasSubstr(model + "/config.json")) << what;
    return std::string(config.status().message());
  };
  const std::string fifo = dir.path() + "/fifo";
  fs::create_directories(fifo);
  ASSERT_EQ(::mkfifo((fifo + "/config.json").c_str(), 0600), 0);
  EXPECT_THAT(expect_error(fifo, "a FIFO"), HasSubstr("FIFO"));

  const std::string directory = dir.path() + "/directory";
  fs::create_directories(directory + "/config.json");
  EXPECT_THAT(expect_error(directory, "a directory"), HasSubstr("directory"));

  const std::string link_to_fifo = dir.path() + "/link_to_fifo";
  fs::create_directories(link_to_fifo);
  fs::create_symlink(fifo + "/config.json", link_to_fifo + "/config.json");
  expect_error(link_to_fifo, "a symlink to the FIFO");

  for (const char* device : {"/dev/zero", "/dev/null"}) {
    const std::string model = dir.path() + "/device" + std::string(device).substr(5);
    fs::create_directories(model);
    fs::create_symlink(device, model + "/config.json");
    expect_error(model, std::string("a symlink to ") + device);
  }
  const std::string dangling = dir.path() + "/dangling";
  fs::create_directories(dangling);
  fs::create_symlink(dir.path() + "/nowhere", dangling + "/config.json");
  expect_error(dangling, "a dangling symlink");

  const std::string huge = dir.path() + "/huge";  // a sparse 64 GiB "config.json": not read
  fs::create_directories(huge);
  std::ofstream(huge + "/config.json").close();
  fs::resize_file(huge + "/config.json", uint64_t{64} << 30);
  expect_error(huge, "a 64 GiB file");
}

}  // namespace
}  // namespace kelvin::models
