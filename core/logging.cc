// Log line formatting, rank discovery from the environment, and severity filtering.
#include "core/logging.h"

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <string_view>

namespace kelvin {
namespace {

constexpr int kRankUnset = -2;
std::atomic<int> g_rank{kRankUnset};
std::atomic<int> g_min_severity{-1};

int RankFromEnvironment() {
  for (const char* name : {"OMPI_COMM_WORLD_RANK", "PMIX_RANK", "SLURM_PROCID", "RANK"}) {
    if (const char* value = std::getenv(name); value != nullptr && *value != '\0') {
      char* end = nullptr;
      const long rank = std::strtol(value, &end, 10);
      if (end != value && *end == '\0' && rank >= 0) return static_cast<int>(rank);
    }
  }
  return -1;
}

int SeverityFromEnvironment() {
  const char* level = std::getenv("KELVIN_LOG_LEVEL");
  if (level == nullptr) return 0;
  const std::string_view v(level);
  if (v == "warning") return 1;
  if (v == "error") return 2;
  return 0;
}

const char* Basename(const char* path) {
  const char* slash = std::strrchr(path, '/');
  return slash == nullptr ? path : slash + 1;
}

}  // namespace

int LogRank() {
  int rank = g_rank.load(std::memory_order_relaxed);
  if (rank == kRankUnset) {
    rank = RankFromEnvironment();
    g_rank.store(rank, std::memory_order_relaxed);
  }
  return rank;
}

void SetLogRank(int rank) { g_rank.store(rank, std::memory_order_relaxed); }

void SetMinLogSeverity(LogSeverity severity) {
  g_min_severity.store(static_cast<int>(severity), std::memory_order_relaxed);
}

bool ShouldLog(LogSeverity severity) {
  int min = g_min_severity.load(std::memory_order_relaxed);
  if (min < 0) {
    min = SeverityFromEnvironment();
    g_min_severity.store(min, std::memory_order_relaxed);
  }
  return static_cast<int>(severity) >= min;
}

std::string LogPrefix(LogSeverity severity, const char* file, int line) {
  static constexpr char kLetters[] = {'I', 'W', 'E', 'F'};
  const auto now = std::chrono::system_clock::now();
  const std::time_t seconds = std::chrono::system_clock::to_time_t(now);
  const int millis = static_cast<int>(
      std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch()).count() % 1000);
  std::tm local{};
  localtime_r(&seconds, &local);
  const int rank = LogRank();
  char rank_text[16];
  if (rank >= 0) {
    std::snprintf(rank_text, sizeof(rank_text), "r%d", rank);
  } else {
    std::snprintf(rank_text, sizeof(rank_text), "r?");
  }
  char buffer[256];
  std::snprintf(buffer, sizeof(buffer), "[%c %s %02d:%02d:%02d.%03d %s:%d] ",
                kLetters[static_cast<int>(severity)], rank_text, local.tm_hour, local.tm_min,
                local.tm_sec, millis, Basename(file), line);
  return buffer;
}

namespace internal {

LogMessage::LogMessage(const char* file, int line, LogSeverity severity) : severity_(severity) {
  stream_ << LogPrefix(severity, file, line);
}

LogMessage::~LogMessage() {
  stream_ << '\n';
  const std::string text = stream_.str();
  std::fwrite(text.data(), 1, text.size(), stderr);
  std::fflush(stderr);
  if (severity_ == LogSeverity::kFatal) std::abort();
}

}  // namespace internal
}  // namespace kelvin
