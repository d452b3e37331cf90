// Reading regions of a checkpoint's logical tensors from the pieces that hold them.
#include "launcher/checkpoint_reader.h"

#include <algorithm>
#include <filesystem>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/status.h"

namespace kelvin::launcher {

absl::StatusOr<CheckpointReader> CheckpointReader::Open(const std::string& path) {
  KELVIN_ASSIGN_OR_RETURN(CheckpointIndex index, ReadCheckpointIndex(path));
  std::vector<io::SafetensorsFile> parts;
  std::map<std::string, std::vector<Piece>> pieces;
  for (int r = 0; r < index.parts; ++r) {
    KELVIN_ASSIGN_OR_RETURN(
        io::SafetensorsFile file,
        io::SafetensorsFile::Open(
            (std::filesystem::path(path) / PartFileName(r, index.parts)).string()));
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
      pieces[entry.name].push_back({parts.size(), *region});
    }
    parts.push_back(std::move(file));
  }
  return CheckpointReader(path, std::move(index), std::move(parts), std::move(pieces));
}

std::vector<std::string> CheckpointReader::TensorNames() const {
  std::vector<std::string> names;
  for (const auto& [name, pieces] : pieces_) names.push_back(name);
  return names;
}

const std::string& CheckpointReader::FileOf(const std::string& name) const {
  return parts_[pieces_.at(name).front().part].path();
}

absl::StatusOr<Tensor> CheckpointReader::Read(const std::string& name,
                                              const io::TensorRegion& region,
                                              std::optional<DType> dtype) const {
  const auto found = pieces_.find(name);
  if (found == pieces_.end()) {
    return absl::NotFoundError(
        absl::StrCat(path_, " has no tensor \"", name,
                     "\": the checkpoint is of another model (model.* or model.ssa.* changed?)"));
  }
  if (region.numel() == 0) return Tensor::Empty({0}, dtype.value_or(DType::kF32));
  Tensor data;  // [region.numel()], allocated with the first piece's dtype
  std::vector<std::pair<int64_t, int64_t>> filled;  // (position, length) in data
  for (const Piece& piece : found->second) {
    const io::SafetensorsFile& file = parts_[piece.part];
    if (piece.region.full_shape != region.full_shape) {
      return absl::InvalidArgumentError(
          absl::StrCat(file.path(), ": tensor \"", name, "\" is ",
                       ShapeToString(piece.region.full_shape), " but the job's model has ",
                       ShapeToString(region.full_shape), ": the checkpoint is of another model"));
    }
    std::vector<io::RegionOverlap> overlaps = io::OverlapOf(piece.region, region);
    if (overlaps.empty()) continue;
    // Only the piece's elements between the first and the last overlap are read.
    const int64_t first = overlaps.front().from;
    const int64_t last = overlaps.back().from + overlaps.back().length;
    KELVIN_ASSIGN_OR_RETURN(const Tensor stored, file.ReadSlice(name, 0, first, last));
    for (io::RegionOverlap& o : overlaps) {
      o.from -= first;
      filled.emplace_back(o.to, o.length);
    }
    if (dtype.has_value() && stored.dtype() != *dtype) {
      return absl::InvalidArgumentError(absl::StrCat(
          file.path(), ": tensor \"", name, "\" is ", std::string(DTypeName(stored.dtype())),
          " but the job keeps it in ", std::string(DTypeName(*dtype)),
          " (model.precision or the device changed since the checkpoint?)"));
    }
    if (!data.defined()) {
      data = Tensor::Empty({region.numel()}, stored.dtype());
    } else if (stored.dtype() != data.dtype()) {
      return absl::DataLossError(
          absl::StrCat(file.path(), ": the pieces of tensor \"", name, "\" disagree on its dtype"));
    }
    io::CopyOverlap(overlaps, stored, data);
  }
  // The pieces must fill the region exactly once: no gap (elements left unset), no overlap.
  std::sort(filled.begin(), filled.end());
  int64_t covered = 0;
  for (const auto& [position, length] : filled) {
    if (position != covered) break;
    covered += length;
  }
  if (covered != region.numel()) {
    return absl::DataLossError(absl::StrCat(path_, ": its parts do not hold each of the ",
                                            region.numel(), " elements of \"", name, "\" ",
                                            region.ToString(), " asked for exactly once (", covered,
                                            " are; a damaged or foreign part file?)"));
  }
  return data;
}

}  // namespace kelvin::launcher
