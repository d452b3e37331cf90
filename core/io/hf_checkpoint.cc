// HfCheckpoint: resolves a checkpoint directory to its shards (single file or index), checks that
// the index and the shards agree, and routes reads; WriteHfCheckpoint shards as huggingface_hub's
// split_state_dict_into_shards_factory does.
#include "core/io/hf_checkpoint.h"

#include <cctype>
#include <filesystem>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/io/atomic_file.h"
#include "core/io/strict_json.h"
#include "core/status.h"

namespace kelvin::io {
namespace {

namespace fs = std::filesystem;
using Json = nlohmann::json;

constexpr absl::string_view kRedownload =
    "; the checkpoint is incomplete or inconsistent: download or save it again";

// "model-00001-of-00003.safetensors"
bool IsShardFileName(std::string_view name) {
  constexpr std::string_view kPattern = "model-#####-of-#####.safetensors";  // # is a digit
  if (name.size() != kPattern.size()) return false;
  for (size_t i = 0; i < name.size(); ++i) {
    const bool matches = kPattern[i] == '#' ? std::isdigit(static_cast<unsigned char>(name[i]))
                                            : name[i] == kPattern[i];
    if (!matches) return false;
  }
  return true;
}

// The shard file names of the index's weight_map, validated: tensor name -> shard file.
absl::StatusOr<std::map<std::string, std::string>> ReadWeightMap(const std::string& index_path) {
  KELVIN_ASSIGN_OR_RETURN(const MappedFile file, MappedFile::Open(index_path));
  const std::string_view text(file.data(), file.size());
  KELVIN_ASSIGN_OR_RETURN(const Json index, ParseStrictJson(text, index_path));
  const auto invalid = [&index_path](absl::string_view detail) {
    return absl::InvalidArgumentError(absl::StrCat(
        index_path, ": ", detail,
        "; expected {\"metadata\": {\"total_size\": N}, \"weight_map\": {tensor name: shard "
        "file}}: save the checkpoint again"));
  };
  if (!index.is_object()) return invalid(absl::StrCat("the index is a JSON ", index.type_name()));
  const auto weight_map = index.find("weight_map");
  if (weight_map == index.end()) return invalid("missing \"weight_map\"");
  if (!weight_map->is_object() || weight_map->empty()) {
    return invalid("\"weight_map\" must be a non-empty object");
  }
  if (const auto metadata = index.find("metadata");
      metadata != index.end() && !metadata->is_object()) {
    return invalid("\"metadata\" must be an object");
  }
  std::map<std::string, std::string> shard_of;
  for (const auto& [name, shard] : weight_map->items()) {
    if (!shard.is_string()) {
      return invalid(absl::StrCat("\"weight_map\" value of \"", name,
                                  "\" must be a file name, "
                                  "found ",
                                  shard.dump(-1, ' ', false, Json::error_handler_t::replace)));
    }
    const fs::path relative(shard.get<std::string>());
    bool escapes = relative.empty() || relative.is_absolute();
    for (const fs::path& part : relative) escapes = escapes || part == "..";
    if (escapes) {
      return invalid(absl::StrCat("tensor \"", name, "\" is mapped to \"", relative.string(),
                                  "\", which is not a file inside the checkpoint directory"));
    }
    shard_of[name] = relative.string();
  }
  return shard_of;
}

}  // namespace

absl::StatusOr<HfCheckpoint> HfCheckpoint::Open(const std::string& path) {
  std::error_code error;
  const fs::file_status status = fs::status(path, error);
  if (!fs::exists(status)) {
    return absl::NotFoundError(absl::StrCat(
        path,
        ": no such checkpoint directory; pass the folder of a Hugging Face checkpoint (the "
        "one with config.json and model*.safetensors)"));
  }
  const auto open_single_file =
      [&path](const std::string& file_path) -> absl::StatusOr<HfCheckpoint> {
    KELVIN_ASSIGN_OR_RETURN(SafetensorsFile file, SafetensorsFile::Open(file_path));
    std::map<std::string, size_t, std::less<>> shard_of;
    for (const SafetensorsEntry& entry : file.entries()) shard_of[entry.name] = 0;
    std::vector<SafetensorsFile> shards;
    shards.push_back(std::move(file));
    return HfCheckpoint(path, std::move(shards), std::move(shard_of));
  };
  if (!fs::is_directory(status)) return open_single_file(path);

  const fs::path directory(path);
  const fs::path single = directory / kHfSingleFileName;
  // The entries themselves, not what they point to: a broken or looping link is opened, so that
  // the error says so instead of "has neither".
  if (fs::exists(fs::symlink_status(single, error))) return open_single_file(single.string());
  const std::string index_path = (directory / kHfIndexFileName).string();
  if (!fs::exists(fs::symlink_status(index_path, error))) {
    return absl::NotFoundError(absl::StrCat(
        path, ": has neither ", std::string(kHfSingleFileName), " nor ",
        std::string(kHfIndexFileName),
        "; pass a Hugging Face checkpoint saved as safetensors (re-save .bin checkpoints with "
        "save_pretrained(..., safe_serialization=True))"));
  }

  KELVIN_ASSIGN_OR_RETURN(const auto shard_file_of, ReadWeightMap(index_path));
  std::map<std::string, size_t> shard_index;  // shard file -> index in `shards`
  std::vector<SafetensorsFile> shards;
  std::map<std::string, size_t, std::less<>> shard_of;
  for (const auto& [name, shard_file] : shard_file_of) {
    auto [it, inserted] = shard_index.try_emplace(shard_file, shards.size());
    if (inserted) {
      const std::string shard_path = (directory / shard_file).string();
      absl::StatusOr<SafetensorsFile> shard = SafetensorsFile::Open(shard_path);
      if (absl::IsNotFound(shard.status())) {
        return absl::NotFoundError(absl::StrCat(index_path, ": tensor \"", name, "\" is in shard ",
                                                shard_file, ", but ", shard_path, " does not exist",
                                                kRedownload));
      }
      if (!shard.ok()) return shard.status();
      shards.push_back(std::move(*shard));
    }
    const SafetensorsFile& shard = shards[it->second];
    if (shard.Find(name) == nullptr) {
      return absl::DataLossError(absl::StrCat(index_path, ": tensor \"", name, "\" is in shard ",
                                              shard_file, " by the index, but ", shard.path(),
                                              " does not hold it", kRedownload));
    }
    shard_of.emplace(name, it->second);
  }
  for (const SafetensorsFile& shard : shards) {
    for (const SafetensorsEntry& entry : shard.entries()) {
      const auto it = shard_of.find(entry.name);
      if (it == shard_of.end() || &shards[it->second] != &shard) {
        return absl::DataLossError(absl::StrCat(shard.path(), ": holds tensor \"", entry.name,
                                                "\", which the index ", index_path,
                                                " does not place in this shard", kRedownload));
      }
    }
  }
  return HfCheckpoint(path, std::move(shards), std::move(shard_of));
}

std::vector<std::string> HfCheckpoint::TensorNames() const {
  std::vector<std::string> names;
  for (const auto& [name, shard] : shard_of_) names.push_back(name);
  return names;
}

absl::StatusOr<const SafetensorsFile*> HfCheckpoint::ShardOf(std::string_view name) const {
  const auto it = shard_of_.find(name);
  if (it == shard_of_.end()) return internal::TensorNotFound(path_, name, TensorNames());
  return &shards_[it->second];
}

const SafetensorsEntry* HfCheckpoint::Find(std::string_view name) const {
  const absl::StatusOr<const SafetensorsFile*> shard = ShardOf(name);
  return shard.ok() ? (*shard)->Find(name) : nullptr;
}

absl::StatusOr<Tensor> HfCheckpoint::Read(std::string_view name, std::optional<DType> as) const {
  KELVIN_ASSIGN_OR_RETURN(const SafetensorsFile* shard, ShardOf(name));
  return shard->Read(name, as);
}

absl::StatusOr<Tensor> HfCheckpoint::ReadSlice(std::string_view name, int axis, int64_t begin,
                                               int64_t end, std::optional<DType> as) const {
  KELVIN_ASSIGN_OR_RETURN(const SafetensorsFile* shard, ShardOf(name));
  return shard->ReadSlice(name, axis, begin, end, as);
}

absl::StatusOr<std::string_view> HfCheckpoint::Bytes(std::string_view name) const {
  KELVIN_ASSIGN_OR_RETURN(const SafetensorsFile* shard, ShardOf(name));
  return shard->Bytes(*shard->Find(name));
}

std::vector<HfTensorSource> HfTensorSourcesOf(
    const std::vector<std::pair<std::string, Tensor>>& tensors) {
  std::vector<HfTensorSource> sources;
  for (const auto& [name, tensor] : tensors) {
    sources.push_back({name, tensor.shape(), tensor.dtype(),
                       [tensor]() -> absl::StatusOr<Tensor> { return tensor; }});
  }
  return sources;
}

absl::Status WriteHfCheckpoint(const std::string& directory,
                               const std::vector<std::pair<std::string, Tensor>>& tensors,
                               size_t max_shard_bytes) {
  return WriteHfCheckpoint(directory, HfTensorSourcesOf(tensors), max_shard_bytes);
}

namespace {

// The file that marks "<directory>.partial" as a staging directory of WriteHfCheckpoint's: one
// that an interrupted export left may be removed, anything else at that path is the user's.
constexpr const char* kStagingMarker = ".kelvin-export-in-progress";

// `staging` made empty for a new export: created, or emptied when an interrupted export left it
// (it holds the marker); another directory or file there is refused, never removed.
absl::Status PrepareStaging(const std::string& directory, const std::string& staging) {
  std::error_code error;
  if (fs::exists(fs::symlink_status(staging, error))) {
    if (!fs::is_directory(fs::symlink_status(staging, error)) ||
        !fs::exists(fs::path(staging) / kStagingMarker, error)) {
      return absl::FailedPreconditionError(
          absl::StrCat("cannot write checkpoint ", directory, ": its staging path ", staging,
                       " exists and is not what an interrupted export leaves (it has no ",
                       kStagingMarker, "); move or remove it, or export to another directory"));
    }
    fs::remove_all(staging, error);
  }
  fs::create_directories(staging, error);
  if (error) {
    return absl::PermissionDeniedError(
        absl::StrCat("cannot create checkpoint directory ", staging, " (", error.message(), ")"));
  }
  return WriteFileAtomically((fs::path(staging) / kStagingMarker).string(), {""});
}

// WriteHfCheckpoint's files, written into the fresh directory `staging`; returns their names.
absl::StatusOr<std::set<std::string>> WriteHfFiles(
    const std::string& directory, const std::string& staging,
    const std::vector<HfTensorSource>& tensors, size_t max_shard_bytes,
    std::string_view single_file_name,
    const std::vector<std::pair<std::string, std::string>>& extra_files) {
  const auto invalid = [&directory](absl::string_view detail) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot write checkpoint ", directory, ": ", detail));
  };
  if (max_shard_bytes == 0) return invalid("max_shard_bytes is 0; pass a positive shard size");
  std::set<std::string_view> names;
  for (const HfTensorSource& tensor : tensors) {
    if (!names.insert(tensor.name).second) {
      return invalid(absl::StrCat("tensor name \"", tensor.name, "\" appears twice"));
    }
  }

