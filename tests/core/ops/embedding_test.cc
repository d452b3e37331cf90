// Embedding: fast CPU and CUDA against the naive reference (whole tables, repeated ids and a vocab
// shard with ids outside it), the table gradient against f64 finite differences, CPU determinism
// across thread counts, and argument errors. N tokens, V vocabulary rows held here, D hidden.
#include "core/ops/embedding.h"

#include <gtest/gtest.h>
#include <omp.h>

#include "core/ops/reference/embedding.h"
#include "tests/testing/backends.h"
#include "tests/testing/compare.h"
#include "tests/testing/gradcheck.h"
#include "tests/testing/tensors.h"
#include "tests/testing/tolerance.h"

namespace kelvin {
namespace {

using testing::Backend;

struct EmbeddingCase {
  int64_t n, v, d;       // tokens, shard rows, hidden
  int64_t vocab_begin;   // first vocabulary id of the shard
  int64_t id_lo, id_hi;  // ids drawn uniformly from [id_lo, id_hi]
};
constexpr EmbeddingCase kCases[] = {
    {1, 1, 1, 0, 0, 0},           // 1x1 table
    {300, 160, 64, 0, 0, 159},    // whole table, every id repeated about twice
    {71, 50, 229, 100, 80, 170},  // shard [100, 150): ids below, inside and above it
    {9, 40, 4096, 0, 0, 39},      // realistic hidden size
};

class EmbeddingTest : public ::testing::TestWithParam<Backend> {};

TEST_P(EmbeddingTest, ForwardAndBackwardMatchReference) {
  const Backend backend = GetParam();
  KELVIN_SKIP_WITHOUT_CUDA(backend.device);
  const Context& ctx = testing::ContextFor(backend.device);
  const DType acc = AccumDType(backend.dtype);
  uint64_t seed = 200;
  for (const auto [n, v, d, vocab_begin, id_lo, id_hi] : kCases) {
    SCOPED_TRACE(::testing::Message()
                 << "N=" << n << " V=" << v << " D=" << d << " vocab_begin=" << vocab_begin);
    const Tensor ids = testing::RandomInts({n}, DType::kI32, ++seed, id_lo, id_hi);  // [N]
    const Tensor table = testing::Random({v, d}, backend.dtype, ++seed);             // [V, D]
    const Tensor dout = testing::Random({n, d}, backend.dtype, ++seed);              // [N, D]
    const Tensor dtable0 = testing::Random({v, d}, acc, ++seed);                     // [V, D]

    Tensor out_ref = Tensor::Empty({n, d}, DType::kF64);
    reference::EmbeddingForward(ids, testing::Cast(table, DType::kF64), vocab_begin, out_ref);
    Tensor dtable_ref = testing::Cast(dtable0, DType::kF64);
    reference::EmbeddingBackward(ids, testing::Cast(dout, DType::kF64), vocab_begin, dtable_ref);

    const Tensor ids_d = testing::ToDevice(ids, backend.device);
    Tensor out = Tensor::Empty({n, d}, backend.dtype, backend.device);
    ops::EmbeddingForward(ctx, ids_d, testing::ToDevice(table, backend.device), vocab_begin, out);
    // A lookup moves data: it must be exact.
    EXPECT_TRUE(
        testing::BitIdentical(testing::ToHost(out), testing::Cast(out_ref, backend.dtype), "out"));

    Tensor dtable = testing::ToDevice(dtable0, backend.device);
    ops::EmbeddingBackward(ctx, ids_d, testing::ToDevice(dout, backend.device), vocab_begin,
                           dtable);
    EXPECT_TRUE(
        testing::AllClose(dtable, dtable_ref, testing::RelTolerance(acc), "dtable (accumulated)"));
  }
}

INSTANTIATE_TEST_SUITE_P(Backends, EmbeddingTest, ::testing::ValuesIn(testing::AllBackends()),
                         testing::BackendName());

// loss = <dout, EmbeddingForward(table)>; its gradient wrt the table is EmbeddingBackward(dout)
// added to zeros. A shard with repeated ids and ids on both sides of it.
TEST(EmbeddingGradient, ReferenceAndCpuMatchFiniteDifferences) {
  const int64_t n = 12, v = 5, d = 3, vocab_begin = 2;
  const Tensor ids = testing::RandomInts({n}, DType::kI32, 7, 0, 8);  // [N]
  Tensor table = testing::Random({v, d}, DType::kF64, 8);             // [V, D]
  const Tensor dout = testing::Random({n, d}, DType::kF64, 9);        // [N, D]
  auto loss = [&] {
    Tensor out = Tensor::Empty({n, d}, DType::kF64);
    reference::EmbeddingForward(ids, table, vocab_begin, out);
    return testing::Dot(dout, out);
  };
  const Context& ctx = testing::ContextFor(Device::Cpu());
  for (const bool fast : {false, true}) {
    SCOPED_TRACE(fast ? "fast CPU" : "reference");
    Tensor dtable = Tensor::ZerosCpu({v, d}, DType::kF64);
    if (fast) {
      ops::EmbeddingBackward(ctx, ids, dout, vocab_begin, dtable);
    } else {
      reference::EmbeddingBackward(ids, dout, vocab_begin, dtable);
    }
    EXPECT_TRUE(testing::GradientMatches(loss, table, dtable, "dtable"));
  }
}

TEST(EmbeddingDeterminism, CpuBackwardIsBitIdenticalForAnyThreadCount) {
  const int64_t n = 500, v = 37, d = 300;
  const Tensor ids = testing::RandomInts({n}, DType::kI32, 11, 0, v - 1);  // [N]
  const Tensor dout = testing::Random({n, d}, DType::kF32, 12);            // [N, D]
  const Tensor dtable0 = testing::Random({v, d}, DType::kF32, 13);         // [V, D]
  const Context& ctx = testing::ContextFor(Device::Cpu());
  const int saved_threads = omp_get_max_threads();
  Tensor one_thread = testing::Cast(dtable0, DType::kF32);
  omp_set_num_threads(1);
  ops::EmbeddingBackward(ctx, ids, dout, 0, one_thread);
  Tensor three_threads = testing::Cast(dtable0, DType::kF32);
  omp_set_num_threads(3);
  ops::EmbeddingBackward(ctx, ids, dout, 0, three_threads);
  omp_set_num_threads(saved_threads);
  EXPECT_TRUE(testing::BitIdentical(three_threads, one_thread, "dtable"));
}

TEST(EmbeddingErrors, BadArgumentsAbortWithTheirNames) {
  const Context& ctx = testing::ContextFor(Device::Cpu());
  const Tensor table = testing::Random({4, 3}, DType::kF32, 1);
  const Tensor ids = testing::RandomInts({2}, DType::kI32, 2, 0, 3);
  Tensor out = Tensor::Empty({2, 3}, DType::kF32);
  EXPECT_DEATH(ops::EmbeddingForward(ctx, testing::Cast(ids, DType::kI64), table, 0, out),
               "embedding.ids is i64\\[2\\]@cpu, expected dtype i32");
  Tensor out_bad = Tensor::Empty({2, 4}, DType::kF32);
  EXPECT_DEATH(ops::EmbeddingForward(ctx, ids, table, 0, out_bad),
               "embedding.out is f32\\[2, 4\\]@cpu, expected shape \\[2, 3\\]");
  EXPECT_DEATH(ops::EmbeddingForward(ctx, ids, table, -1, out), "vocab_begin must be >= 0");
  Tensor dtable_f64 = Tensor::ZerosCpu({4, 3}, DType::kF64);
  EXPECT_DEATH(ops::EmbeddingBackward(ctx, ids, out, 0, dtable_f64),
               "embedding.dtable is f64\\[4, 3\\]@cpu, expected dtype f32");
}

}  // namespace
}  // namespace kelvin
