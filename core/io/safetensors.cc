// The safetensors reader over a validated header (safetensors_header.h), converting on read
// (safetensors_convert.h), and the "no such tensor" error shared with hf_checkpoint.cc.
#include "core/io/safetensors.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/io/safetensors_convert.h"
#include "core/io/safetensors_dtypes.h"
#include "core/io/safetensors_header.h"
#include "core/status.h"
#include "core/strings/did_you_mean.h"

namespace kelvin::io {

using internal::FileDType;
using internal::FindFileDType;
using internal::Quoted;

namespace {

int64_t Product(const Shape& shape, size_t first, size_t last) {
  int64_t product = 1;
  for (size_t i = first; i < last; ++i) product *= shape[i];
  return product;
}

}  // namespace

absl::StatusOr<SafetensorsFile> SafetensorsFile::Open(const std::string& path) {
  KELVIN_ASSIGN_OR_RETURN(MappedFile file, MappedFile::Open(path));
  KELVIN_ASSIGN_OR_RETURN(internal::SafetensorsHeader header,
                          internal::ParseSafetensorsHeader(file));
  return SafetensorsFile(std::move(file), header.data_offset, std::move(header.entries),
                         std::move(header.metadata));
}

const SafetensorsEntry* SafetensorsFile::Find(std::string_view name) const {
  const auto it = std::lower_bound(
      entries_.begin(), entries_.end(), name,
      [](const SafetensorsEntry& entry, std::string_view key) { return entry.name < key; });
  return it != entries_.end() && it->name == name ? &*it : nullptr;
}

absl::StatusOr<Tensor> SafetensorsFile::Read(std::string_view name, std::optional<DType> as) const {
  const SafetensorsEntry* entry = Find(name);
  if (entry == nullptr) {
    std::vector<std::string> known;
    for (const SafetensorsEntry& e : entries_) known.push_back(e.name);
    return internal::TensorNotFound(path(), name, known);
  }
  const FileDType& from = *FindFileDType(entry->dtype_name);
  KELVIN_ASSIGN_OR_RETURN(const DType to, internal::TargetDType(path(), *entry, from, as));
  return internal::ReadRows(path(), file_.data() + data_offset_ + entry->begin, *entry, from, to,
                            /*outer=*/1, /*rows=*/1, /*inner=*/NumElements(entry->shape),
                            /*begin=*/0,
                            /*end=*/1, entry->shape);
}

std::string_view SafetensorsFile::Bytes(const SafetensorsEntry& entry) const {
  return {file_.data() + data_offset_ + entry.begin, entry.end - entry.begin};
}

absl::StatusOr<Tensor> SafetensorsFile::ReadSlice(std::string_view name, int axis, int64_t begin,
                                                  int64_t end, std::optional<DType> as) const {
  const SafetensorsEntry* entry = Find(name);
  if (entry == nullptr) return Read(name, as);  // the NotFound error
  const Shape& shape = entry->shape;
  const int ndim = static_cast<int>(shape.size());
  const int resolved_axis = axis < 0 ? axis + ndim : axis;
  if (resolved_axis < 0 || resolved_axis >= ndim) {
    return absl::InvalidArgumentError(absl::StrCat(path(), ": axis ", axis,
                                                   " is out of range for tensor ", Quoted(name),
                                                   " of shape ", ShapeToString(shape)));
  }
  const size_t axis_index = static_cast<size_t>(resolved_axis);
  const int64_t rows = shape[axis_index];
  if (begin < 0 || begin > end || end > rows) {
    return absl::InvalidArgumentError(
        absl::StrCat(path(), ": rows [", begin, ", ", end, ") along axis ", axis,
                     " are out of range for tensor ", Quoted(name), " of shape ",
                     ShapeToString(shape), " (valid: 0 <= begin <= end <= ", rows, ")"));
  }
  const FileDType& from = *FindFileDType(entry->dtype_name);
  KELVIN_ASSIGN_OR_RETURN(const DType to, internal::TargetDType(path(), *entry, from, as));
  Shape out_shape = shape;  // [..., end - begin, ...]
  out_shape[axis_index] = end - begin;
  return internal::ReadRows(path(), file_.data() + data_offset_ + entry->begin, *entry, from, to,
                            Product(shape, 0, axis_index), rows,
                            Product(shape, axis_index + 1, shape.size()), begin, end, out_shape);
}

namespace internal {

absl::Status TensorNotFound(std::string_view where, std::string_view name,
                            const std::vector<std::string>& known) {
  if (known.empty()) {
    return absl::NotFoundError(absl::StrCat(std::string(where), ": no tensor ", Quoted(name),
                                            "; it holds no tensors at all"));
  }
  std::vector<std::string> closest;
  for (const std::string& candidate : strings::NearestNames(name, known, 5)) {
    closest.push_back(Quoted(candidate));
  }
  return absl::NotFoundError(
      absl::StrCat(std::string(where), ": no tensor ", Quoted(name), " among its ", known.size(),
                   " tensors; the closest names are ", absl::StrJoin(closest, ", ")));
}

}  // namespace internal
}  // namespace kelvin::io
