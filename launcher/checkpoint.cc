// Training checkpoints: every rank writes its pieces into a .partial directory that is renamed
// when complete; restore assembles each rank's tensors from whichever pieces hold them, every
// piece checked; the newest is found and old ones pruned.
#include "launcher/checkpoint.h"

#include <algorithm>
#include <charconv>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <nlohmann/json.hpp>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/copy.h"
#include "core/io/safetensors.h"

namespace kelvin::launcher {
namespace {

namespace fs = std::filesystem;

constexpr const char* kPrefix = "step_";

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

constexpr const char* kFormat = "kelvin-checkpoint-2";
constexpr const char* kIndexFile = "checkpoint.json";  // written by rank 0
constexpr const char* kRegionKey = "region:";          // + tensor name, in each part's metadata

std::string PartFileName(int rank, int parts) {
  return absl::StrFormat("part_%d_of_%d.safetensors", rank, parts);
}

// What checkpoint.json records.
struct CheckpointIndex {
  std::string job, layout;
  int64_t steps_completed = 0, optimizer_steps = 0;
  int parts = 0;
  std::map<std::string, std::string> data_order;
};

absl::StatusOr<CheckpointIndex> ReadIndex(const fs::path& checkpoint) {
  const fs::path path = checkpoint / kIndexFile;
  std::ifstream file(path);
  const std::string text((std::istreambuf_iterator<char>(file)), std::istreambuf_iterator<char>());
  const nlohmann::json json = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!file || json.is_discarded() || !json.is_object() || json.value("format", "") != kFormat) {
    return absl::DataLossError(
        absl::StrCat(path.string(), " is missing or not a \"", kFormat,
                     "\" index: not a complete Kelvin checkpoint (delete the directory, or point "
                     "checkpoint.dir elsewhere)"));
  }
  CheckpointIndex index;
  const auto count = [&](const char* key) -> absl::StatusOr<int64_t> {
    const auto found = json.find(key);
    if (found == json.end() || !found->is_number_integer() || found->get<int64_t>() < 0) {
      return absl::DataLossError(
          absl::StrCat(path.string(), ": \"", key, "\" is missing or not a count"));
    }
    return found->get<int64_t>();
  };
  KELVIN_ASSIGN_OR_RETURN(index.steps_completed, count("step"));
  KELVIN_ASSIGN_OR_RETURN(index.optimizer_steps, count("optimizer_steps"));
  KELVIN_ASSIGN_OR_RETURN(const int64_t parts, count("parts"));
  index.parts = static_cast<int>(parts);
  index.job = json.value("job", "");
  index.layout = json.value("layout", "");
  const auto data_order = json.find("data_order");
  if (data_order != json.end() && data_order->is_object()) {
    for (const auto& [setting, value] : data_order->items()) {
      if (value.is_string()) index.data_order[setting] = value.get<std::string>();
    }
  }
  return index;
}

absl::Status WriteIndex(const fs::path& checkpoint, const CheckpointIndex& index) {
  const nlohmann::json json = {{"format", kFormat},
                               {"job", index.job},
                               {"step", index.steps_completed},
                               {"optimizer_steps", index.optimizer_steps},
                               {"layout", index.layout},
                               {"parts", index.parts},
                               {"data_order", index.data_order}};
  std::ofstream file(checkpoint / kIndexFile);
  file << json.dump(2) << "\n";
  if (!file) {
    return absl::DataLossError(absl::StrCat("cannot write ", (checkpoint / kIndexFile).string()));
  }
  return absl::OkStatus();
}

// One stored piece of a logical tensor.
struct StoredPiece {
  const io::SafetensorsFile* file = nullptr;
  std::string entry;  // its name in the file (the logical tensor's)
  io::TensorRegion region;
};

// Every part file's pieces by logical tensor name, each region checked against its entry.
absl::StatusOr<std::map<std::string, std::vector<StoredPiece>>> IndexPieces(
    const std::vector<io::SafetensorsFile>& parts) {
  std::map<std::string, std::vector<StoredPiece>> pieces;
  for (const io::SafetensorsFile& file : parts) {
    for (const io::SafetensorsEntry& entry : file.entries()) {
      const auto found = file.metadata().find(kRegionKey + entry.name);
      if (found == file.metadata().end()) {
        return absl::DataLossError(absl::StrCat(file.path(), ": tensor \"", entry.name,
                                                "\" has no \"", kRegionKey,
                                                "\" metadata: not a Kelvin checkpoint part"));
      }
      absl::StatusOr<io::TensorRegion> region = io::TensorRegion::Decode(found->second);
      if (!region.ok()) {
        return absl::DataLossError(absl::StrCat(file.path(), ": tensor \"", entry.name,
                                                "\": ", region.status().message()));
      }
      if (NumElements(entry.shape) != region->numel()) {
        return absl::DataLossError(absl::StrCat(file.path(), ": tensor \"", entry.name, "\" has ",
                                                NumElements(entry.shape), " elements, its region ",
                                                region->ToString(), " ", region->numel()));
      }
      pieces[entry.name].push_back({&file, entry.name, *region});
    }
  }
  return pieces;
}

// Fills `target` (the data of its region) from the stored pieces, bit-exact.
absl::Status RestoreTensor(const Context& ctx, const std::string& checkpoint,
                           const std::vector<StoredPiece>& pieces, const CheckpointTensor& target) {
  Tensor staging = Tensor::Empty({target.region.numel()}, target.data.dtype());
  int64_t copied = 0;
  for (const StoredPiece& piece : pieces) {
    if (piece.region.full_shape != target.region.full_shape) {
      return absl::InvalidArgumentError(absl::StrCat(
          piece.file->path(), ": tensor \"", target.name, "\" is ",
          ShapeToString(piece.region.full_shape), " but the job's model has ",
          ShapeToString(target.region.full_shape), ": the checkpoint is of another model"));
    }
    const std::vector<io::RegionOverlap> overlaps = io::OverlapOf(piece.region, target.region);
    if (overlaps.empty()) continue;
    KELVIN_ASSIGN_OR_RETURN(const Tensor stored, piece.file->Read(piece.entry));
    if (stored.dtype() != staging.dtype()) {
      return absl::InvalidArgumentError(
          absl::StrCat(piece.file->path(), ": tensor \"", target.name, "\" is ",
                       std::string(DTypeName(stored.dtype())), " but the job keeps it in ",
                       std::string(DTypeName(staging.dtype())),
                       " (training.dtype changed since the checkpoint?)"));
    }
    copied += io::CopyOverlap(overlaps, stored, staging);
  }
  if (copied != target.region.numel()) {
    return absl::DataLossError(absl::StrCat(checkpoint, ": its parts hold ", copied, " of the ",
                                            target.region.numel(), " elements of \"", target.name,
                                            "\" ", target.region.ToString(),
                                            " this rank needs (a damaged or foreign part file?)"));
  }
  Tensor destination = target.data;
  CopyTensor(ctx, staging.View(target.data.shape()), destination);
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::string> SaveCheckpoint(const std::string& dir, int64_t steps_completed,
                                           const std::string& job_name, const TrainingState& state,
                                           const Context& ctx, parallel::Communicator* world) {
  const fs::path final_path = fs::path(dir) / StepDirectoryName(steps_completed);
  const fs::path partial = fs::path(dir) / (StepDirectoryName(steps_completed) + ".partial");
  const int rank = world == nullptr ? 0 : world->rank();
  const int parts = world == nullptr ? 1 : world->size();
  std::error_code error;
  if (rank == 0) {
    fs::remove_all(partial, error);
    fs::create_directories(partial, error);
    if (error) {
      return absl::PermissionDeniedError(absl::StrCat("cannot create checkpoint directory ",
                                                      partial.string(), ": ", error.message()));
    }
    KELVIN_RETURN_IF_ERROR(WriteIndex(partial, {job_name, state.layout, steps_completed,
                                                state.optimizer_steps, parts, state.data_order}));
  }
  if (world != nullptr) world->Barrier();              // the directory exists before anyone writes
  std::vector<std::pair<std::string, Tensor>> pieces;  // host copies, 1-d
  std::map<std::string, std::string> metadata = {{"format", kFormat}};
  for (const CheckpointTensor& t : state.tensors) {
    if (!t.written) continue;
    const Tensor host = t.data.is_cpu() ? t.data : CopyToDevice(ctx, t.data, Device::Cpu());
    pieces.emplace_back(t.name, host.View({-1}));
    metadata[kRegionKey + t.name] = t.region.Encode();
  }
  KELVIN_RETURN_IF_ERROR(
      io::WriteSafetensors((partial / PartFileName(rank, parts)).string(), pieces, metadata));
  if (world != nullptr) world->Barrier();  // every part is written
  if (rank == 0) {
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
                                             const TrainingState& state, const Context& ctx) {
  KELVIN_ASSIGN_OR_RETURN(const CheckpointIndex index, ReadIndex(path));
  if (index.job != job_name) {
    return absl::FailedPreconditionError(absl::StrCat(
        path, " is a checkpoint of job \"", index.job, "\", not of this job \"", job_name,
        "\": give this job its own checkpoint.dir, or set checkpoint.resume=NEVER"));
  }
  std::vector<io::SafetensorsFile> parts;
  for (int r = 0; r < index.parts; ++r) {
    KELVIN_ASSIGN_OR_RETURN(
        io::SafetensorsFile part,
        io::SafetensorsFile::Open((fs::path(path) / PartFileName(r, index.parts)).string()));
    parts.push_back(std::move(part));
  }
  KELVIN_ASSIGN_OR_RETURN(const auto pieces, IndexPieces(parts));
  for (const auto& [name, stored] : pieces) {
    if (!state.job_tensors.count(name)) {
      return absl::InvalidArgumentError(
          absl::StrCat(stored.front().file->path(), " has tensor \"", name,
                       "\", which this job's model does not: the checkpoint is of another model"));
    }
  }
  for (const CheckpointTensor& target : state.tensors) {
    const auto found = pieces.find(target.name);
    if (found == pieces.end()) {
      return absl::NotFoundError(
          absl::StrCat(path, " has no tensor \"", target.name,
                       "\": the checkpoint is of another model (model.* or model.ssa.* changed?)"));
    }
    KELVIN_RETURN_IF_ERROR(RestoreTensor(ctx, path, found->second, target));
  }
  return RestoredSteps{index.steps_completed, index.optimizer_steps, index.layout,
                       index.data_order};
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
