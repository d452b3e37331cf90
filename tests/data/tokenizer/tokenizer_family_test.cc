// The tokenizer families beyond byte-level BPE with every byte, against Hugging Face tokenizers
// 0.23.3 (tools/make_tokenizer_family_fixtures.py): a SmolLM-style byte-level vocabulary that
// lacks 21 byte symbols (tokenizers drops those bytes), Llama-2-style SentencePiece BPE (Prepend
// and Replace normalizer, byte fallback, <unk>), Metaspace pre-tokenizers, added tokens with
// "normalized", lstrip and rstrip; ids beyond the tokenizer (a padded vocabulary) decode as
// tokenizers decodes them; and the bounds on what a file can make Kelvin allocate or compute.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fstream>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>

#include "data/tokenizer/tokenizer.h"
#include "tests/data/tokenizer/tokenizer_fixtures.h"
#include "tests/testing/files.h"

namespace kelvin::data {
namespace {

using nlohmann::json;
using ::testing::HasSubstr;
using ::testing::Not;
using tokenizer_testing::Encode;
using tokenizer_testing::kFixtures;
using tokenizer_testing::Load;

std::string Decode(const Tokenizer& tokenizer, const std::vector<int32_t>& ids, bool skip) {
  absl::StatusOr<std::string> text = tokenizer.Decode(ids, skip);
  EXPECT_TRUE(text.ok()) << text.status();
  return text.ok() ? *text : "";
}

// The 610 lines of cases.jsonl (prose in nine scripts, code, emoji, whitespace runs, digits,
// special-token strings) and 32 more (control bytes, added tokens beside spaces, characters that
// need byte fallback or the unknown token): ids and both decodes equal tokenizers'.
class FamilyParity : public ::testing::TestWithParam<std::string> {};

TEST_P(FamilyParity, IdsAndDecodesEqualHuggingFaceTokenizers) {
  const Tokenizer tokenizer = Load(GetParam());
  std::ifstream cases(kFixtures + "family_cases.jsonl");
  std::string line;
  int64_t checked = 0, equal = 0;
  while (std::getline(cases, line)) {
    const json record = json::parse(line);
    const std::string text = record["text"];
    const json& expected = record[GetParam()];
    const std::vector<int32_t> ids = Encode(tokenizer, text);
    equal += ids == expected["ids"].get<std::vector<int32_t>>();
    EXPECT_EQ(ids, expected["ids"].get<std::vector<int32_t>>())
        << "line " << checked + 1 << ": " << json(text).dump();
    EXPECT_EQ(Decode(tokenizer, ids, false), expected["decoded"].get<std::string>())
        << "line " << checked + 1;
    EXPECT_EQ(Decode(tokenizer, ids, true), expected["decoded_skip"].get<std::string>())
        << "line " << checked + 1;
    ++checked;
  }
  EXPECT_EQ(checked, 642);
  EXPECT_EQ(equal, checked);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, FamilyParity,
                         ::testing::Values("smollm_style", "llama2_style", "metaspace_style",
                                           "metaspace_split_style"));

// Ids of a padded vocabulary (beyond the tokenizer's) are skipped as tokenizers skips them; the
// sampler can tell them by HasToken.
TEST(Tokenizer, IdsBeyondTheTokenizerDecodeAsTokenizersDecodesThem) {
  std::ifstream cases(kFixtures + "family_decode_cases.jsonl");
  std::string line;
  int64_t checked = 0, beyond = 0;
  std::map<std::string, Tokenizer> loaded;
  while (std::getline(cases, line)) {
    const json record = json::parse(line);
    const std::string name = record["tokenizer"];
    if (!loaded.contains(name)) loaded.emplace(name, Load(name));
    const Tokenizer& tokenizer = loaded.at(name);
    const std::vector<int32_t> ids = record["ids"];
    for (const int32_t id : ids) {
      EXPECT_EQ(tokenizer.HasToken(id), id < record["vocab_size"].get<int32_t>()) << id;
      beyond += !tokenizer.HasToken(id);
    }
    EXPECT_EQ(Decode(tokenizer, ids, false), record["decoded"].get<std::string>()) << line;
    EXPECT_EQ(Decode(tokenizer, ids, true), record["decoded_skip"].get<std::string>()) << line;
    ++checked;
  }
  EXPECT_EQ(checked, 80);
  EXPECT_GT(beyond, 10);
  const Tokenizer qwen = Load("qwen2_style");
  EXPECT_FALSE(qwen.HasToken(-1));
  EXPECT_FALSE(qwen.HasToken(static_cast<int32_t>(qwen.vocab_size())));
  EXPECT_TRUE(qwen.HasToken(static_cast<int32_t>(qwen.vocab_size()) - 1));
  EXPECT_EQ(Decode(qwen, {64, 151935, 65}, false), "ab");
}

// SmolLM2's vocabulary lacks 21 byte symbols: the file loads (before: "model.vocab has no token
// for byte 1"), says so once, and the first encode that drops a byte names its offset, once.
TEST(Tokenizer, AVocabularyWithoutSomeBytesLoadsAndSaysWhatItDrops) {
  ::testing::internal::CaptureStderr();
  const Tokenizer tokenizer = Load("smollm_style");
  EXPECT_THAT(::testing::internal::GetCapturedStderr(),
              HasSubstr("tokenizer.json model.vocab has no token for 21 of the 256 bytes (1, 2, "
                        "3, 4, 5, 6, 11, 12, 192, 193, 245"));
  ::testing::internal::CaptureStderr();
  EXPECT_EQ(Encode(tokenizer, "ab\x0b\x0c", false), Encode(tokenizer, "ab", false));
  EXPECT_EQ(Encode(tokenizer, "x\x01y", false).size(), 2u);
  const std::string said = ::testing::internal::GetCapturedStderr();
  EXPECT_THAT(said, HasSubstr("smollm_style/tokenizer.json: a text lost 2 byte(s) or character(s) "
                              "that no token spells, the first at byte 2, as tokenizers drops"));
  EXPECT_THAT(said, Not(HasSubstr("byte 1,")));  // said once per tokenizer
  const Tokenizer copy = tokenizer;
  ::testing::internal::CaptureStderr();
  Encode(copy, "\x04", false);
  EXPECT_EQ(::testing::internal::GetCapturedStderr(), "");
}

std::string Edited(const std::string& name, const std::function<void(json&)>& edit) {
  json root = json::parse(testing::FileBytes(kFixtures + name + "/tokenizer.json"));
  edit(root);
  return root.dump();
}

absl::StatusOr<Tokenizer> FromEdited(const std::string& name,
                                     const std::function<void(json&)>& edit) {
  return Tokenizer::FromJson(Edited(name, edit), "t.json");
}

json AddedToken(const std::string& content, int64_t id, bool special) {
  return {{"id", id},        {"content", content},  {"single_word", false}, {"lstrip", false},
          {"rstrip", false}, {"normalized", false}, {"special", special}};
}

// tokenizers gives added tokens their ids itself (the file's are checked, not used): the
// vocabulary's id for a content it spells, else the next after the vocabulary's entries and the
// tokens before; an exact repeat and an empty content are ignored.
TEST(Tokenizer, AddedTokensGetTheIdsTokenizersGivesThem) {
  absl::StatusOr<Tokenizer> tokenizer = FromEdited("llama2_style", [](json& t) {
    t["added_tokens"].push_back(AddedToken("▁a", 7, false));    // spelled by the vocabulary
    t["added_tokens"].push_back(AddedToken("<new>", 5, true));  // the next id
    t["added_tokens"].push_back(AddedToken("<new>", 5, true));  // a repeat
    t["added_tokens"].push_back(AddedToken("", 9, true));
    t["added_tokens"].push_back(AddedToken("<newer>", 2147483000, false));
  });
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
  const int32_t entries = 3256;  // tokenizer.json's model.vocab; <extra_id> is 3256
  EXPECT_EQ(tokenizer->TokenId("<extra_id>"), entries);
  EXPECT_EQ(tokenizer->TokenId("<new>"), entries + 1);
  EXPECT_EQ(tokenizer->TokenId("<newer>"), entries + 2);
  EXPECT_EQ(tokenizer->vocab_size(), entries + 3);
  EXPECT_EQ(tokenizer->TokenId("<s>"), 1);
  const std::optional<int32_t> a = tokenizer->TokenId("▁a");
  ASSERT_TRUE(a.has_value());
  EXPECT_LT(*a, entries);
  EXPECT_EQ(Encode(*tokenizer, "<new>x<newer>", false).front(), entries + 1);
  EXPECT_EQ(Encode(*tokenizer, "<new>x<newer>", false).back(), entries + 2);
  // A content repeated with other flags: which applies is not guessed.
  EXPECT_THAT(std::string(FromEdited("llama2_style",
                                     [](json& t) {
                                       t["added_tokens"].push_back(AddedToken("<s>", 1, false));
                                     })
                              .status()
                              .message()),
              HasSubstr("t.json added_tokens[4] repeats the content \"<s>\" of t.json "
                        "added_tokens[1] with other flags"));
}

// An id near 2^31 would make the id table 2^31 entries (before: bad_alloc).
TEST(Tokenizer, AnIdFarBeyondTheEntriesIsAnErrorNotAnAllocation) {
  EXPECT_THAT(std::string(FromEdited("llama2_style",
                                     [](json& t) { t["model"]["vocab"]["zzz"] = 2147483000; })
                              .status()
                              .message()),
              HasSubstr("t.json model.vocab[\"zzz\"] has the id 2147483000, but the vocabulary "
                        "has 3257 entries: ids must be below 7538"));
}

absl::Status EncodeWithSplitRegex(const std::string& regex, const std::string& text) {
  absl::StatusOr<Tokenizer> tokenizer = FromEdited("llama3_style", [&regex](json& t) {
    t["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = regex;
  });
  if (!tokenizer.ok()) return tokenizer.status();
  std::vector<int32_t> ids;
  return tokenizer->Encode(text, false, ids);
}

// A Split regex that backtracks a lot at every position (each under PCRE2's match limit), or
// looks ahead over the rest of the text at every position (which PCRE2 does not count), stops at
// its bound with an error naming the regex and the offset (before: minutes of work).
TEST(Tokenizer, ARegexThatBacktracksOrScansAtEveryPositionStopsAtItsBound) {
  std::string runs;
  for (int i = 0; i < 4000; ++i) runs += std::string(26, 'a') + " ";
  absl::Status status = EncodeWithSplitRegex("(a|aa)*c|\\s+|\\S", runs);
  EXPECT_EQ(status.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(std::string(status.message()),
              HasSubstr("the pre-tokenizer's t.json pre_tokenizer.pretokenizers[0] regex "
                        "\"(a|aa)*c|\\s+|\\S\" ran out of its work bound at byte "));
  EXPECT_THAT(std::string(status.message()), HasSubstr(" of a text of 108000 bytes (256 PCRE2 "));
  status = EncodeWithSplitRegex("a(?=[^x]*x)|\\S", std::string(400000, 'a'));
  EXPECT_EQ(status.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(std::string(status.message()),
              HasSubstr("regex \"a(?=[^x]*x)|\\S\" ran out of its work bound at byte "));
  // The same regexes on text they handle without backtracking or long scans are fine.
  EXPECT_TRUE(EncodeWithSplitRegex("(a|aa)*c|\\s+|\\S", "aac ab c").ok());
  EXPECT_TRUE(EncodeWithSplitRegex("a(?=[^x]*x)|\\S", "aaax bx" + std::string(5000, 'x')).ok());
}

// A regex's text in an error is cut to 80 characters: a megabyte pattern is not echoed.
TEST(Tokenizer, AHugeRegexIsNotEchoedWhole) {
  const std::string message(
      FromEdited("llama3_style",
                 [](json& t) {
                   t["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] =
                       "(" + std::string(1 << 20, 'a');
                 })
          .status()
          .message());
  EXPECT_THAT(message, HasSubstr("regex \"(aaaa"));
  EXPECT_THAT(message, HasSubstr("...\" (1048577 bytes) does not compile (PCRE2: missing closing"));
  EXPECT_LT(message.size(), 600u);
}

// The SentencePiece-style parts that are errors when they differ from what the family uses.
TEST(Tokenizer, UnsupportedSentencePiecePartsAreErrorsNamingThem) {
  const auto error = [](const std::function<void(json&)>& edit) {
    return std::string(FromEdited("llama2_style", edit).status().message());
  };
  EXPECT_THAT(error([](json& t) {
                t["normalizer"]["normalizers"][1]["pattern"] = {{"Regex", " +"}};
              }),
              HasSubstr("t.json normalizer.normalizers[1] is {"));
  EXPECT_THAT(error([](json& t) {
                t["pre_tokenizer"] = {
                    {"type", "Metaspace"}, {"replacement", "▁"}, {"prepend_scheme", "sometimes"}};
              }),
              HasSubstr("t.json pre_tokenizer.prepend_scheme is \"sometimes\""));
  EXPECT_THAT(error([](json& t) { t["decoder"]["decoders"][3]["content"] = "ab"; }),
              HasSubstr("t.json decoder.decoders[3].content is \"ab\", expected one character"));
  EXPECT_THAT(error([](json& t) {
                t["decoder"] = {{"type", "ByteLevel"}};
              }),
              HasSubstr("the pre_tokenizer has no ByteLevel step but the decoder has one"));
}

}  // namespace
}  // namespace kelvin::data