  // Greedy filling in order, as huggingface_hub: a tensor that would overflow the current shard
  // starts a new one; a tensor larger than the limit gets a shard of its own.
  using Shard = std::vector<const HfTensorSource*>;
  std::vector<Shard> shards;
  Shard current;
  size_t current_bytes = 0;
  size_t total_bytes = 0;
  for (const HfTensorSource& tensor : tensors) {
    const size_t bytes = static_cast<size_t>(NumElements(tensor.shape)) * DTypeSize(tensor.dtype);
    total_bytes += bytes;
    if (bytes > max_shard_bytes) {
      shards.push_back({&tensor});
      continue;
    }
    if (current_bytes + bytes > max_shard_bytes && !current.empty()) {
      shards.push_back(std::move(current));
      current.clear();
      current_bytes = 0;
    }
    current.push_back(&tensor);
    current_bytes += bytes;
  }
  if (!current.empty() || shards.empty()) shards.push_back(std::move(current));
  // A shard's tensors, made now (and released when the shard is written).
  const auto make =
      [&](const Shard& shard) -> absl::StatusOr<std::vector<std::pair<std::string, Tensor>>> {
    std::vector<std::pair<std::string, Tensor>> made;
    for (const HfTensorSource* source : shard) {
      KELVIN_ASSIGN_OR_RETURN(Tensor tensor, source->make());
      if (tensor.shape() != source->shape || tensor.dtype() != source->dtype) {
        return invalid(absl::StrCat("tensor \"", source->name, "\" was announced as ",
                                    ShapeToString(source->shape), " but made as ",
                                    tensor.ToString()));
      }
      made.emplace_back(source->name, std::move(tensor));
    }
    return made;
  };

