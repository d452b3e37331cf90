// The run's scalars as JSON Lines (see metrics_file.h).
#include "training/metrics/metrics_file.h"

#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <system_error>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "core/io/atomic_file.h"
#include "core/io/regular_file.h"
#include "core/status.h"
#include "nlohmann/json.hpp"

namespace kelvin::training {
namespace {

namespace fs = std::filesystem;

// The lines of `path` whose record's "step" is at most `steps` (whole JSON objects only).
absl::StatusOr<std::string> KeptRecords(const fs::path& path, int64_t steps) {
  constexpr uint64_t kMaxMetricsBytes = uint64_t{1} << 34;  // 16 GiB: a run's lines, never more
  const absl::StatusOr<std::string> text =
      io::ReadRegularFile(path.string(), "logging.metrics_file", kMaxMetricsBytes);
  if (!text.ok()) return text.status();
  std::string kept;
  for (const absl::string_view line : absl::StrSplit(*text, '\n')) {
    const nlohmann::json record =
        nlohmann::json::parse(line.begin(), line.end(), nullptr, /*allow_exceptions=*/false);
    if (!record.is_object()) continue;  // a line a crash cut short
    const auto step = record.find("step");
    if (step != record.end() && step->is_number_integer() && step->get<int64_t>() <= steps) {
      absl::StrAppend(&kept, line, "\n");
    }
  }
  return kept;
}

}  // namespace

absl::Status CheckIsMetricsFile(const fs::path& path) {
  std::error_code fs_error;
  if (!fs::is_regular_file(path, fs_error)) return absl::OkStatus();  // fopen reports the rest
  std::ifstream in(path, std::ios::binary);
  std::string start(64, '\0');  // enough for the record's opening {"step"
  in.read(start.data(), static_cast<std::streamsize>(start.size()));
  start.resize(static_cast<size_t>(in.gcount()));
  absl::string_view rest = absl::StripLeadingAsciiWhitespace(start);
  if (rest.empty()) return absl::OkStatus();
  if (absl::ConsumePrefix(&rest, "{") &&
      absl::StartsWith(absl::StripLeadingAsciiWhitespace(rest), "\"step\"")) {
    return absl::OkStatus();
  }
  return absl::FailedPreconditionError(absl::StrCat(
      "logging.metrics_file=\"", path.string(),
      "\" exists and is not a metrics file (its first line is no {\"step\": ...} record): a run "
      "empties or rewrites it, so give the path of a new file or of an earlier run's metrics"));
}

absl::StatusOr<MetricsFile> MetricsFile::Open(const std::string& path, int64_t resumed_steps) {
  const auto error = [&](absl::string_view what) {
    return absl::PermissionDeniedError(absl::StrCat("logging.metrics_file=\"", path, "\": cannot ",
                                                    what, ": ", std::strerror(errno)));
  };
  std::error_code fs_error;
  const fs::path parent = fs::path(path).parent_path();
  if (!parent.empty()) fs::create_directories(parent, fs_error);  // fopen below reports a failure
  KELVIN_RETURN_IF_ERROR(CheckIsMetricsFile(path));
  if (resumed_steps > 0 && fs::exists(path, fs_error)) {  // the kept records replace it whole
    KELVIN_ASSIGN_OR_RETURN(const std::string kept, KeptRecords(path, resumed_steps));
    const absl::Status rewritten = io::WriteFileAtomically(path, {kept});
    if (!rewritten.ok()) {
      return absl::Status(rewritten.code(),
                          absl::StrCat("logging.metrics_file: ", rewritten.message()));
    }
  }
  std::FILE* file = std::fopen(path.c_str(), resumed_steps > 0 ? "a" : "w");
  if (file == nullptr) return error("open it for writing");
  return MetricsFile(path, file);
}

absl::Status MetricsFile::Append(int64_t step,
                                 const std::vector<std::pair<std::string, double>>& scalars) {
  nlohmann::ordered_json record = {{"step", step}};
  for (const auto& [tag, value] : scalars) {
    record[tag] = std::isfinite(value) ? nlohmann::ordered_json(value) : nullptr;
  }
  const std::string line = record.dump() + "\n";
  if (std::fwrite(line.data(), 1, line.size(), file_.get()) != line.size() ||
      std::fflush(file_.get()) != 0) {
    return absl::DataLossError(
        absl::StrCat("cannot write logging.metrics_file=\"", path_, "\": ", std::strerror(errno)));
  }
  return absl::OkStatus();
}

}  // namespace kelvin::training
