// One random text edit of a JSON document, for the fuzz tests of Kelvin's JSON readers
// (config.json, checkpoint.json): a bit flipped, a digit changed, a number made a special literal
// (twice as likely), the text truncated, an entry put first (a duplicate key), bad UTF-8 in a
// string, deep nesting or one wrapping object, a byte inserted or deleted. What it did is
// appended to `edits`, for the failure message.
#pragma once

#include <algorithm>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"

namespace kelvin::testing {

// `numbers`: the job's own literals a number may become (beside out-of-range ones); `first_entry`:
// `"key": value,` to put first in the top object; `wrapper_key`: the key of the object a wrapping
// edit puts the document in.
inline void MutateJsonText(std::string& text, std::vector<std::string>& edits, std::mt19937_64& rng,
                           const std::vector<std::string>& numbers, const std::string& first_entry,
                           const std::string& wrapper_key) {
  if (text.empty()) return;
  const auto pick = [&rng](size_t lo, size_t hi) {  // uniform in [lo, hi]
    return std::uniform_int_distribution<size_t>(lo, hi)(rng);
  };
  const size_t at = pick(0, text.size() - 1);
  switch (pick(0, 8)) {
    case 0:
      text[at] = static_cast<char>(text[at] ^ (1 << pick(0, 7)));
      edits.push_back(absl::StrCat("flip a bit of byte ", at));
      break;
    case 1:
      for (size_t tries = 0; tries < 64; ++tries) {
        const size_t d = pick(0, text.size() - 1);
        if (text[d] >= '0' && text[d] <= '9') {
          text[d] = static_cast<char>('0' + pick(0, 9));
          edits.push_back(absl::StrCat("digit at ", d, " = ", text.substr(d, 1)));
          break;
        }
      }
      break;
    case 2:
    case 3: {  // the number at or after `at` (else the first) becomes a special literal
      size_t begin = text.find_first_of("-0123456789", at);
      if (begin == std::string::npos) begin = text.find_first_of("-0123456789");
      if (begin == std::string::npos) break;
      const size_t end = std::min(text.find_first_not_of("-+.eE0123456789", begin), text.size());
      // Beyond an int64, a uint64 or a double, not JSON (NaN, Infinity), or -0, 0, 1e-400.
      static const std::vector<std::string> beyond = {"1e400",
                                                      "-1e400",
                                                      "18446744073709551616",
                                                      "18446744073709551615",
                                                      "9223372036854775808",
                                                      "9223372036854775807",
                                                      "-9223372036854775809",
                                                      "NaN",
                                                      "Infinity",
                                                      "-Infinity",
                                                      "1e-400",
                                                      "-0",
                                                      "0"};
      const size_t choice = pick(0, beyond.size() + numbers.size() - 1);
      const std::string& literal =
          choice < beyond.size() ? beyond[choice] : numbers[choice - beyond.size()];
      edits.push_back(
          absl::StrCat("number ", text.substr(begin, end - begin), " at ", begin, " = ", literal));
      text.replace(begin, end - begin, literal);
      break;
    }
    case 4:
      text.resize(at);
      edits.push_back(absl::StrCat("truncate to ", at, " bytes"));
      break;
    case 5: {
      const size_t open = text.find('{');
      if (open == std::string::npos) break;
      text.insert(open + 1, first_entry);
      edits.push_back(absl::StrCat("insert first ", first_entry.substr(0, 80)));
      break;
    }
    case 6: {  // bad UTF-8 (or a bad escape) inside a string
      static const std::vector<std::string> bad = {
          "\xff", "\xc3",    "\xc0\xaf", "\xed\xa0\x80", "\xf4\x90\x80\x80",
          "\x01", "\\ud800", "\\u00"};
      const size_t quote = text.find('"', at);
      if (quote == std::string::npos) break;
      const std::string& bytes = bad[pick(0, bad.size() - 1)];
      text.insert(quote + 1, bytes);
      edits.push_back(absl::StrCat("insert bad UTF-8 (", bytes.size(), " bytes) at ", quote + 1));
      break;
    }
    case 7: {
      const size_t depth = pick(0, 1) ? 1 : pick(60, 5000);
      text = pick(0, 1) ? std::string(depth, '[') + text + std::string(depth, ']')
                        : absl::StrCat("{\"", wrapper_key, "\": ", text, "}");
      edits.push_back(absl::StrCat("nest (", depth, " levels or one object)"));
      break;
    }
    default:
      if (pick(0, 1)) {
        text.insert(at, 1, static_cast<char>(pick(0, 255)));
        edits.push_back(absl::StrCat("insert a byte at ", at));
      } else {
        text.erase(at, 1);
        edits.push_back(absl::StrCat("delete byte ", at));
      }
      break;
  }
}

}  // namespace kelvin::testing