  KELVIN_RETURN_IF_ERROR(PrepareStaging(directory, staging));
  const std::map<std::string, std::string> shard_metadata = {{"format", "pt"}};
  std::set<std::string> written;
  if (shards.size() == 1) {
    const std::string file_name(single_file_name);
    KELVIN_ASSIGN_OR_RETURN(const auto made, make(shards[0]));
    KELVIN_RETURN_IF_ERROR(
        WriteSafetensors((fs::path(staging) / file_name).string(), made, shard_metadata));
    written.insert(file_name);
  } else {
    Json weight_map = Json::object();
    for (size_t i = 0; i < shards.size(); ++i) {
      const std::string file_name =
          absl::StrFormat("model-%05d-of-%05d.safetensors", i + 1, shards.size());
      KELVIN_ASSIGN_OR_RETURN(const auto made, make(shards[i]));
      KELVIN_RETURN_IF_ERROR(
          WriteSafetensors((fs::path(staging) / file_name).string(), made, shard_metadata));
      for (const HfTensorSource* source : shards[i]) weight_map[source->name] = file_name;
      written.insert(file_name);
    }
    const Json index = {{"metadata", {{"total_size", total_bytes}}}, {"weight_map", weight_map}};
    const std::string text = index.dump(2) + "\n";  // as transformers: indent 2, sorted keys
    const std::string file_name(kHfIndexFileName);
    KELVIN_RETURN_IF_ERROR(WriteFileAtomically((fs::path(staging) / file_name).string(), {text}));
    written.insert(file_name);
  }
  for (const auto& [name, contents] : extra_files) {
    KELVIN_RETURN_IF_ERROR(WriteFileAtomically((fs::path(staging) / name).string(), {contents}));
    written.insert(name);
  }
  return written;
}

// WriteHfCheckpoint with the name of the file a single shard is written to.
absl::Status WriteStagedCheckpoint(
    const std::string& directory, const std::vector<HfTensorSource>& tensors,
    size_t max_shard_bytes, std::string_view single_file_name,
    const std::vector<std::pair<std::string, std::string>>& extra_files) {
  const std::string staging = fs::path(directory).lexically_normal().string() + ".partial";
  const absl::StatusOr<std::set<std::string>> staged =
      WriteHfFiles(directory, staging, tensors, max_shard_bytes, single_file_name, extra_files);
  std::error_code error;
  if (!staged.ok()) {
    // What this call staged (its marker is there); a path it refused to touch stays.
    if (fs::exists(fs::path(staging) / kStagingMarker, error)) fs::remove_all(staging, error);
    return staged.status();
  }
  const std::set<std::string>& written = *staged;
  fs::create_directories(directory, error);
  for (const std::string& name : written) {
    if (!error) fs::rename(fs::path(staging) / name, fs::path(directory) / name, error);
  }
  if (error) {
    const absl::Status failed = absl::PermissionDeniedError(
        absl::StrCat("cannot move the written checkpoint from ", staging, " into ", directory, ": ",
                     error.message()));
    fs::remove_all(staging, error);
    return failed;
  }
  fs::remove_all(staging, error);
  KELVIN_RETURN_IF_ERROR(SyncDirectory(directory));

  // Files of an earlier layout would shadow or contradict the new one (model.safetensors wins
  // over an index when loading).
  for (fs::directory_iterator it(directory, error); !error && it != fs::directory_iterator();
       it.increment(error)) {
    const std::string name = it->path().filename().string();
    const bool checkpoint_file =
        name == kHfSingleFileName || name == kHfIndexFileName || IsShardFileName(name);
    std::error_code ignored;  // a stale file that cannot be removed is no reason to fail
    if (checkpoint_file && !written.contains(name)) fs::remove(it->path(), ignored);
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status WriteHfCheckpoint(
    const std::string& directory, const std::vector<HfTensorSource>& tensors,
    size_t max_shard_bytes, const std::vector<std::pair<std::string, std::string>>& extra_files) {
  return WriteStagedCheckpoint(directory, tensors, max_shard_bytes, kHfSingleFileName, extra_files);
}

absl::Status WriteSingleFileCheckpoint(
    const std::string& directory, std::string_view file_name,
    const std::vector<HfTensorSource>& tensors,
    const std::vector<std::pair<std::string, std::string>>& extra_files) {
  return WriteStagedCheckpoint(directory, tensors, std::numeric_limits<size_t>::max(), file_name,
                               extra_files);
}

}  // namespace kelvin::io
