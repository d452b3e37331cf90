// CheckpointReader: one complete training checkpoint opened for reading any region of its logical
// tensors (training/checkpoint/checkpoint.h), whichever layout wrote it: every part file is mapped
// and each piece's region decoded and matched against its 1-d data at Open; a read checks that the
// pieces hold each element of the region exactly once, checks each piece it touches (whole) against
// its CRC-32C the first time, and copies from those that overlap it. Reads are not thread-safe.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "core/io/safetensors.h"
#include "core/io/tensor_region.h"
#include "training/checkpoint/checkpoint_format.h"

namespace kelvin::training {

class CheckpointReader {  // movable, not copyable (keeps the part files mapped)
 public:
  // The checkpoint directory `path`: its index, then all its part files; a missing or damaged
  // file, or a piece whose region does not match its data, is an error naming the file.
  static absl::StatusOr<CheckpointReader> Open(const std::string& path);

  const std::string& path() const { return path_; }
  const CheckpointIndex& index() const { return index_; }
  std::vector<std::string> TensorNames() const;  // sorted
  // The part file that holds a piece of `name` (for messages), one of TensorNames().
  const std::string& FileOf(const std::string& name) const;

  // The elements of logical tensor `name` in `region` (row-major, as the region orders them): a
  // host tensor [region.numel()] in the dtype it was saved in, which must be `dtype` when given.
  // A tensor of another full shape, another dtype, elements no piece holds, or a piece whose bytes
  // fail their checksum are errors naming the file and the tensor.
  absl::StatusOr<Tensor> Read(const std::string& name, const io::TensorRegion& region,
                              std::optional<DType> dtype = std::nullopt) const;
  // Read's checks without the copy (the tensor, its full shape, every element held once, the
  // checksums of the pieces it would read): what to check before writing anything.
  absl::Status Check(const std::string& name, const io::TensorRegion& region) const;

 private:
  struct Piece {
    size_t part = 0;  // index in parts_
    io::TensorRegion region;
    uint32_t crc32c = 0;            // of its bytes, as written
    mutable bool verified = false;  // its bytes checked against crc32c (by the first read)
  };
  // What a read copies from one piece: its elements [first, last), to the region's data at the
  // overlaps (whose `from` count from `first`).
  struct PieceCopy {
    const Piece* piece = nullptr;
    int64_t first = 0, last = 0;
    std::vector<io::RegionOverlap> overlaps;
  };
  // The whole piece's bytes against its checksum, once: an error naming the file and the tensor.
  absl::Status Verify(const std::string& name, const Piece& piece) const;
  absl::StatusOr<std::vector<PieceCopy>> PlanRead(const std::string& name,
                                                  const io::TensorRegion& region) const;
  CheckpointReader(std::string path, CheckpointIndex index, std::vector<io::SafetensorsFile> parts,
                   std::map<std::string, std::vector<Piece>> pieces)
      : path_(std::move(path)),
        index_(std::move(index)),
        parts_(std::move(parts)),
        pieces_(std::move(pieces)) {}

  std::string path_;
  CheckpointIndex index_;
  std::vector<io::SafetensorsFile> parts_;
  std::map<std::string, std::vector<Piece>> pieces_;  // by logical tensor name
};

}  // namespace kelvin::training
