// The benchmark's naive attention baseline against the f64 reference (causal and packed documents,
// MHA and GQA, odd sizes) and both backwards against f64 finite differences: the baseline a speed
// ratio is measured against computes attention.
#include "bench/baselines/naive_attention.h"

#include <gtest/gtest.h>

#include "core/ops/reference/attention.h"
#include "tests/testing/backends.h"
#include "tests/testing/compare.h"
#include "tests/testing/gradcheck.h"
#include "tests/testing/tensors.h"
#include "tests/testing/tolerance.h"

namespace kelvin {
namespace {

using testing::Backend;

struct AttentionCase {
  int64_t b, t, h, g, d;
  bool packed;  // position ids restart inside rows
};

// Position ids [B*T]: 0..T-1 per row, or documents of lengths 1, 2, 3, ... cycling.
Tensor Positions(const AttentionCase& c) {
  Tensor p = Tensor::Empty({c.b * c.t}, DType::kI32);
  for (int64_t row = 0; row < c.b; ++row) {
    int32_t pos = 0, doc_len = static_cast<int32_t>(row % 3 + 1);
    for (int64_t i = 0; i < c.t; ++i) {
      if (c.packed && pos == doc_len) {
        pos = 0;
        ++doc_len;
      }
      p.data<int32_t>()[row * c.t + i] = pos++;
    }
  }
  return p;
}

constexpr AttentionCase kCases[] = {{1, 1, 1, 1, 1, false},
                                    {2, 17, 4, 2, 16, false},
                                    {2, 23, 6, 2, 8, true},
                                    {1, 40, 2, 2, 64, true},
                                    {3, 9, 8, 1, 4, false}};

class AttentionTest : public ::testing::TestWithParam<Backend> {};

TEST_P(AttentionTest, ForwardAndBackwardMatchReference) {
  const Backend backend = GetParam();
  const double tol = testing::RelTolerance(backend.dtype);
  uint64_t seed = 500;
  for (const AttentionCase& c : kCases) {
    SCOPED_TRACE(::testing::Message() << "B=" << c.b << " T=" << c.t << " H=" << c.h << " G=" << c.g
                                      << " d=" << c.d << " packed=" << c.packed);
    const bench::AttentionShape shape{c.b, c.t};
    const int64_t n = c.b * c.t;
    const Tensor q = testing::Random({n, c.h, c.d}, backend.dtype, ++seed, -2, 2);
    const Tensor k = testing::Random({n, c.g, c.d}, backend.dtype, ++seed, -2, 2);
    const Tensor v = testing::Random({n, c.g, c.d}, backend.dtype, ++seed);
    const Tensor dout = testing::Random({n, c.h, c.d}, backend.dtype, ++seed);
    const Tensor positions = Positions(c);

    Tensor out_ref = Tensor::Empty({n, c.h, c.d}, DType::kF64);
    Tensor lse_ref = Tensor::Empty({n, c.h}, DType::kF64);
    const Tensor q64 = testing::Cast(q, DType::kF64), k64 = testing::Cast(k, DType::kF64),
                 v64 = testing::Cast(v, DType::kF64);
    reference::AttentionForward(shape, q64, k64, v64, positions, out_ref, lse_ref);
    Tensor dq_ref = Tensor::Empty(q.shape(), DType::kF64);
    Tensor dk_ref = Tensor::Empty(k.shape(), DType::kF64),
           dv_ref = Tensor::Empty(k.shape(), DType::kF64);
    reference::AttentionBackward(shape, testing::Cast(dout, DType::kF64), q64, k64, v64, positions,
                                 dq_ref, dk_ref, dv_ref);

    Tensor out = Tensor::Empty(q.shape(), backend.dtype);
    Tensor lse = Tensor::Empty({n, c.h}, AccumDType(backend.dtype));
    bench::NaiveAttentionForward(shape, q, k, v, positions, out, lse);
    EXPECT_TRUE(testing::AllClose(out, out_ref, tol, "out"));
    EXPECT_TRUE(testing::AllClose(lse, lse_ref, tol, "lse"));
    Tensor dq = Tensor::Empty(q.shape(), backend.dtype);
    Tensor dk = Tensor::Empty(k.shape(), backend.dtype),
           dv = Tensor::Empty(k.shape(), backend.dtype);
    bench::NaiveAttentionBackward(shape, dout, q, k, v, positions, out, lse, dq, dk, dv);
    EXPECT_TRUE(testing::AllClose(dq, dq_ref, tol, "dq"));
    EXPECT_TRUE(testing::AllClose(dk, dk_ref, tol, "dk"));
    EXPECT_TRUE(testing::AllClose(dv, dv_ref, tol, "dv"));
  }
}

INSTANTIATE_TEST_SUITE_P(Backends, AttentionTest, ::testing::ValuesIn(testing::CpuBackends()),
                         testing::BackendName());

TEST(AttentionGradient, ReferenceAndCpuMatchFiniteDifferences) {
  const AttentionCase c{2, 7, 4, 2, 3, true};
  const bench::AttentionShape shape{c.b, c.t};
  const int64_t n = c.b * c.t;
  Tensor q = testing::Random({n, c.h, c.d}, DType::kF64, 1, -2, 2);
  Tensor k = testing::Random({n, c.g, c.d}, DType::kF64, 2, -2, 2);
  Tensor v = testing::Random({n, c.g, c.d}, DType::kF64, 3);
  const Tensor dout = testing::Random({n, c.h, c.d}, DType::kF64, 4);
  const Tensor positions = Positions(c);
  auto loss = [&] {
    Tensor out = Tensor::Empty(q.shape(), DType::kF64), lse = Tensor::Empty({n, c.h}, DType::kF64);
    reference::AttentionForward(shape, q, k, v, positions, out, lse);
    return testing::Dot(dout, out);
  };
  for (const bool fast : {false, true}) {
    SCOPED_TRACE(fast ? "fast CPU" : "reference");
    Tensor dq = Tensor::Empty(q.shape(), DType::kF64);
    Tensor dk = Tensor::Empty(k.shape(), DType::kF64), dv = Tensor::Empty(k.shape(), DType::kF64);
    if (fast) {
      Tensor out = Tensor::Empty(q.shape(), DType::kF64),
             lse = Tensor::Empty({n, c.h}, DType::kF64);
      bench::NaiveAttentionForward(shape, q, k, v, positions, out, lse);
      bench::NaiveAttentionBackward(shape, dout, q, k, v, positions, out, lse, dq, dk, dv);
    } else {
      reference::AttentionBackward(shape, dout, q, k, v, positions, dq, dk, dv);
    }
    EXPECT_TRUE(testing::GradientMatches(loss, q, dq, "dq"));
    EXPECT_TRUE(testing::GradientMatches(loss, k, dk, "dk"));
    EXPECT_TRUE(testing::GradientMatches(loss, v, dv, "dv"));
  }
}

TEST(AttentionDeathTest, PositionsThatSkipAreRefused) {
  const bench::AttentionShape shape{1, 3};
  const Tensor q = testing::Random({3, 1, 2}, DType::kF32, 1);
  Tensor positions = Tensor::Empty({3}, DType::kI32);
  positions.data<int32_t>()[0] = 0;
  positions.data<int32_t>()[1] = 2;  // skips 1
  positions.data<int32_t>()[2] = 3;
  Tensor out = Tensor::Empty(q.shape(), DType::kF32), lse = Tensor::Empty({3, 1}, DType::kF32);
  EXPECT_DEATH(bench::NaiveAttentionForward(shape, q, q, q, positions, out, lse),
               "attention.positions\\[1\\] = 2 after 0: position ids must restart at 0");
}

}  // namespace
}  // namespace kelvin
