// One question to the tokenizer per id, at load: a few milliseconds for a 128K vocabulary.
#include "launcher/commands/spellable_ids.h"

namespace kelvin::launcher {

std::vector<uint8_t> SpellableIds(const data::Tokenizer& tokenizer, int64_t vocab_size) {
  std::vector<uint8_t> spellable(static_cast<size_t>(vocab_size), 0);
  for (int64_t id = 0; id < vocab_size; ++id) {
    spellable[id] = tokenizer.HasToken(static_cast<int32_t>(id)) ? 1 : 0;
  }
  return spellable;
}

}  // namespace kelvin::launcher
