// Hugging Face checkpoint directories: model.safetensors, or model.safetensors.index.json
// ({"metadata": {"total_size": N}, "weight_map": {tensor name: shard file}}) with its shards
// model-00001-of-0000N.safetensors ..., read as one set of tensors and written as save_pretrained
// does.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/io/safetensors.h"

namespace kelvin::io {

inline constexpr std::string_view kHfSingleFileName = "model.safetensors";
inline constexpr std::string_view kHfIndexFileName = "model.safetensors.index.json";

class HfCheckpoint {  // movable, not copyable
 public:
  // Opens (and validates) every shard once. `path` is the checkpoint directory or one
  // .safetensors file. With both a single file and an index present, the single file wins, as in
  // transformers. The index must list exactly the tensors its shards hold.
  static absl::StatusOr<HfCheckpoint> Open(const std::string& path);

  const std::string& path() const { return path_; }
  std::vector<std::string> TensorNames() const;               // sorted
  const SafetensorsEntry* Find(std::string_view name) const;  // nullptr if absent
  // As SafetensorsFile::Read / ReadSlice, from the shard holding `name`.
  absl::StatusOr<Tensor> Read(std::string_view name, std::optional<DType> as = std::nullopt) const;
  absl::StatusOr<Tensor> ReadSlice(std::string_view name, int axis, int64_t begin, int64_t end,
                                   std::optional<DType> as = std::nullopt) const;
  // The bytes of tensor `name` as its shard stores them (mapped, not copied).
  absl::StatusOr<std::string_view> Bytes(std::string_view name) const;

 private:
  HfCheckpoint(std::string path, std::vector<SafetensorsFile> shards,
               std::map<std::string, size_t, std::less<>> shard_of)
      : path_(std::move(path)), shards_(std::move(shards)), shard_of_(std::move(shard_of)) {}
  absl::StatusOr<const SafetensorsFile*> ShardOf(std::string_view name) const;

  std::string path_;
  std::vector<SafetensorsFile> shards_;
  std::map<std::string, size_t, std::less<>> shard_of_;  // tensor name -> index in shards_
};

// A tensor to write without holding all of them at once: its name, shape and dtype, and the
// function that makes it (called once, when its shard is written; it must return a host tensor of
// that shape and dtype).
struct HfTensorSource {
  std::string name;
  Shape shape;
  DType dtype;
  std::function<absl::StatusOr<Tensor>()> make;
};

// Writes `tensors` into `directory` (created if missing) as save_pretrained does: model.safetensors
// when their bytes fit in max_shard_bytes, else shards of at most max_shard_bytes of tensor data
// (a larger tensor gets a shard of its own), filled in the given order and named
// model-00001-of-0000N.safetensors, plus model.safetensors.index.json, plus `extra_files`
// (name, contents: config.json). The files are written into "<directory>.partial" first, which a
// failure removes (a full disk leaves neither an empty nor a half-written directory; one that an
// interrupted export left is reused, any other file or directory at that path is refused), then
// renamed into `directory` (created), where the files of an earlier checkpoint layout (other
// shards, index or single file) are removed and other files kept. Each file has {"format": "pt"}
// metadata. Only one shard's tensors are made and held at a time.
absl::Status WriteHfCheckpoint(
    const std::string& directory, const std::vector<HfTensorSource>& tensors,
    size_t max_shard_bytes = size_t{5} << 30,
    const std::vector<std::pair<std::string, std::string>>& extra_files = {});
// The same with every tensor in one file named `file_name` whatever their size (peft's
// adapter_model.safetensors, which peft never shards); an earlier model.safetensors, index or
// shard in `directory` is removed as above.
absl::Status WriteSingleFileCheckpoint(
    const std::string& directory, std::string_view file_name,
    const std::vector<HfTensorSource>& tensors,
    const std::vector<std::pair<std::string, std::string>>& extra_files = {});
// The same for tensors already in memory.
absl::Status WriteHfCheckpoint(const std::string& directory,
                               const std::vector<std::pair<std::string, Tensor>>& tensors,
                               size_t max_shard_bytes = size_t{5} << 30);
// Sources that hand out the tensors already in memory.
std::vector<HfTensorSource> HfTensorSourcesOf(
    const std::vector<std::pair<std::string, Tensor>>& tensors);

}  // namespace kelvin::io
