// Tensor regions: a tensor cut into the pieces of one layout (tensor-parallel slices along an axis,
// each cut again into uneven ZeRO-1 element ranges) is put back together exactly under other
// layouts, against an element-by-element index computation; the metadata text form round-trips
// and its damage is a clear error.
#include "core/io/tensor_region.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <numeric>

namespace kelvin::io {
namespace {

using ::testing::HasSubstr;

// The full tensor's element i holds i (f64: exact for these sizes).
Tensor Iota(const Shape& shape) {
  Tensor t = Tensor::Empty(shape, DType::kF64);
  std::iota(t.data<double>(), t.data<double>() + t.numel(), 0.0);
  return t;
}

// The region's data, element by element: each element of the slice in its row-major order mapped
// to its multi-index in the full tensor (independent of the runs the library computes).
Tensor DataOf(const Tensor& full, const TensorRegion& region) {
  const Shape& shape = region.full_shape;
  Shape slice = shape;
  if (region.axis >= 0) slice[static_cast<size_t>(region.axis)] = region.count;
  std::vector<double> values;
  for (int64_t e = 0; e < NumElements(slice); ++e) {
    int64_t rest = e, full_index = 0, stride = 1;
    for (int d = static_cast<int>(shape.size()) - 1; d >= 0; --d) {
      int64_t coordinate = rest % slice[static_cast<size_t>(d)];
      rest /= slice[static_cast<size_t>(d)];
      if (d == region.axis) coordinate += region.begin;
      full_index += coordinate * stride;
      stride *= shape[static_cast<size_t>(d)];
    }
    values.push_back(full.data<double>()[full_index]);
  }
  Tensor data = Tensor::Empty({region.numel()}, DType::kF64);
  std::copy(values.begin() + region.flat_begin,
            values.begin() + region.flat_begin + region.flat_count, data.data<double>());
  return data;
}

// The pieces of a layout: `parts` slices along `axis` (-1: whole), each cut into `shards` element
// ranges of ceil(n / shards) (the last ones shorter or empty, as ZeRO-1 cuts).
std::vector<TensorRegion> Layout(const Shape& shape, int axis, int64_t parts, int64_t shards) {
  std::vector<TensorRegion> slices;
  if (axis < 0) {
    slices.push_back(TensorRegion::Whole(shape));
  } else {
    const int64_t per = shape[static_cast<size_t>(axis)] / parts;
    for (int64_t p = 0; p < parts; ++p) {
      slices.push_back(TensorRegion::Slice(shape, axis, p * per, per));
    }
  }
  std::vector<TensorRegion> pieces;
  for (const TensorRegion& slice : slices) {
    const int64_t n = slice.numel(), per = (n + shards - 1) / shards;
    for (int64_t s = 0; s < shards; ++s) {
      const int64_t begin = std::min(s * per, n);
      pieces.push_back(slice.Elements(begin, std::min(per, n - begin)));
    }
  }
  return pieces;
}

// Writes `full` as the pieces of `written`, reads every piece of `read` back from them.
void ExpectReshards(const Shape& shape, const std::vector<TensorRegion>& written,
                    const std::vector<TensorRegion>& read) {
  const Tensor full = Iota(shape);
  for (const TensorRegion& want : read) {
    Tensor got = Tensor::ZerosCpu({want.numel()}, DType::kF64);
    int64_t copied = 0;
    for (const TensorRegion& piece : written) {
      copied += CopyOverlap(OverlapOf(piece, want), DataOf(full, piece), got);
    }
    EXPECT_EQ(copied, want.numel()) << want.ToString();
    const Tensor expected = DataOf(full, want);
    for (int64_t i = 0; i < want.numel(); ++i) {
      ASSERT_EQ(got.data<double>()[i], expected.data<double>()[i])
          << want.ToString() << ", element " << i;
    }
  }
}

TEST(TensorRegion, PiecesOfOneLayoutAssembleEveryOtherLayout) {
  const Shape matrix = {12, 20};
  const std::vector<std::vector<TensorRegion>> layouts = {
      Layout(matrix, -1, 1, 1),  // one process
      Layout(matrix, 0, 4, 1),   // row-parallel TP4
      Layout(matrix, 1, 2, 1),   // column-parallel TP2
      Layout(matrix, 1, 4, 3),   // TP4 x ZeRO-1 over 3 ranks (uneven)
      Layout(matrix, 0, 2, 7),   // TP2 x ZeRO-1 over 7 ranks (empty tails)
      Layout(matrix, -1, 1, 5),  // replicated, ZeRO-1 over 5
  };
  for (size_t a = 0; a < layouts.size(); ++a) {
    for (size_t b = 0; b < layouts.size(); ++b) {
      SCOPED_TRACE(::testing::Message() << "layout " << a << " read as layout " << b);
      ExpectReshards(matrix, layouts[a], layouts[b]);
    }
  }
  // A middle axis of a 3-d tensor (heads of [G, heads, d]).
  const Shape cube = {3, 8, 5};
  ExpectReshards(cube, Layout(cube, 1, 4, 2), Layout(cube, 1, 2, 3));
  ExpectReshards(cube, Layout(cube, 2, 5, 1), Layout(cube, 0, 3, 2));
}

TEST(TensorRegion, DisjointRegionsShareNothing) {
  const Shape shape = {8, 6};
  EXPECT_TRUE(
      OverlapOf(TensorRegion::Slice(shape, 0, 0, 4), TensorRegion::Slice(shape, 0, 4, 4)).empty());
  EXPECT_TRUE(
      OverlapOf(TensorRegion::Slice(shape, 1, 0, 3), TensorRegion::Slice(shape, 1, 3, 3)).empty());
  // Interleaved column slices against a row slice: one stretch per row.
  EXPECT_EQ(
      OverlapOf(TensorRegion::Slice(shape, 1, 0, 3), TensorRegion::Slice(shape, 0, 2, 3)).size(),
      3u);
}

TEST(TensorRegion, TextFormRoundTripsAndDamageIsAClearError) {
  const TensorRegion region = TensorRegion::Slice({4096, 14336}, 1, 1792, 1792).Elements(5, 100);
  EXPECT_EQ(region.Encode(), "4096x14336/1/1792+1792/5+100");
  EXPECT_EQ(region.ToString(), "[4096, 14336] axis 1 [1792, 3584) elements [5, 105)");
  absl::StatusOr<TensorRegion> decoded = TensorRegion::Decode(region.Encode());
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  EXPECT_EQ(*decoded, region);
  const TensorRegion scalar = TensorRegion::Whole({});
  decoded = TensorRegion::Decode(scalar.Encode());
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  EXPECT_EQ(*decoded, scalar);

  const std::vector<std::pair<std::string, std::string>> damaged = {
      {"4x4/0/0+4", "is not shape/axis/begin+count/flat_begin+flat_count"},
      {"4xa/0/0+4/0+16", "\"a\" is not a count"},
      {"4x4/2/0+1/0+4", "axis 2 is not an axis of its shape"},
      {"4x4/0/3+2/0+4", "the slice ends past its axis"},
      {"4x4/0/0+2/0+9", "the elements end past its slice"},
      {"4x4/0/0-2/0+8", "\"0-2\" is not begin+count"},
      {"4000000000x4000000000x4000000000/-1/0+0/0+1", "its shape has too many elements"},
      {"0x4000000000x4000000000x4000000000/-1/0+0/0+0", "its shape has too many elements"},
      {"4x4/0/1+9223372036854775807/0+0", "the slice ends past its axis"},
      {"4x4/0/0+4/1+9223372036854775807", "the elements end past its slice"},
  };
  // An empty axis is a valid (empty) region, not a division by zero.
  decoded = TensorRegion::Decode("4x0/1/0+0/0+0");
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  EXPECT_EQ(decoded->numel(), 0);
  for (const auto& [text, message] : damaged) {
    const absl::StatusOr<TensorRegion> parsed = TensorRegion::Decode(text);
    ASSERT_FALSE(parsed.ok()) << text;
    EXPECT_THAT(std::string(parsed.status().message()), HasSubstr(message)) << text;
    EXPECT_THAT(std::string(parsed.status().message()), HasSubstr(text));
  }
}

}  // namespace
}  // namespace kelvin::io
