// The run's scalars as JSON Lines (see metrics_file.h).
#include "launcher/metrics_file.h"

#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <system_error>

#include "absl/strings/str_cat.h"
#include "core/status.h"
#include "nlohmann/json.hpp"

namespace kelvin::launcher {
namespace {

namespace fs = std::filesystem;

// The lines of `path` whose record's "step" is at most `steps` (whole JSON objects only).
absl::StatusOr<std::string> KeptRecords(const fs::path& path, int64_t steps) {
  std::ifstream in(path);
  if (!in.is_open()) {
    return absl::PermissionDeniedError(
        absl::StrCat("logging.metrics_file=\"", path.string(),
                     "\": cannot read it to keep the records up to step ", steps));
  }
  std::string kept, line;
  while (std::getline(in, line)) {
    const nlohmann::json record = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (!record.is_object()) continue;  // a line a crash cut short
    const auto step = record.find("step");
    if (step != record.end() && step->is_number_integer() && step->get<int64_t>() <= steps) {
      absl::StrAppend(&kept, line, "\n");
    }
  }
  if (in.bad()) {
    return absl::DataLossError(
        absl::StrCat("logging.metrics_file=\"", path.string(), "\": reading it failed"));
  }
  return kept;
}

}  // namespace

absl::StatusOr<MetricsFile> MetricsFile::Open(const std::string& path, int64_t resumed_steps) {
  const auto error = [&](absl::string_view what) {
    return absl::PermissionDeniedError(absl::StrCat("logging.metrics_file=\"", path, "\": cannot ",
                                                    what, ": ", std::strerror(errno)));
  };
  std::error_code fs_error;
  const fs::path parent = fs::path(path).parent_path();
  if (!parent.empty()) fs::create_directories(parent, fs_error);  // fopen below reports a failure
  if (resumed_steps > 0 && fs::exists(path, fs_error)) {  // the kept records replace it whole
    KELVIN_ASSIGN_OR_RETURN(const std::string kept, KeptRecords(path, resumed_steps));
    const std::string rewritten = path + ".partial";
    std::ofstream out(rewritten, std::ios::binary | std::ios::trunc);
    out << kept;
    out.close();
    if (out) fs::rename(rewritten, path, fs_error);
    if (!out || fs_error) {
      fs::remove(rewritten, fs_error);
      return absl::DataLossError(absl::StrCat("logging.metrics_file=\"", path, "\": cannot write ",
                                              rewritten, " and rename it over the file"));
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

}  // namespace kelvin::launcher
