// Reading regions of a checkpoint's logical tensors from the pieces that hold them.
#include "training/checkpoint/checkpoint_reader.h"

#include <algorithm>
#include <filesystem>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/io/crc32c.h"
#include "core/status.h"

namespace kelvin::training {
namespace {

// A part must be of the save its index describes: the same run and step (a part copied in from
// another step or run would otherwise restore as this one).
absl::Status CheckPartIdentity(const io::SafetensorsFile& part, const CheckpointIndex& index) {
  if (index.run_id.empty()) return absl::OkStatus();  // kelvin-checkpoint-3: no identity kept
  const auto value = [&part](const char* key) {
    const auto found = part.metadata().find(key);
    return found == part.metadata().end() ? std::string("none") : found->second;
  };
  const std::string run = value(kRunKey), step = value(kStepKey);
  if (run == index.run_id && step == absl::StrCat(index.steps_completed)) return absl::OkStatus();
  return absl::DataLossError(absl::StrCat(
      part.path(), " is a part of the save of step ", step, " of run ", run,
      ", but its checkpoint.json is of step ", index.steps_completed, " of run ", index.run_id,
      ": a part copied from another checkpoint; put the right part back, or delete this "
      "checkpoint directory to resume from the one before"));
}

}  // namespace

absl::StatusOr<CheckpointReader> CheckpointReader::Open(const std::string& path) {
  KELVIN_ASSIGN_OR_RETURN(CheckpointIndex index, ReadCheckpointIndex(path));
  std::vector<io::SafetensorsFile> parts;
  std::map<std::string, std::vector<Piece>> pieces;
  for (int r = 0; r < index.parts; ++r) {
    const std::string part_path =
        (std::filesystem::path(path) / PartFileName(r, index.parts)).string();
    absl::StatusOr<io::SafetensorsFile> opened = io::SafetensorsFile::Open(part_path);
    if (absl::IsNotFound(opened.status())) {  // NotFound: damage (checkpoint.skip_damaged)
      return absl::NotFoundError(absl::StrCat(
          part_path, " is missing: the checkpoint's checkpoint.json names ", index.parts,
          index.parts == 1 ? " part file" : " part files", "; put it back, or delete ", path,
          " (or set checkpoint.skip_damaged: true) to resume from the checkpoint before it"));
    }
    if (!opened.ok()) {  // a damaged part, whatever the flaw
      return absl::DataLossError(opened.status().message());
    }
    KELVIN_ASSIGN_OR_RETURN(io::SafetensorsFile file, std::move(opened));
    KELVIN_RETURN_IF_ERROR(CheckPartIdentity(file, index));
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
      if (entry.shape != Shape{region->numel()}) {
        return absl::DataLossError(absl::StrCat(
            file.path(), ": tensor \"", entry.name, "\" is ", ShapeToString(entry.shape),
            ", its region ", region->ToString(), " needs [", region->numel(), "]"));
      }
      const auto checksum = file.metadata().find(kChecksumKey + entry.name);
      const std::optional<uint32_t> crc =
          checksum == file.metadata().end() ? std::nullopt : ParseChecksum(checksum->second);
      if (!crc.has_value()) {
        return absl::DataLossError(absl::StrCat(file.path(), ": tensor \"", entry.name,
                                                "\" has no valid \"", kChecksumKey,
                                                "\" metadata (8 hex digits): a damaged part"));
      }
      pieces[entry.name].push_back({parts.size(), *region, *crc});
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

absl::StatusOr<std::vector<CheckpointReader::PieceCopy>> CheckpointReader::PlanRead(
    const std::string& name, const io::TensorRegion& region) const {
  const auto found = pieces_.find(name);
  if (found == pieces_.end()) {
    return absl::FailedPreconditionError(
        absl::StrCat(path_, " has no tensor \"", name,
                     "\": the checkpoint is of another model (model.* or model.ssa.* changed?)"));
  }
  std::vector<PieceCopy> copies;
  std::vector<std::pair<int64_t, int64_t>> filled;  // (position, length) in the region's data
  for (const Piece& piece : found->second) {
    if (piece.region.full_shape != region.full_shape) {
      return absl::FailedPreconditionError(
          absl::StrCat(parts_[piece.part].path(), ": tensor \"", name, "\" is ",
                       ShapeToString(piece.region.full_shape), " but the job's model has ",
                       ShapeToString(region.full_shape), ": the checkpoint is of another model"));
    }
    PieceCopy copy{&piece, 0, 0, io::OverlapOf(piece.region, region)};
    if (copy.overlaps.empty()) continue;
    // Only the piece's elements between the first and the last overlap are read.
    copy.first = copy.overlaps.front().from;
    copy.last = copy.overlaps.back().from + copy.overlaps.back().length;
    for (io::RegionOverlap& o : copy.overlaps) {
      o.from -= copy.first;
      filled.emplace_back(o.to, o.length);
    }
    copies.push_back(std::move(copy));
  }
  // The pieces must fill the region exactly once: no gap (elements left unset), no overlap.
  std::sort(filled.begin(), filled.end());
  int64_t covered = 0;
  const auto where = [&](int64_t begin, int64_t end) {
    return absl::StrCat("elements [", begin, ", ", end, ") of the ", region.numel(), " of \"", name,
                        "\" ", region.ToString());
  };
  for (const auto& [position, length] : filled) {
    if (position < covered) {
      return absl::DataLossError(absl::StrCat(path_, ": its parts hold ",
                                              where(position, std::min(covered, position + length)),
                                              " more than once (a damaged or foreign part file?)"));
    }
    if (position > covered) {
      return absl::DataLossError(absl::StrCat(path_, ": no part holds ", where(covered, position),
                                              " (a damaged or foreign part file?)"));
    }
    covered += length;
  }
  if (covered != region.numel()) {
    return absl::DataLossError(absl::StrCat(path_, ": no part holds ",
                                            where(covered, region.numel()),
                                            " (a damaged or foreign part file?)"));
  }
  return copies;
}

absl::Status CheckpointReader::Verify(const std::string& name, const Piece& piece) const {
  if (piece.verified) return absl::OkStatus();
  const io::SafetensorsFile& file = parts_[piece.part];
  const uint32_t crc = io::Crc32c(file.Bytes(*file.Find(name)));
  if (crc != piece.crc32c) {
    return absl::DataLossError(absl::StrCat(
        file.path(), ": the bytes of tensor \"", name, "\" ", piece.region.ToString(),
        " fail their checksum (crc32c ", FormatChecksum(crc), ", written ",
        FormatChecksum(piece.crc32c),
        "): the file changed after it was written; remove this checkpoint directory to resume "
        "from the one before"));
  }
  piece.verified = true;
  return absl::OkStatus();
}

absl::Status CheckpointReader::Check(const std::string& name,
                                     const io::TensorRegion& region) const {
  KELVIN_ASSIGN_OR_RETURN(const std::vector<PieceCopy> copies, PlanRead(name, region));
  for (const PieceCopy& copy : copies) KELVIN_RETURN_IF_ERROR(Verify(name, *copy.piece));
  return absl::OkStatus();
}

absl::StatusOr<Tensor> CheckpointReader::Read(const std::string& name,
                                              const io::TensorRegion& region,
                                              std::optional<DType> dtype) const {
  KELVIN_ASSIGN_OR_RETURN(const std::vector<PieceCopy> copies, PlanRead(name, region));
  if (region.numel() == 0) return Tensor::Empty({0}, dtype.value_or(DType::kF32));
  Tensor data;  // [region.numel()], allocated with the first piece's dtype
  for (const PieceCopy& copy : copies) {
    KELVIN_RETURN_IF_ERROR(Verify(name, *copy.piece));
    const io::SafetensorsFile& file = parts_[copy.piece->part];
    KELVIN_ASSIGN_OR_RETURN(const Tensor stored, file.ReadSlice(name, 0, copy.first, copy.last));
    if (dtype.has_value() && stored.dtype() != *dtype) {
      return absl::FailedPreconditionError(absl::StrCat(
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
    io::CopyOverlap(copy.overlaps, stored, data);
  }
  return data;
}

}  // namespace kelvin::training
