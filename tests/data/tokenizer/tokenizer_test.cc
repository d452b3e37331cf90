// Kelvin's tokenizer against Hugging Face tokenizers (tools/make_tokenizer_fixture.py): three
// byte-level BPE tokenizers give tokenizers' ids on the recorded lines and decode(encode(x)) == x;
// a megabyte-long pre-token encodes in linear-logarithmic time; every unsupported part of a
// tokenizer.json and text that is not UTF-8 is an error naming it. The other families, and what
// tokenizers does with gaps (bytes without tokens, ids beyond the tokenizer), are in
// tokenizer_family_test.cc.
#include "data/tokenizer/tokenizer.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>

#include "data/tokenizer/unicode_nfc.h"
#include "tests/data/tokenizer/tokenizer_fixtures.h"
#include "tests/testing/files.h"

namespace kelvin::data {
namespace {

using ::testing::HasSubstr;
using tokenizer_testing::Encode;
using tokenizer_testing::kFixtures;
using tokenizer_testing::Load;

// Tokenizers trained with Llama-3's, GPT-2's and Qwen2's (NFC) pre-tokenizers, on 610 recorded
// lines (prose in nine scripts, code, emoji and ZWJ sequences, whitespace runs, digits,
// contractions, special-token strings).
class TokenizerParity : public ::testing::TestWithParam<std::string> {};

TEST_P(TokenizerParity, IdsEqualHuggingFaceTokenizersAndDecodeInvertsEncode) {
  const Tokenizer tokenizer = Load(GetParam());
  std::ifstream cases(kFixtures + "cases.jsonl");
  std::string line;
  int64_t checked = 0, equal = 0;
  while (std::getline(cases, line)) {
    const nlohmann::json record = nlohmann::json::parse(line);
    const std::string text = record["text"];
    const std::vector<int32_t> expected = record[GetParam()].get<std::vector<int32_t>>();
    const std::vector<int32_t> ids = Encode(tokenizer, text);
    equal += ids == expected;
    EXPECT_EQ(ids, expected) << "line " << checked + 1 << ": " << nlohmann::json(text).dump();
    absl::StatusOr<std::string> decoded =
        tokenizer.Decode(Encode(tokenizer, text, /*add_special_tokens=*/false), false);
    ASSERT_TRUE(decoded.ok()) << decoded.status();
    // decode(encode(x)) is x, in NFC where the tokenizer normalizes.
    EXPECT_EQ(*decoded, GetParam() == "qwen2_style" ? NfcNormalize(text) : text)
        << "line " << checked + 1;
    ++checked;
  }
  EXPECT_EQ(checked, 610);
  EXPECT_EQ(equal, checked);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, TokenizerParity,
                         ::testing::Values("llama3_style", "gpt2_style", "qwen2_style"));

TEST(Nfc, ComposesReordersAndLeavesAsciiAlone) {
  EXPECT_EQ(NfcUnicodeVersion(), "14.0.0");
  EXPECT_EQ(NfcNormalize("plain ascii 123"), "plain ascii 123");
  EXPECT_EQ(NfcNormalize("e\u0301t\u00e9"), "\u00e9t\u00e9");
  EXPECT_EQ(NfcNormalize("\u212b"), "\u00c5");              // a singleton decomposition
  EXPECT_EQ(NfcNormalize("\u1100\u1161\u11a8"), "\uac01");  // Hangul L V T
  EXPECT_EQ(NfcNormalize("o\u0323\u0302"), "\u1ed9");       // marks in either order
  EXPECT_EQ(NfcNormalize("o\u0302\u0323"), "\u1ed9");
  EXPECT_EQ(NfcNormalize("\u0958"), "\u0915\u093c");      // a composition exclusion
  EXPECT_EQ(NfcNormalize("\u0301start"), "\u0301start");  // a mark with no starter
  EXPECT_EQ(NfcNormalize(""), "");
}

TEST(Tokenizer, SpecialTokensTemplateAndTokenizerConfig) {
  const Tokenizer llama = Load("llama3_style");
  ASSERT_TRUE(llama.bos_id().has_value() && llama.eos_id().has_value());
  EXPECT_EQ(llama.bos_id(), llama.TokenId("<|begin_of_text|>"));
  EXPECT_EQ(llama.eos_id(), llama.TokenId("<|end_of_text|>"));
  EXPECT_EQ(llama.vocab_size(), 4104);
  const std::vector<int32_t> ids = Encode(llama, "hi<|eot_id|>");
  ASSERT_GE(ids.size(), 3u);
  EXPECT_EQ(ids.front(), *llama.bos_id());  // the template's BOS
  EXPECT_EQ(ids.back(), llama.TokenId("<|eot_id|>"));
  absl::StatusOr<std::string> skipped = llama.Decode(ids, /*skip_special_tokens=*/true);
  ASSERT_TRUE(skipped.ok());
  EXPECT_EQ(*skipped, "hi");
  const Tokenizer gpt2 = Load("gpt2_style");
  EXPECT_EQ(gpt2.eos_id(), gpt2.TokenId("<|endoftext|>"));
  EXPECT_NE(Encode(gpt2, "hi").front(), *gpt2.eos_id());  // no template: no BOS
}

TEST(Tokenizer, AMegabytePreTokenEncodesAndDecodes) {
  const Tokenizer tokenizer = Load("llama3_style");
  // tokenizers gives 10, 16 and 62 ids for 1000 of these characters: the vocabulary merges them.
  for (const std::string& text :
       {std::string(1 << 20, 'x'), std::string(1 << 20, ' '), std::string(1 << 20, '\n')}) {
    const std::vector<int32_t> ids = Encode(tokenizer, text, false);
    EXPECT_LT(ids.size(), text.size() / 10);
    absl::StatusOr<std::string> decoded = tokenizer.Decode(ids, false);
    ASSERT_TRUE(decoded.ok());
    EXPECT_EQ(*decoded, text);
  }
}

TEST(Tokenizer, TextThatIsNotUtf8IsAnError) {
  const Tokenizer tokenizer = Load("gpt2_style");
  std::vector<int32_t> ids;
  EXPECT_THAT(std::string(tokenizer.Encode("ok \xC3\x28 no", true, ids).message()),
              HasSubstr("not valid UTF-8 at byte 3 (of 8)"));
  EXPECT_THAT(std::string(tokenizer.Encode("\xED\xA0\x80", true, ids).message()),
              HasSubstr("not valid UTF-8 at byte 0"));  // a surrogate
}

// The fixture's tokenizer.json with `edit` applied to its JSON.
std::string Edited(const std::function<void(nlohmann::json&)>& edit) {
  nlohmann::json root =
      nlohmann::json::parse(testing::FileBytes(kFixtures + "llama3_style/tokenizer.json"));
  edit(root);
  return root.dump();
}

std::string LoadError(const std::function<void(nlohmann::json&)>& edit) {
  return std::string(Tokenizer::FromJson(Edited(edit), "t.json").status().message());
}

TEST(Tokenizer, UnsupportedPartsAreErrorsNamingThem) {
  using nlohmann::json;
  EXPECT_THAT(LoadError([](json& t) {
                t["normalizer"] = {{"type", "NFKC"}};
              }),
              HasSubstr("t.json normalizer is {\"type\":\"NFKC\"}, which is not supported"));
  EXPECT_THAT(LoadError([](json& t) { t["added_tokens"][0]["single_word"] = true; }),
              HasSubstr("t.json added_tokens[0].single_word is true, which is not supported"));
  EXPECT_THAT(LoadError([](json& t) { t["model"]["type"] = "WordPiece"; }),
              HasSubstr("t.json model.type is \"WordPiece\", which is not supported"));
  EXPECT_THAT(LoadError([](json& t) { t["model"]["continuing_subword_prefix"] = "##"; }),
              HasSubstr("model.continuing_subword_prefix is \"##\""));
  EXPECT_THAT(
      LoadError([](json& t) { t["pre_tokenizer"]["pretokenizers"][1]["add_prefix_space"] = true; }),
      HasSubstr("pre_tokenizer.pretokenizers[1].add_prefix_space is true"));
  EXPECT_THAT(LoadError([](json& t) {
                t["pre_tokenizer"]["pretokenizers"][0]["behavior"] = "MergedWithPrevious";
              }),
              HasSubstr("pretokenizers[0].behavior is \"MergedWithPrevious\""));
  EXPECT_THAT(LoadError([](json& t) {
                t["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = "(unclosed";
              }),
              HasSubstr("does not compile (PCRE2: missing closing parenthesis"));
  EXPECT_THAT(LoadError([](json& t) { t["pre_tokenizer"] = nullptr; }),
              HasSubstr("t.json: the pre_tokenizer has no ByteLevel step but the decoder has one"));
  EXPECT_THAT(LoadError([](json& t) {
                t["decoder"] = {{"type", "WordPiece"}};
              }),
              HasSubstr("t.json decoder is {\"type\":\"WordPiece\"}"));
  // An added token's id beyond tokenizers' u32 is refused, as tokenizers refuses the file.
  EXPECT_THAT(LoadError([](json& t) { t["added_tokens"][0]["id"] = 4294967296; }),
              HasSubstr("t.json added_tokens[0].id is 4294967296, expected an id in [0, 2^32)"));
  EXPECT_THAT(LoadError([](json& t) { t["added_tokens"][1]["id"] = -1; }),
              HasSubstr("t.json added_tokens[1].id is -1, expected an id in [0, 2^32)"));
  EXPECT_THAT(LoadError([](json& t) { t["added_tokens"][0]["lstrip"] = "yes"; }),
              HasSubstr("added_tokens[0].lstrip is \"yes\", expected true or false"));
  EXPECT_THAT(LoadError([](json& t) {
                t["pre_tokenizer"] = {{"type", "Whitespace"}};
              }),
              HasSubstr("t.json pre_tokenizer.type is \"Whitespace\", which is not supported"));
  EXPECT_THAT(LoadError([](json& t) { t["model"]["unk_token"] = "<nope>"; }),
              HasSubstr("t.json model.unk_token \"<nope>\" is not in model.vocab"));
  EXPECT_THAT(LoadError([](json& t) { t["model"]["merges"][0] = "x"; }),
              HasSubstr("model.merges[0] is \"x\", expected \"left right\""));
  EXPECT_THAT(LoadError([](json& t) {
                t["post_processor"] = {{"type", "BertProcessing"}};
              }),
              HasSubstr("post_processor.type is \"BertProcessing\""));
  EXPECT_THAT(std::string(Tokenizer::FromDirectory("/nonexistent").status().message()),
              HasSubstr("cannot read /nonexistent/tokenizer.json"));
}

}  // namespace
}  // namespace kelvin::data
