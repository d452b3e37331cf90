// Internal to core/io/safetensors*.cc: a stored tensor's elements converted to the dtype a read
// asks for (floats rounded to nearest-even, integers range-checked).
#pragma once

#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "core/io/safetensors.h"
#include "core/io/safetensors_dtypes.h"
#include "core/tensor.h"

namespace kelvin::io::internal {

// The dtype a read of `entry` produces, given the caller's `as`; an error when Kelvin cannot
// read or convert the stored one.
absl::StatusOr<DType> TargetDType(const std::string& path, const SafetensorsEntry& entry,
                                  const FileDType& from, std::optional<DType> as);

// Rows [begin, end) of `entry` seen as [outer, rows, inner] (the data at `data`), converted to
// `to`, as a new host tensor of `out_shape`.
absl::StatusOr<Tensor> ReadRows(const std::string& path, const char* data,
                                const SafetensorsEntry& entry, const FileDType& from, DType to,
                                int64_t outer, int64_t rows, int64_t inner, int64_t begin,
                                int64_t end, const Shape& out_shape);

}  // namespace kelvin::io::internal
