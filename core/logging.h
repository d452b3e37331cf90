// Rank-aware logging: KLOG(INFO) << ...; lines carry severity, rank, time and file:line.
// Debian's abseil (20220623) has no absl/log, hence this small header.
#pragma once

#include <sstream>
#include <string>

namespace kelvin {

enum class LogSeverity { kInfo = 0, kWarning = 1, kError = 2, kFatal = 3 };

// The rank printed in every log and check message. Until SetLogRank is called (by the process
// grid, from MPI) it is read from the launcher's environment: OMPI_COMM_WORLD_RANK, PMIX_RANK,
// SLURM_PROCID, RANK; -1 when none is set.
int LogRank();
void SetLogRank(int rank);

// Messages below this severity are dropped. Default: KELVIN_LOG_LEVEL (info|warning|error) or info.
void SetMinLogSeverity(LogSeverity severity);
bool ShouldLog(LogSeverity severity);

// "[I r0 14:38:00.123 trainer.cc:42] " (rank shown as r? when unknown).
std::string LogPrefix(LogSeverity severity, const char* file, int line);

namespace internal {

class LogMessage {
 public:
  LogMessage(const char* file, int line, LogSeverity severity);
  ~LogMessage();  // writes the line to stderr; kFatal aborts afterwards
  std::ostream& stream() { return stream_; }

 private:
  LogSeverity severity_;
  std::ostringstream stream_;
};

// Lets `cond ? (void)0 : Voidify() & stream` compile as a statement.
struct Voidify {
  void operator&(std::ostream&) {}
};

}  // namespace internal
}  // namespace kelvin

#define KELVIN_LOG_SEVERITY_INFO ::kelvin::LogSeverity::kInfo
#define KELVIN_LOG_SEVERITY_WARNING ::kelvin::LogSeverity::kWarning
#define KELVIN_LOG_SEVERITY_ERROR ::kelvin::LogSeverity::kError
#define KELVIN_LOG_SEVERITY_FATAL ::kelvin::LogSeverity::kFatal

// KLOG(INFO|WARNING|ERROR|FATAL) << "message";
#define KLOG(severity)                                                                         \
  !::kelvin::ShouldLog(KELVIN_LOG_SEVERITY_##severity)                                         \
      ? (void)0                                                                                \
      : ::kelvin::internal::Voidify() &                                                        \
            ::kelvin::internal::LogMessage(__FILE__, __LINE__, KELVIN_LOG_SEVERITY_##severity) \
                .stream()

// Logs only on rank 0 (or when the rank is unknown): progress lines, resolved configs.
#define KLOG_RANK0(severity) (::kelvin::LogRank() > 0) ? (void)0 : KLOG(severity)
