// PCRE2 compilation (anchored: the find-all loop tries each start position itself, so that it
// can bound the work of each) and the find-all loop, with per-thread match data and JIT stack.
#include "data/tokenizer/split_regex.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <time.h>

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "data/tokenizer/utf8.h"

namespace kelvin::data {
namespace {

// PCRE2's match limit for one start position at first; doubled while a match needs more.
constexpr uint32_t kFirstPositionLimit = 64;
// The CPU clock is read every this many matches (each bounded by its limit and the text).
constexpr uint32_t kMatchesPerClockRead = 256;

double ThreadCpuSeconds() {
  timespec now{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &now);
  return static_cast<double>(now.tv_sec) + 1e-9 * static_cast<double>(now.tv_nsec);
}

std::string ErrorText(int code) {
  PCRE2_UCHAR buffer[256];
  pcre2_get_error_message(code, buffer, sizeof(buffer));
  return reinterpret_cast<const char*>(buffer);
}

// What one thread's matches reuse: the match data and a JIT stack larger than PCRE2's 32 KB
// default, so long runs of whitespace or letters (one match each) do not exhaust it.
struct MatchScratch {
  static constexpr uint32_t kOvectorPairs = 32;
  static constexpr size_t kJitStackBytes = size_t{8} << 20;
  pcre2_match_data* data = pcre2_match_data_create(kOvectorPairs, nullptr);
  pcre2_match_context* context = pcre2_match_context_create(nullptr);
  pcre2_jit_stack* stack = pcre2_jit_stack_create(32 << 10, kJitStackBytes, nullptr);

  MatchScratch() { pcre2_jit_stack_assign(context, nullptr, stack); }
  ~MatchScratch() {
    pcre2_jit_stack_free(stack);
    pcre2_match_context_free(context);
    pcre2_match_data_free(data);
  }
  MatchScratch(const MatchScratch&) = delete;
  MatchScratch& operator=(const MatchScratch&) = delete;
};

MatchScratch& ThreadScratch() {
  thread_local MatchScratch scratch;
  return scratch;
}

// `pattern` for messages: its first 80 characters (whole UTF-8 sequences), and its length.
std::string Shown(const std::string& pattern) {
  constexpr size_t kShownBytes = 80;
  if (pattern.size() <= kShownBytes) return absl::StrCat("\"", pattern, "\"");
  size_t cut = kShownBytes;
  while (cut > 0 && (static_cast<uint8_t>(pattern[cut]) & 0xC0) == 0x80) --cut;
  return absl::StrCat("\"", pattern.substr(0, cut), "...\" (", pattern.size(), " bytes)");
}

}  // namespace

absl::StatusOr<SplitRegex> SplitRegex::Compile(const std::string& pattern,
                                               const std::string& source) {
  int error = 0;
  PCRE2_SIZE error_offset = 0;
  const std::string name = absl::StrCat(source, " regex ", Shown(pattern));
  pcre2_code* code =
      pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                    PCRE2_UTF | PCRE2_UCP | PCRE2_ANCHORED, &error, &error_offset, nullptr);
  if (code == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(
        name, " does not compile (PCRE2: ", ErrorText(error), " at offset ", error_offset, ")"));
  }
  pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);  // where JIT is unavailable, the interpreter runs
  return SplitRegex(std::shared_ptr<pcre2_real_code_8>(code, pcre2_code_free), name);
}

absl::Status SplitRegex::Split(std::string_view text, std::vector<std::string_view>& pieces) const {
  MatchScratch& scratch = ThreadScratch();
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  const uint64_t step_budget = kSplitStepsBase + kSplitStepsPerByte * text.size();
  const double cpu_budget =
      kSplitCpuSecondsBase + kSplitCpuSecondsPerByte * static_cast<double>(text.size());
  const double cpu_start = text.size() > 4096 ? ThreadCpuSeconds() : 0;  // short texts are cheap
  uint64_t spent = 0;  // the limits given to PCRE2 so far: at least the steps it took
  uint32_t limit = kFirstPositionLimit;
  size_t kept = 0;  // text[0, kept) is in `pieces`
  for (size_t at = 0, matches = 0; at < text.size(); ++matches) {
    if (spent + limit > step_budget ||
        (matches % kMatchesPerClockRead == kMatchesPerClockRead - 1 && text.size() > 4096 &&
         ThreadCpuSeconds() - cpu_start > cpu_budget)) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "the pre-tokenizer's ", name_, " ran out of its work bound at byte ", at,
          " of a text of ", text.size(), " bytes (", kSplitStepsPerByte, " PCRE2 steps and ",
          kSplitCpuSecondsPerByte * 1e6, " us of CPU per byte): it backtracks or looks ahead too ",
          "much to tokenize in bounded time; simplify the regex"));
    }
    pcre2_set_match_limit(scratch.context, limit);
    spent += limit;
    const int rc = pcre2_match(code_.get(), subject, text.size(), at, PCRE2_NO_UTF_CHECK,
                               scratch.data, scratch.context);
    if (rc == PCRE2_ERROR_MATCHLIMIT && limit <= UINT32_MAX / 2) {
      limit *= 2;  // this position needs more: try it again
      continue;
    }
    limit = kFirstPositionLimit;
    if (rc == PCRE2_ERROR_NOMATCH) {
      at += Utf8Length(static_cast<uint8_t>(text[at]));
      continue;
    }
    if (rc < 0) {
      return absl::ResourceExhaustedError(
          absl::StrCat("the pre-tokenizer's ", name_, " failed at byte ", at, " of a text of ",
                       text.size(), " bytes (PCRE2: ", ErrorText(rc), ")"));
    }
    const PCRE2_SIZE* match = pcre2_get_ovector_pointer(scratch.data);
    const size_t begin = match[0], end = match[1];
    if (end <= begin || begin < kept) {  // an empty match splits nothing: one character on
      at += Utf8Length(static_cast<uint8_t>(text[at]));
      continue;
    }
    if (begin > kept) pieces.push_back(text.substr(kept, begin - kept));
    pieces.push_back(text.substr(begin, end - begin));
    kept = at = end;
  }
  if (kept < text.size()) pieces.push_back(text.substr(kept));
  return absl::OkStatus();
}

}  // namespace kelvin::data
