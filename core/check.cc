// Formatting and abort path of the check macros.
#include "core/check.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "core/logging.h"

namespace kelvin::internal {
namespace {

// __FILE__ is absolute, or relative to the object's build folder when ccache shares one cache
// between build trees (cmake/KelvinCompilerCache.cmake); the latter is shown from the source root.
const char* WithoutParentSteps(const char* file) {
  while (std::strncmp(file, "../", 3) == 0) file += 3;
  return file;
}

}  // namespace

std::string FormatCheckFailure(const char* file, int line, const char* what,
                               const std::string& message) {
  std::string text = LogPrefix(LogSeverity::kFatal, file, line);
  const int rank = LogRank();
  text += "Kelvin check failed on rank " + (rank >= 0 ? std::to_string(rank) : std::string("?"));
  text += " at " + std::string(WithoutParentSteps(file)) + ":" + std::to_string(line);
  if (what != nullptr) text += ": " + std::string(what);
  if (!message.empty()) text += (what != nullptr ? " " : ": ") + message;
  return text;
}

CheckFailure::CheckFailure(const char* file, int line, const char* what) {
  // The header is written at destruction, once the streamed message is complete.
  header_file_ = file;
  header_line_ = line;
  header_what_ = what;
}

CheckFailure::~CheckFailure() {
  const std::string text =
      FormatCheckFailure(header_file_, header_line_, header_what_, stream_.str()) + "\n";
  std::fwrite(text.data(), 1, text.size(), stderr);
  std::fflush(stderr);
  std::abort();
}

}  // namespace kelvin::internal
