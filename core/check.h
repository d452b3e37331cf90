// Check macros for programmer errors: on failure they print file:line, the rank, the failed
// condition (with operand values for the _EQ/_LT forms) and a message, then abort.
// User errors (configs, files, launch environment) never use these: they return absl::Status.
#pragma once

#include <sstream>
#include <string>
#include <utility>

namespace kelvin::internal {

class CheckFailure {
 public:
  // `what` is the failed expression, e.g. "x.ndim() == 2", or nullptr for KELVIN_FATAL().
  CheckFailure(const char* file, int line, const char* what);
  [[noreturn]] ~CheckFailure();
  std::ostream& stream() { return stream_; }

 private:
  const char* header_file_;
  int header_line_;
  const char* header_what_;
  std::ostringstream stream_;
};

// The full message of a failed check, without aborting (tested directly).
std::string FormatCheckFailure(const char* file, int line, const char* what,
                               const std::string& message);

template <typename A, typename B>
std::string FormatOperands(const A& a, const B& b) {
  std::ostringstream out;
  out << "(" << a << " vs " << b << ") ";
  return out.str();
}

}  // namespace kelvin::internal

#define KELVIN_CHECK(condition) \
  if (condition) {              \
  } else /* NOLINT */           \
    ::kelvin::internal::CheckFailure(__FILE__, __LINE__, #condition).stream()

#define KELVIN_CHECK_OP_(a, b, op)                                                   \
  if (const auto kelvin_check_operands_ = std::make_pair((a), (b));                  \
      kelvin_check_operands_.first op kelvin_check_operands_.second) {               \
  } else /* NOLINT */                                                                \
    ::kelvin::internal::CheckFailure(__FILE__, __LINE__, #a " " #op " " #b).stream() \
        << ::kelvin::internal::FormatOperands(kelvin_check_operands_.first,          \
                                              kelvin_check_operands_.second)

#define KELVIN_CHECK_EQ(a, b) KELVIN_CHECK_OP_(a, b, ==)
#define KELVIN_CHECK_NE(a, b) KELVIN_CHECK_OP_(a, b, !=)
#define KELVIN_CHECK_LT(a, b) KELVIN_CHECK_OP_(a, b, <)
#define KELVIN_CHECK_LE(a, b) KELVIN_CHECK_OP_(a, b, <=)
#define KELVIN_CHECK_GT(a, b) KELVIN_CHECK_OP_(a, b, >)
#define KELVIN_CHECK_GE(a, b) KELVIN_CHECK_OP_(a, b, >=)

// Unconditional failure: KELVIN_FATAL() << "unsupported dtype " << name;
#define KELVIN_FATAL() ::kelvin::internal::CheckFailure(__FILE__, __LINE__, nullptr).stream()
