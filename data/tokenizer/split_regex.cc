// PCRE2 compilation and the find-all loop of a split, with per-thread match data and JIT stack.
#include "data/tokenizer/split_regex.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "absl/strings/str_cat.h"
#include "data/tokenizer/utf8.h"

namespace kelvin::data {
namespace {

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

}  // namespace

absl::StatusOr<SplitRegex> SplitRegex::Compile(const std::string& pattern,
                                               const std::string& source) {
  int error = 0;
  PCRE2_SIZE error_offset = 0;
  pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                                   PCRE2_UTF | PCRE2_UCP, &error, &error_offset, nullptr);
  if (code == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(source, ": the regex \"", pattern,
                                                   "\" does not compile (PCRE2: ", ErrorText(error),
                                                   " at offset ", error_offset, ")"));
  }
  pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);  // where JIT is unavailable, the interpreter runs
  return SplitRegex(std::shared_ptr<pcre2_real_code_8>(code, pcre2_code_free));
}

absl::Status SplitRegex::Split(std::string_view text, std::vector<std::string_view>& pieces) const {
  MatchScratch& scratch = ThreadScratch();
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  size_t kept = 0;    // text[0, kept) is in `pieces`
  size_t offset = 0;  // where the next search starts
  while (offset < text.size()) {
    const int rc = pcre2_match(code_.get(), subject, text.size(), offset, PCRE2_NO_UTF_CHECK,
                               scratch.data, scratch.context);
    if (rc == PCRE2_ERROR_NOMATCH) break;
    if (rc < 0) {
      return absl::ResourceExhaustedError(
          absl::StrCat("the pre-tokenizer regex failed on a stretch of ", text.size() - offset,
                       " bytes (PCRE2: ", ErrorText(rc), ")"));
    }
    const PCRE2_SIZE* match = pcre2_get_ovector_pointer(scratch.data);
    const size_t begin = match[0], end = match[1];
    if (end == begin) {  // an empty match splits nothing: search again one character on
      offset = begin + Utf8Length(static_cast<uint8_t>(text[begin]));
      continue;
    }
    if (begin > kept) pieces.push_back(text.substr(kept, begin - kept));
    pieces.push_back(text.substr(begin, end - begin));
    kept = offset = end;
  }
  if (kept < text.size()) pieces.push_back(text.substr(kept));
  return absl::OkStatus();
}

}  // namespace kelvin::data
