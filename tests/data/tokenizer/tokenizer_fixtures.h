// The recorded tokenizers the tokenizer tests load (tests/fixtures/tokenizer/, written by
// tools/make_tokenizer_fixture.py and tools/make_tokenizer_family_fixtures.py), and an encode that
// fails the test when it returns an error.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "core/check.h"
#include "data/tokenizer/tokenizer.h"

namespace kelvin::data::tokenizer_testing {

inline const std::string kFixtures = std::string(KELVIN_FIXTURES_DIR) + "/tokenizer/";

// The tokenizer of the fixture directory `name` (e.g. "llama3_style"); a load error is fatal.
inline Tokenizer Load(const std::string& name) {
  absl::StatusOr<Tokenizer> tokenizer = Tokenizer::FromDirectory(kFixtures + name);
  KELVIN_CHECK(tokenizer.ok()) << tokenizer.status();
  return *std::move(tokenizer);
}

inline std::vector<int32_t> Encode(const Tokenizer& tokenizer, const std::string& text,
                                   bool add_special_tokens = true) {
  std::vector<int32_t> ids;
  const absl::Status encoded = tokenizer.Encode(text, add_special_tokens, ids);
  EXPECT_TRUE(encoded.ok()) << encoded;
  return ids;
}

}  // namespace kelvin::data::tokenizer_testing
