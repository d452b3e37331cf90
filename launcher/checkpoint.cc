// Training checkpoints: save to a .partial directory and rename, find the newest, restore with
// every tensor checked, prune old ones.
#include "launcher/checkpoint.h"

#include <algorithm>
#include <charconv>
#include <filesystem>
#include <fstream>
#include <map>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/copy.h"
#include "core/io/safetensors.h"

namespace kelvin::launcher {
namespace {

namespace fs = std::filesystem;

constexpr const char* kPrefix = "step_";
constexpr const char* kLayoutFile = "layout.txt";  // the layout, one line, written by rank 0

std::string StepDirectoryName(int64_t step) { return absl::StrFormat("%s%08d", kPrefix, step); }

// The step of a complete checkpoint directory name ("step_00000120" -> 120), else nullopt.
std::optional<int64_t> StepOf(const std::string& name) {
  if (!name.starts_with(kPrefix)) return std::nullopt;
  const std::string digits = name.substr(std::string(kPrefix).size());
  int64_t step = 0;
  const auto [end, error] = std::from_chars(digits.data(), digits.data() + digits.size(), step);
  if (error != std::errc() || end != digits.data() + digits.size() || digits.empty()) {
    return std::nullopt;
  }
  return step;
}

// Complete checkpoints under dir by step (empty when dir does not exist).
absl::StatusOr<std::map<int64_t, fs::path>> CompleteCheckpoints(const std::string& dir) {
  std::map<int64_t, fs::path> found;
  std::error_code error;
  if (!fs::exists(dir, error)) return found;
  for (const fs::directory_entry& entry : fs::directory_iterator(dir, error)) {
    const std::optional<int64_t> step = StepOf(entry.path().filename().string());
    if (step.has_value() && entry.is_directory()) found[*step] = entry.path();
  }
  if (error) {
    return absl::PermissionDeniedError(
        absl::StrCat("cannot list checkpoint directory ", dir, ": ", error.message()));
  }
  return found;
}

// Copies every tensor of `file` named in `targets` into it, bit-exact: the names must match one
// to one, and shapes and dtypes exactly.
absl::Status RestoreTensors(const Context& ctx, const io::SafetensorsFile& file,
                            const std::vector<std::pair<std::string, Tensor>>& targets) {
  for (const auto& [name, target] : targets) {
    const io::SafetensorsEntry* entry = file.Find(name);
    if (entry == nullptr) {
      return absl::NotFoundError(
          absl::StrCat(file.path(), " has no tensor \"", name,
                       "\": the checkpoint is of another model (model.* or model.ssa.* changed?)"));
    }
    KELVIN_ASSIGN_OR_RETURN(const Tensor stored, file.Read(name));
    if (stored.shape() != target.shape() || stored.dtype() != target.dtype()) {
      return absl::InvalidArgumentError(absl::StrCat(
          file.path(), ": tensor \"", name, "\" is ", stored.ToString(), " but the job needs ",
          target.ToString(), " (model or precision changed since the checkpoint?)"));
    }
    Tensor destination = target;
    CopyTensor(ctx, stored, destination);
  }
  if (file.entries().size() != targets.size()) {
    for (const io::SafetensorsEntry& entry : file.entries()) {
      const bool known = std::any_of(targets.begin(), targets.end(), [&](const auto& target) {
        return target.first == entry.name;
      });
      if (!known) {
        return absl::InvalidArgumentError(absl::StrCat(
            file.path(), " has tensor \"", entry.name,
            "\", which this job's model does not: the checkpoint is of another model"));
      }
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<int64_t> MetadataInteger(const io::SafetensorsFile& file, const std::string& key) {
  const auto found = file.metadata().find(key);
  int64_t value = 0;
  if (found != file.metadata().end()) {
    const std::string& text = found->second;
    const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
    if (error == std::errc() && end == text.data() + text.size() && value >= 0) return value;
  }
  return absl::DataLossError(absl::StrCat(file.path(), ": metadata \"", key,
                                          "\" is missing or not a count: not a Kelvin checkpoint"));
}

}  // namespace

absl::StatusOr<std::string> SaveCheckpoint(const std::string& dir, int64_t steps_completed,
                                           const std::string& job_name, const CheckpointPart& part,
                                           const ParameterSet& params,
                                           const OptimizerState& optimizer,
                                           parallel::Communicator* world) {
  const fs::path final_path = fs::path(dir) / StepDirectoryName(steps_completed);
  const fs::path partial = fs::path(dir) / (StepDirectoryName(steps_completed) + ".partial");
  const bool leader = world == nullptr || world->rank() == 0;
  std::error_code error;
  if (leader) {
    fs::remove_all(partial, error);
    fs::create_directories(partial, error);
    if (error) {
      return absl::PermissionDeniedError(absl::StrCat("cannot create checkpoint directory ",
                                                      partial.string(), ": ", error.message()));
    }
  }
  if (leader) {
    std::ofstream layout(partial / kLayoutFile);
    layout << part.layout << "\n";
    if (!layout) {
      return absl::DataLossError(absl::StrCat("cannot write ", (partial / kLayoutFile).string()));
    }
  }
  if (world != nullptr) world->Barrier();  // the directory exists before anyone writes
  if (part.writes_model) {
    std::vector<std::pair<std::string, Tensor>> parameters;  // the master weights
    for (const ParameterSet::Entry& e : params.entries()) {
      parameters.emplace_back(e.name, params.MasterOnHost(e.name));
    }
    KELVIN_RETURN_IF_ERROR(
        io::WriteSafetensors((partial / part.model_file).string(), parameters,
                             {{"format", "kelvin-checkpoint-1"}, {"layout", part.layout}}));
  }
  if (part.writes_optimizer) {
    std::vector<std::pair<std::string, Tensor>> state;
    for (const auto& [name, tensor] : optimizer.tensors) {
      state.emplace_back(
          name, tensor.is_cpu() ? tensor : CopyToDevice(params.context(), tensor, Device::Cpu()));
    }
    KELVIN_RETURN_IF_ERROR(
        io::WriteSafetensors((partial / part.optimizer_file).string(), state,
                             {{"step", std::to_string(steps_completed)},
                              {"optimizer_steps", std::to_string(optimizer.steps_taken)},
                              {"job", job_name},
                              {"layout", part.layout}}));
  }
  if (world != nullptr) world->Barrier();  // every part is written
  if (leader) {
    fs::remove_all(final_path, error);  // an older save of the same step (a rerun)
    fs::rename(partial, final_path, error);
    if (error) {
      return absl::PermissionDeniedError(absl::StrCat("cannot rename ", partial.string(), " to ",
                                                      final_path.string(), ": ", error.message()));
    }
  }
  if (world != nullptr) world->Barrier();  // nobody reads the directory before it is renamed
  return final_path.string();
}

absl::StatusOr<std::optional<std::string>> LatestCheckpoint(const std::string& dir) {
  if (dir.empty()) return std::optional<std::string>();
  KELVIN_ASSIGN_OR_RETURN(const auto checkpoints, CompleteCheckpoints(dir));
  if (checkpoints.empty()) return std::optional<std::string>();
  return std::optional<std::string>(checkpoints.rbegin()->second.string());
}

absl::StatusOr<RestoredSteps> LoadCheckpoint(const std::string& path, const std::string& job_name,
                                             const CheckpointPart& part, ParameterSet& params,
                                             const OptimizerState& optimizer) {
  std::ifstream layout_file(fs::path(path) / kLayoutFile);
  std::string saved_layout;
  if (!std::getline(layout_file, saved_layout)) {
    return absl::DataLossError(
        absl::StrCat(path, " has no readable ", kLayoutFile, ": not a complete Kelvin checkpoint"));
  }
  if (saved_layout != part.layout) {
    return absl::FailedPreconditionError(absl::StrCat(
        path, " was saved by the layout \"", saved_layout, "\", this job runs \"", part.layout,
        "\": resume with the parallel.* settings and process count it was saved with "
        "(resharding a checkpoint is not supported yet)"));
  }
  KELVIN_ASSIGN_OR_RETURN(
      const io::SafetensorsFile optimizer_file,
      io::SafetensorsFile::Open((fs::path(path) / part.optimizer_file).string()));
  const auto job = optimizer_file.metadata().find("job");
  if (job == optimizer_file.metadata().end() || job->second != job_name) {
    return absl::FailedPreconditionError(
        absl::StrCat(path, " is a checkpoint of job \"",
                     job == optimizer_file.metadata().end() ? std::string("?") : job->second,
                     "\", not of this job \"", job_name,
                     "\": give this job its own checkpoint.dir, or set checkpoint.resume=NEVER"));
  }
  RestoredSteps steps;
  KELVIN_ASSIGN_OR_RETURN(steps.steps_completed, MetadataInteger(optimizer_file, "step"));
  KELVIN_ASSIGN_OR_RETURN(steps.optimizer_steps,
                          MetadataInteger(optimizer_file, "optimizer_steps"));
  KELVIN_ASSIGN_OR_RETURN(const io::SafetensorsFile model_file,
                          io::SafetensorsFile::Open((fs::path(path) / part.model_file).string()));
  std::vector<std::pair<std::string, Tensor>> parameters;  // the master weights
  for (const ParameterSet::Entry& e : params.entries()) parameters.emplace_back(e.name, e.master);
  KELVIN_RETURN_IF_ERROR(RestoreTensors(params.context(), model_file, parameters));
  KELVIN_RETURN_IF_ERROR(RestoreTensors(params.context(), optimizer_file, optimizer.tensors));
  params.SyncModelCopy();
  return steps;
}

absl::Status PruneCheckpoints(const std::string& dir, int keep_last) {
  if (keep_last <= 0) return absl::OkStatus();
  KELVIN_ASSIGN_OR_RETURN(const auto checkpoints, CompleteCheckpoints(dir));
  int64_t excess = static_cast<int64_t>(checkpoints.size()) - keep_last;
  for (auto it = checkpoints.begin(); excess > 0; ++it, --excess) {
    std::error_code error;
    fs::remove_all(it->second, error);
    if (error) {
      return absl::PermissionDeniedError(absl::StrCat("cannot delete old checkpoint ",
                                                      it->second.string(), ": ", error.message()));
    }
  }
  return absl::OkStatus();
}

}  // namespace kelvin::launcher
