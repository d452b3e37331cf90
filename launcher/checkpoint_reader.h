// CheckpointReader: one complete training checkpoint opened for reading any region of its logical
// tensors (launcher/checkpoint.h), whichever layout wrote it: every part file is mapped and its
// pieces' regions checked once at Open; a read copies from the pieces that overlap the region.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "core/io/safetensors.h"
#include "core/io/tensor_region.h"
#include "launcher/checkpoint_format.h"

namespace kelvin::launcher {

class CheckpointReader {  // movable, not copyable (keeps the part files mapped)
 public:
  // The checkpoint directory `path`: its index, then all its part files; a missing or damaged
  // file, or a piece whose region does not match its data, is an error naming the file.
  static absl::StatusOr<CheckpointReader> Open(const std::string& path);

  const std::string& path() const { return path_; }
  const CheckpointIndex& index() const { return index_; }
  std::vector<std::string> TensorNames() const;  // sorted
  bool Has(const std::string& name) const { return pieces_.count(name) > 0; }
  // The part file that holds a piece of `name` (for messages); Has(name) must be true.
  const std::string& FileOf(const std::string& name) const;

  // The elements of logical tensor `name` in `region` (row-major, as the region orders them): a
  // host tensor [region.numel()] in the dtype it was saved in, which must be `dtype` when given.
  // A tensor of another full shape, another dtype, or elements no piece holds are errors naming
  // the file and the tensor.
  absl::StatusOr<Tensor> Read(const std::string& name, const io::TensorRegion& region,
                              std::optional<DType> dtype = std::nullopt) const;

 private:
  struct Piece {
    size_t part = 0;  // index in parts_
    io::TensorRegion region;
  };
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

}  // namespace kelvin::launcher
