// Fuzzing tokenizer.json: 1200 deterministic mutations of two small tokenizers (byte-level with
// Split regexes, SentencePiece-style with byte fallback), each a field set to a hostile value
// (ids near 2^31, wrong types, nested values, heavy or broken regexes, empty and long strings) or
// the JSON text damaged (a byte replaced, deleted, the text cut). Each either fails to load with
// an error naming the file, or loads and encodes hostile texts (bounded work: each text is short
// and a Split's work is bounded by its length) and decodes any ids, in range or not, without an
// error; none crashes or allocates without bound.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "data/tokenizer/byte_level.h"
#include "data/tokenizer/tokenizer.h"

namespace kelvin::data {
namespace {

using nlohmann::json;
using ::testing::HasSubstr;

json Added(const std::string& content, int id, bool special, bool normalized) {
  return {{"id", id},        {"content", content},       {"single_word", false}, {"lstrip", false},
          {"rstrip", false}, {"normalized", normalized}, {"special", special}};
}

json ByteLevelTokenizer() {
  json vocab = json::object();
  for (int b = 0; b < 256; ++b) {
    std::string spelling;
    AppendByteLevelChar(static_cast<uint8_t>(b), spelling);
    vocab[spelling] = b;
  }
  vocab["ab"] = 256;
  vocab["Ġa"] = 257;
  return {
      {"added_tokens", {Added("<|x|>", 258, true, false), Added("yy", 259, false, true)}},
      {"normalizer", nullptr},
      {"pre_tokenizer",
       {{"type", "Sequence"},
        {"pretokenizers",
         {{{"type", "Split"},
           {"pattern", {{"Regex", "(?i:'s|'t)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}|\\s+"}}},
           {"behavior", "Isolated"},
           {"invert", false}},
          {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", false}}}}}},
      {"post_processor", nullptr},
      {"decoder", {{"type", "ByteLevel"}}},
      {"model",
       {{"type", "BPE"}, {"vocab", vocab}, {"merges", {"a b", "Ġ a"}}, {"ignore_merges", true}}}};
}

json SentencePieceTokenizer() {
  json vocab = {{"<unk>", 0}, {"<s>", 1}, {"</s>", 2}};
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof(name), "<0x%02X>", b);
    vocab[name] = 3 + b;
  }
  int id = 259;
  for (const char* piece : {"▁", "a", "b", "▁a", "ab", "▁ab", "▁▁"}) vocab[piece] = id++;
  json root = json::object();
  root["added_tokens"] = {Added("<unk>", 0, true, false), Added("<s>", 1, true, false),
                          Added("</s>", 2, true, false), Added("<x>", 266, false, true)};
  root["normalizer"] = {
      {"type", "Sequence"},
      {"normalizers",
       {{{"type", "Prepend"}, {"prepend", "▁"}},
        {{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", "▁"}}}}};
  root["pre_tokenizer"] = nullptr;
  root["post_processor"] = {
      {"type", "TemplateProcessing"},
      {"single",
       {{{"SpecialToken", {{"id", "<s>"}, {"type_id", 0}}}},
        {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}}},
      {"special_tokens", {{"<s>", {{"id", "<s>"}, {"ids", {1}}, {"tokens", {"<s>"}}}}}}};
  json decoders = json::array();
  decoders.push_back({{"type", "Replace"}, {"pattern", {{"String", "▁"}}}, {"content", " "}});
  decoders.push_back({{"type", "ByteFallback"}});
  decoders.push_back({{"type", "Fuse"}});
  decoders.push_back({{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 0}});
  root["decoder"] = {{"type", "Sequence"}, {"decoders", decoders}};
  json merges = json::array();
  for (const auto& [left, right] : std::vector<std::pair<std::string, std::string>>{
           {"▁", "a"}, {"a", "b"}, {"▁a", "b"}, {"▁", "▁"}}) {
    merges.push_back(json::array({left, right}));
  }
  root["model"] = {{"type", "BPE"},         {"unk_token", "<unk>"}, {"fuse_unk", true},
                   {"byte_fallback", true}, {"vocab", vocab},       {"merges", merges}};
  return root;
}

const std::vector<std::string>& FieldPaths() {
  static const std::vector<std::string> paths = {"/model/vocab/a",
                                                 "/model/vocab/ab",
                                                 "/model/unk_token",
                                                 "/model/byte_fallback",
                                                 "/model/fuse_unk",
                                                 "/model/merges/0",
                                                 "/model/merges",
                                                 "/model/ignore_merges",
                                                 "/model/dropout",
                                                 "/model/type",
                                                 "/normalizer",
                                                 "/normalizer/normalizers/0/prepend",
                                                 "/normalizer/normalizers/1/pattern",
                                                 "/normalizer/normalizers/1/content",
                                                 "/pre_tokenizer",
                                                 "/pre_tokenizer/pretokenizers/0/pattern/Regex",
                                                 "/pre_tokenizer/pretokenizers/1/use_regex",
                                                 "/decoder",
                                                 "/decoder/decoders/3/start",
                                                 "/decoder/decoders/3/content",
                                                 "/decoder/decoders/0/pattern",
                                                 "/added_tokens/0/id",
                                                 "/added_tokens/0/content",
                                                 "/added_tokens/0/lstrip",
                                                 "/added_tokens/0/rstrip",
                                                 "/added_tokens/0/normalized",
                                                 "/added_tokens/0/special",
                                                 "/added_tokens/1",
                                                 "/post_processor",
                                                 "/post_processor/special_tokens/<s>/ids",
                                                 "/post_processor/single/0"};
  return paths;
}

const std::vector<json>& HostileValues() {
  static const std::vector<json> values = [] {
    json nested = json::array();
    for (int i = 0; i < 200; ++i) nested = json::array({nested});
    return std::vector<json>{
        nullptr,
        true,
        false,
        -1,
        0,
        2147483647,
        2147483648LL,
        4294967296LL,
        1e300,
        -0.5,
        "",
        "x",
        "▁",
        "<s>",
        std::string(100000, 'a'),
        json::array(),
        json::object(),
        nested,
        json::array({1, 2}),
        json::array({"a", "b"}),
        {{"type", "Metaspace"}, {"replacement", "▁"}, {"prepend_scheme", "first"}},
        {{"type", "Metaspace"}, {"replacement", "▁"}, {"split", true}},
        {{"type", "NFC"}},
        {{"type", "ByteLevel"}},
        {{"type", "Sequence"}},
        {{"String", "▁"}},
        {{"Regex", "a+"}},
        {{"type", "Digits"}, {"individual_digits", true}},
        "(a|aa)*c",
        "a(?=[^x]*x)",
        "(?:",
        "\\",
        "(?R)",
        "(a*)*b",
        ".",
        "\\p{L}+|\\s+",
        Added("<x>", 5, true, false),
        Added("", 7, false, false),
        Added("▁a", 2147483000, false, true)};
  }();
  return values;
}

std::string Damaged(std::string text, std::mt19937_64& rng) {
  const auto pick = [&rng](size_t lo, size_t hi) {
    return std::uniform_int_distribution<size_t>(lo, hi)(rng);
  };
  static const std::string kSignificant = "{}[],:\"-.0123456789eE \\tnull";
  const size_t at = pick(0, text.size() - 1);
  switch (pick(0, 2)) {
    case 0:
      text[at] = kSignificant[pick(0, kSignificant.size() - 1)];
      break;
    case 1:
      text.erase(at, 1);
      break;
    default:
      text.resize(at);
  }
  return text;
}

TEST(TokenizerFuzz, HostileFilesLoadOrFailClearlyAndLoadedOnesNeverFailToDecode) {
  std::mt19937_64 rng(20261207);
  const auto pick = [&rng](size_t n) {
    return std::uniform_int_distribution<size_t>(0, n - 1)(rng);
  };
  const std::vector<std::string> texts = {"",
                                          " ",
                                          "a b  c",
                                          "ab ab yy <|x|> <s> <x>",
                                          "\x01\x0b\x7f",
                                          "é€🙂 ½ ℌ",
                                          "  \n\t\n ",
                                          std::string(4000, 'a') + " " + std::string(100, ' '),
                                          "<s><s></s>",
                                          "▁a ▁▁b"};
  for (const json& base : {ByteLevelTokenizer(), SentencePieceTokenizer()}) {
    absl::StatusOr<Tokenizer> tokenizer = Tokenizer::FromJson(base.dump(), "t.json");
    ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();  // what is mutated is a tokenizer
    std::vector<int32_t> ids;
    ASSERT_TRUE(tokenizer->Encode("ab ab", false, ids).ok());
    EXPECT_EQ(*tokenizer->Decode(ids, false), "ab ab");
  }
  int64_t loaded = 0, refused = 0;
  for (int i = 0; i < 1200; ++i) {
    json root = i % 2 == 0 ? ByteLevelTokenizer() : SentencePieceTokenizer();
    std::string text;
    if (i % 3 == 2) {
      text = Damaged(root.dump(), rng);
    } else {
      const json::json_pointer path(FieldPaths()[pick(FieldPaths().size())]);
      root[path] = HostileValues()[pick(HostileValues().size())];
      text = root.dump();
    }
    absl::StatusOr<Tokenizer> tokenizer = Tokenizer::FromJson(text, "t.json");
    if (!tokenizer.ok()) {
      EXPECT_THAT(std::string(tokenizer.status().message()), HasSubstr("t.json")) << i;
      EXPECT_LT(tokenizer.status().message().size(), 2000u) << i;
      ++refused;
      continue;
    }
    ++loaded;
    for (const std::string& sample : texts) {
      std::vector<int32_t> ids;
      const bool add_special_tokens = i % 4 < 2;  // the template's ids need not be tokens
      const absl::Status encoded = tokenizer->Encode(sample, add_special_tokens, ids);
      if (!encoded.ok()) continue;  // e.g. a heavy regex's work bound: an error, not a hang
      for (const int32_t id : ids) {
        EXPECT_TRUE(add_special_tokens || tokenizer->HasToken(id)) << i << " " << id;
      }
    }
    std::vector<int32_t> ids = {-1, 0, 1, 2147483647};
    for (int k = 0; k < 16; ++k) ids.push_back(static_cast<int32_t>(pick(300)));
    EXPECT_TRUE(tokenizer->Decode(ids, i % 2 == 0).ok()) << i;
  }
  EXPECT_GT(loaded, 60);  // of 1200: most hostile values are refused
  EXPECT_GT(refused, 600);
}

}  // namespace
}  // namespace kelvin::data
