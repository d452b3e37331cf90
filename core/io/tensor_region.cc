// Regions of full tensors: their runs in the full tensor's element order, their overlaps, and
// their text form for checkpoint metadata.
#include "core/io/tensor_region.h"

#include <algorithm>
#include <charconv>
#include <cstring>
#include <tuple>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "core/check.h"
#include "core/status.h"

namespace kelvin::io {
namespace {

// A contiguous stretch of a region: `length` elements at `full` in the full tensor's row-major
// order and at `position` in the region's data.
struct Run {
  int64_t full = 0, position = 0, length = 0;
};

int64_t Product(const Shape& shape, size_t begin, size_t end) {
  int64_t product = 1;
  for (size_t i = begin; i < end; ++i) product *= shape[i];
  return product;
}

// The region's runs, in increasing full offset (which is also the data's order). Only the slice's
// rows that hold some of the region's elements are visited: as many runs as it has, not as the
// slice has.
std::vector<Run> RunsOf(const TensorRegion& region) {
  std::vector<Run> runs;
  const int64_t first = region.flat_begin, last = region.flat_begin + region.flat_count;
  if (first >= last) return runs;
  if (region.axis < 0) return {{first, 0, last - first}};
  const auto axis = static_cast<size_t>(region.axis);
  const int64_t inner = Product(region.full_shape, axis + 1, region.full_shape.size());
  const int64_t extent = region.full_shape[axis];
  const int64_t row = region.count * inner;  // the slice's elements per outer index
  for (int64_t o = first / row; o * row < last; ++o) {
    const int64_t begin = std::max(o * row, first), end = std::min((o + 1) * row, last);
    const int64_t full = (o * extent + region.begin) * inner + (begin - o * row);
    if (!runs.empty() && runs.back().full + runs.back().length == full) {
      runs.back().length += end - begin;  // the whole extent: adjacent rows join
    } else {
      runs.push_back({full, begin - first, end - begin});
    }
  }
  return runs;
}

absl::StatusOr<int64_t> ParseCount(absl::string_view text, absl::string_view region) {
  int64_t value = 0;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (error != std::errc() || end != text.data() + text.size() || text.empty() || value < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("tensor region \"", region, "\": \"", text, "\" is not a count"));
  }
  return value;
}

// "a+b" -> {a, b}.
absl::StatusOr<std::pair<int64_t, int64_t>> ParseRange(absl::string_view text,
                                                       absl::string_view region) {
  const std::vector<absl::string_view> parts = absl::StrSplit(text, '+');
  if (parts.size() != 2) {
    return absl::InvalidArgumentError(
        absl::StrCat("tensor region \"", region, "\": \"", text, "\" is not begin+count"));
  }
  KELVIN_ASSIGN_OR_RETURN(const int64_t begin, ParseCount(parts[0], region));
  KELVIN_ASSIGN_OR_RETURN(const int64_t count, ParseCount(parts[1], region));
  return std::make_pair(begin, count);
}

}  // namespace

TensorRegion TensorRegion::Whole(const Shape& full_shape) {
  TensorRegion region;
  region.full_shape = full_shape;
  region.flat_count = NumElements(full_shape);
  return region;
}

TensorRegion TensorRegion::Slice(const Shape& full_shape, int axis, int64_t begin, int64_t count) {
  KELVIN_CHECK(axis >= 0 && static_cast<size_t>(axis) < full_shape.size() && begin >= 0 &&
               count >= 0 && begin + count <= full_shape[static_cast<size_t>(axis)])
      << "slice [" << begin << ", " << begin + count << ") along axis " << axis << " of "
      << ShapeToString(full_shape);
  TensorRegion region;
  region.full_shape = full_shape;
  region.axis = axis;
  region.begin = begin;
  region.count = count;
  region.flat_count = region.SliceElements();
  return region;
}

TensorRegion TensorRegion::Elements(int64_t begin, int64_t count) const {
  KELVIN_CHECK(begin >= 0 && count >= 0 && begin + count <= flat_count)
      << "elements [" << begin << ", " << begin + count << ") of " << ToString();
  TensorRegion region = *this;
  region.flat_begin = flat_begin + begin;
  region.flat_count = count;
  return region;
}

int64_t TensorRegion::SliceElements() const {
  if (axis < 0) return NumElements(full_shape);
  const auto a = static_cast<size_t>(axis);
  return Product(full_shape, 0, a) * count * Product(full_shape, a + 1, full_shape.size());
}

std::string TensorRegion::ToString() const {
  std::string text = ShapeToString(full_shape);
  if (axis >= 0) absl::StrAppend(&text, " axis ", axis, " [", begin, ", ", begin + count, ")");
  if (flat_begin != 0 || flat_count != SliceElements()) {
    absl::StrAppend(&text, " elements [", flat_begin, ", ", flat_begin + flat_count, ")");
  }
  return text;
}

