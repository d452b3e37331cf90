// Synthetic long-context tasks beyond the single passkey, in the manner of RULER: made as text (so
// any model's tokenizer, or the passkey task's bytes, reads them), hidden in the passkey filler,
// and scored by the answer the model generates. Multi-key: four names each with a 5-digit number,
// one name asked. Multi-value: four numbers of one name, all asked. Variable tracking: a chain of
// four assignments from one number (VAR A = n, VAR B = VAR A, ...) beside a decoy chain, every
// name holding the number asked. Sample i of seed s is drawn from mt19937_64(MixSeed(s, i)).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace kelvin::data {

enum class RetrievalTask { kPasskey, kMultiKey, kMultiValue, kVariableTracking };

// "passkey", "multikey", "multivalue", "vartrack".
std::string_view RetrievalTaskName(RetrievalTask task);
// The task of that name; an error names the value and the names there are.
absl::StatusOr<RetrievalTask> ParseRetrievalTask(std::string_view name);

struct RetrievalSample {
  std::string prompt;                // the context and the question; the answer follows it
  std::vector<std::string> answers;  // what the answer must hold, each as a whole word
  double depth = 0;                  // where the asked needle (the chain's start) sits, in [0, 1]
};

// Sample `index` of `seed` of a task other than kPasskey (whose samples are the passkey task's,
// data/tasks/passkey_task.h), with at most `filler_budget` >= 0 bytes of filler (whole sentences)
// and the asked needle at the filler boundary nearest `depth`. Every sample of a task has the same
// bytes besides the filler (names and numbers have fixed lengths).
RetrievalSample MakeRetrievalSample(RetrievalTask task, uint64_t seed, int64_t index,
                                    int64_t filler_budget, double depth);

// The bytes of a full answer (the answers joined by ", " and a full stop): what generation needs
// room for.
int64_t RetrievalAnswerBytes(RetrievalTask task);

// The fraction of `answers` that `generated` holds, each as a whole word (not inside a longer run
// of letters or digits), as RULER scores all-of answers.
double ScoreRetrievalAnswer(std::string_view generated, const std::vector<std::string>& answers);

}  // namespace kelvin::data
