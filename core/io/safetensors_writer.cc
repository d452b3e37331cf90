// The safetensors writer: the header padded so the data starts 8-byte aligned, the file written
// atomically.
#include <cstring>
#include <nlohmann/json.hpp>
#include <set>

#include "absl/strings/str_cat.h"
#include "core/io/atomic_file.h"
#include "core/io/safetensors.h"
#include "core/io/safetensors_dtypes.h"

namespace kelvin::io {

using internal::FileDTypeOf;
using internal::Quoted;

absl::Status WriteSafetensors(const std::string& path,
                              const std::vector<std::pair<std::string, Tensor>>& tensors,
                              const std::map<std::string, std::string>& metadata) {
  const auto invalid = [&path](absl::string_view detail) {
    return absl::InvalidArgumentError(absl::StrCat("cannot write ", path, ": ", detail));
  };
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  std::set<std::string_view> names;
  std::vector<std::string_view> parts = {"", ""};  // the header length and the header, set below
  size_t offset = 0;
  for (const auto& [name, tensor] : tensors) {
    if (name.empty() || name == "__metadata__") {
      return invalid(absl::StrCat("tensor name ", Quoted(name), " is reserved or empty"));
    }
    if (!names.insert(name).second) {
      return invalid(absl::StrCat("tensor name ", Quoted(name), " appears twice"));
    }
    if (!tensor.defined()) return invalid(absl::StrCat("tensor ", Quoted(name), " is undefined"));
    if (!tensor.is_cpu()) {
      return invalid(absl::StrCat("tensor ", Quoted(name), " is ", tensor.ToString(),
                                  "; copy it to the host first"));
    }
    header[name] = {{"dtype", FileDTypeOf(tensor.dtype()).name},
                    {"shape", tensor.shape()},
                    {"data_offsets", {offset, offset + tensor.nbytes()}}};
    offset += tensor.nbytes();
    parts.emplace_back(static_cast<const char*>(tensor.raw_data()), tensor.nbytes());
  }
  std::string header_text;
  try {
    header_text = header.dump();
  } catch (const nlohmann::json::type_error& error) {
    return invalid(
        absl::StrCat("tensor names and metadata must be valid UTF-8 (", error.what(), ")"));
  }
  header_text.append((8 - header_text.size() % 8) % 8, ' ');  // data starts 8-byte aligned
  const uint64_t header_bytes = header_text.size();
  char length[8];
  std::memcpy(length, &header_bytes, sizeof(length));
  parts[0] = std::string_view(length, sizeof(length));
  parts[1] = header_text;
  return WriteFileAtomically(path, parts);
}

}  // namespace kelvin::io
