// TensorRegion: which elements of a full (unsharded) tensor one process holds, so that a tensor
// written in pieces by one parallel layout can be read back by another; and the overlaps through
// which data is copied between two regions.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "core/tensor.h"

namespace kelvin::io {

// A region is the slice [begin, begin + count) along `axis` of the full tensor (tensor
// parallelism's shard; axis -1: the whole tensor), and inside that slice, in its row-major order,
// the elements [flat_begin, flat_begin + flat_count) (ZeRO-1's shard of a flat buffer; the whole
// slice otherwise). The region's data is those elements in that order.
struct TensorRegion {
  Shape full_shape;
  int axis = -1;                           // -1: no slice
  int64_t begin = 0, count = 0;            // the slice along axis (ignored when axis is -1)
  int64_t flat_begin = 0, flat_count = 0;  // elements of the slice, row-major

  // The whole tensor, and the slice of a tensor-parallel shard (all of its elements).
  static TensorRegion Whole(const Shape& full_shape);
  static TensorRegion Slice(const Shape& full_shape, int axis, int64_t begin, int64_t count);
  // Elements [flat_begin, flat_begin + flat_count) of this region's data (a sub-range of it).
  TensorRegion Elements(int64_t begin, int64_t count) const;

  int64_t numel() const { return flat_count; }
  int64_t SliceElements() const;  // elements of the whole slice
  bool operator==(const TensorRegion&) const = default;

  // "[4096, 4096] axis 1 [512, 1024) elements [0, 2097152)", for messages.
  std::string ToString() const;
  // A compact text form for checkpoint metadata, "4096x4096/1/512+512/0+2097152", and its parse.
  std::string Encode() const;
  static absl::StatusOr<TensorRegion> Decode(std::string_view text);
};

// One stretch that two regions share: `length` elements at `from` in the first region's data and
// at `to` in the second's.
struct RegionOverlap {
  int64_t from = 0, to = 0, length = 0;
};

// In the full tensor's row-major element order a region is a list of contiguous runs, increasing;
// copying between two regions intersects their runs.
// Every stretch of elements that `from` and `to` share (both of the same full shape), in order.
std::vector<RegionOverlap> OverlapOf(const TensorRegion& from, const TensorRegion& to);

// Copies the shared stretches from `source` (the data of the region `from`: contiguous host
// tensor of from.numel() elements) into `target` (that of `to`, same dtype); returns the elements
// copied.
int64_t CopyOverlap(const std::vector<RegionOverlap>& overlaps, const Tensor& source,
                    Tensor& target);

}  // namespace kelvin::io
