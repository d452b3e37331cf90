// Which of a model's token ids its tokenizer can spell: a model whose vocab_size exceeds the
// tokenizer's ids (embeddings padded to a round size, as Qwen2.5's are) can sample an id that has
// no text, and generation for text output leaves those out (models::SamplingOptions::allowed).
#pragma once

#include <cstdint>
#include <vector>

#include "data/tokenizer/tokenizer.h"

namespace kelvin::launcher {

// [vocab_size]: 1 where `tokenizer` has a token of the id (Tokenizer::HasToken), 0 where it has
// none (beyond its ids, or a gap in them).
std::vector<uint8_t> SpellableIds(const data::Tokenizer& tokenizer, int64_t vocab_size);

}  // namespace kelvin::launcher