std::string TensorRegion::Encode() const {
  return absl::StrCat(absl::StrJoin(full_shape, "x"), "/", axis, "/", begin, "+", count, "/",
                      flat_begin, "+", flat_count);
}

absl::StatusOr<TensorRegion> TensorRegion::Decode(std::string_view std_text) {
  const absl::string_view text(std_text.data(), std_text.size());  // Debian's Abseil: its own
  const std::vector<absl::string_view> parts = absl::StrSplit(text, '/');
  if (parts.size() != 4) {
    return absl::InvalidArgumentError(absl::StrCat(
        "tensor region \"", text, "\" is not shape/axis/begin+count/flat_begin+flat_count"));
  }
  TensorRegion region;
  int64_t total = 1;        // of the nonzero dimensions: every sub-product fits too
  if (!parts[0].empty()) {  // a scalar's shape is empty
    for (const absl::string_view dim : absl::StrSplit(parts[0], 'x')) {
      KELVIN_ASSIGN_OR_RETURN(const int64_t size, ParseCount(dim, text));
      if (__builtin_mul_overflow(total, std::max<int64_t>(size, 1), &total)) {
        return absl::InvalidArgumentError(
            absl::StrCat("tensor region \"", text, "\": its shape has too many elements"));
      }
      region.full_shape.push_back(size);
    }
  }
  if (parts[1] == "-1") {
    region.axis = -1;
  } else {
    KELVIN_ASSIGN_OR_RETURN(const int64_t axis, ParseCount(parts[1], text));
    if (axis >= static_cast<int64_t>(region.full_shape.size())) {
      return absl::InvalidArgumentError(absl::StrCat("tensor region \"", text, "\": axis ", axis,
                                                     " is not an axis of its shape"));
    }
    region.axis = static_cast<int>(axis);
  }
  KELVIN_ASSIGN_OR_RETURN(const auto slice, ParseRange(parts[2], text));
  KELVIN_ASSIGN_OR_RETURN(const auto elements, ParseRange(parts[3], text));
  std::tie(region.begin, region.count) = slice;
  std::tie(region.flat_begin, region.flat_count) = elements;
  // Compared by subtraction: begin + count may not fit in 64 bits.
  if (region.axis >= 0 &&
      (region.begin > region.full_shape[static_cast<size_t>(region.axis)] ||
       region.count > region.full_shape[static_cast<size_t>(region.axis)] - region.begin)) {
    return absl::InvalidArgumentError(
        absl::StrCat("tensor region \"", text, "\": the slice ends past its axis"));
  }
  if (region.flat_begin > region.SliceElements() ||
      region.flat_count > region.SliceElements() - region.flat_begin) {
    return absl::InvalidArgumentError(
        absl::StrCat("tensor region \"", text, "\": the elements end past its slice"));
  }
  return region;
}

std::vector<RegionOverlap> OverlapOf(const TensorRegion& from, const TensorRegion& to) {
  KELVIN_CHECK(from.full_shape == to.full_shape)
      << "regions of different tensors: " << from.ToString() << " and " << to.ToString();
  const std::vector<Run> a = RunsOf(from), b = RunsOf(to);
  std::vector<RegionOverlap> overlaps;
  size_t i = 0, j = 0;
  while (i < a.size() && j < b.size()) {
    const int64_t begin = std::max(a[i].full, b[j].full);
    const int64_t end = std::min(a[i].full + a[i].length, b[j].full + b[j].length);
    if (begin < end) {
      overlaps.push_back(
          {a[i].position + (begin - a[i].full), b[j].position + (begin - b[j].full), end - begin});
    }
    // Advance whichever run ends first.
    if (a[i].full + a[i].length <= b[j].full + b[j].length) {
      ++i;
    } else {
      ++j;
    }
  }
  return overlaps;
}

int64_t CopyOverlap(const std::vector<RegionOverlap>& overlaps, const Tensor& source,
                    Tensor& target) {
  KELVIN_CHECK(source.is_cpu() && target.is_cpu() && source.dtype() == target.dtype())
      << "CopyOverlap needs host tensors of one dtype: " << source.ToString() << " -> "
      << target.ToString();
  const size_t element = DTypeSize(source.dtype());
  const auto* from = static_cast<const char*>(source.raw_data());
  auto* to = static_cast<char*>(target.raw_data());
  int64_t copied = 0;
  for (const RegionOverlap& o : overlaps) {
    KELVIN_CHECK(o.from + o.length <= source.numel() && o.to + o.length <= target.numel())
        << "overlap outside the tensors " << source.ToString() << ", " << target.ToString();
    std::memcpy(to + static_cast<size_t>(o.to) * element,
                from + static_cast<size_t>(o.from) * element,
                static_cast<size_t>(o.length) * element);
    copied += o.length;
  }
  return copied;
}

}  // namespace kelvin::io
