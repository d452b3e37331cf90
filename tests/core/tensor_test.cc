// Tensor: shapes, dtypes, views sharing storage by offset, element access checks.
#include "core/tensor.h"

#include <gtest/gtest.h>

#include "core/allocator.h"
#include "core/copy.h"
#include "tests/testing/backends.h"
#include "tests/testing/compare.h"
#include "tests/testing/tensors.h"

namespace kelvin {
namespace {

TEST(Tensor, DescribesItself) {
  const Tensor t = Tensor::Empty({71, 229}, DType::kBF16);
  EXPECT_TRUE(t.defined());
  EXPECT_EQ(t.ndim(), 2);
  EXPECT_EQ(t.dim(0), 71);
  EXPECT_EQ(t.dim(-1), 229);
  EXPECT_EQ(t.numel(), 71 * 229);
  EXPECT_EQ(t.nbytes(), 71u * 229u * 2u);
  EXPECT_EQ(t.ToString(), "bf16[71, 229]@cpu");
  EXPECT_FALSE(Tensor().defined());
  EXPECT_EQ(Tensor().ToString(), "undefined tensor");
}

TEST(Tensor, DTypeSizesAndNames) {
  EXPECT_EQ(DTypeSize(DType::kF32), 4u);
  EXPECT_EQ(DTypeSize(DType::kBF16), 2u);
  EXPECT_EQ(DTypeSize(DType::kF64), 8u);
  EXPECT_EQ(DTypeSize(DType::kI32), 4u);
  EXPECT_EQ(DTypeSize(DType::kI64), 8u);
  EXPECT_EQ(DTypeName(DType::kI64), "i64");
  EXPECT_EQ(AccumDType(DType::kBF16), DType::kF32);
  EXPECT_EQ(AccumDType(DType::kF64), DType::kF64);
  EXPECT_FALSE(IsFloating(DType::kI32));
}

TEST(Tensor, HostStorageIs64ByteAligned) {
  for (int64_t n : {1, 3, 17, 1000}) {
    const Tensor t = Tensor::Empty({n}, DType::kF32);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(t.raw_data()) % kCpuAlignment, 0u) << n;
  }
}

TEST(Tensor, SliceSharesStorageAtAnOffset) {
  Tensor t = testing::Random({6, 5}, DType::kF32, 1);
  const Tensor rows = t.Slice(2, 4);
  EXPECT_EQ(rows.shape(), (Shape{2, 5}));
  EXPECT_TRUE(rows.SameStorage(t));
  EXPECT_EQ(rows.data<float>(), t.data<float>() + 10);
  rows.data<float>()[0] = 42.0f;  // writes through to the parent
  EXPECT_EQ(t.data<float>()[10], 42.0f);
  EXPECT_EQ(t.Slice(6, 6).numel(), 0);
}

TEST(Tensor, ViewKeepsElementsAndInfersOneDim) {
  Tensor t = testing::Random({4, 3, 2}, DType::kF64, 2);
  const Tensor v = t.View({-1, 2});
  EXPECT_EQ(v.shape(), (Shape{12, 2}));
  EXPECT_EQ(v.data<double>(), t.data<double>());
  EXPECT_EQ(t.Flatten2D().shape(), (Shape{12, 2}));
  EXPECT_EQ(t.Slice(1, 3).View({6, 2}).data<double>(), t.data<double>() + 6);
}

TEST(Tensor, StorageOutlivesTheTensorThatMadeIt) {
  Tensor view;
  {
    Tensor t = testing::Full({8, 8}, DType::kF32, 3.0);
    view = t.Slice(7, 8);
  }
  EXPECT_EQ(view.data<float>()[7], 3.0f);
}

TEST(Tensor, ZerosCpuIsZero) {
  const Tensor z = Tensor::ZerosCpu({33}, DType::kF32);
  for (int64_t i = 0; i < z.numel(); ++i) EXPECT_EQ(z.data<float>()[i], 0.0f);
}

using TensorDeathTest = ::testing::Test;

TEST_F(TensorDeathTest, WrongElementTypeAccessNamesBothTypes) {
  const Tensor t = Tensor::Empty({2}, DType::kF32);
  EXPECT_DEATH(t.data<double>(), "tensor f32\\[2\\]@cpu accessed as f64");
}

TEST_F(TensorDeathTest, BadViewsAndSlicesAreRefused) {
  const Tensor t = Tensor::Empty({4, 3}, DType::kF32);
  EXPECT_DEATH(t.View({5, 3}), "cannot view f32\\[4, 3\\]@cpu as \\[5, 3\\]");
  EXPECT_DEATH(t.View({-1, -1}), "has two -1 dims");
  EXPECT_DEATH(t.Slice(3, 5), "Slice \\[3, 5\\) out of range for f32\\[4, 3\\]@cpu");
  EXPECT_DEATH(t.dim(2), "axis 2 out of range");
  EXPECT_DEATH(Tensor::Empty({2, -1}, DType::kF32), "negative dimension in shape \\[2, -1\\]");
}

TEST(TensorCopy, HostCopiesAndZero) {
  const Context& ctx = testing::ContextFor(Device::Cpu());
  const Tensor src = testing::Random({5, 7}, DType::kF32, 3);
  Tensor dst = Tensor::Empty({35}, DType::kF32);
  CopyTensor(ctx, src, dst);
  EXPECT_TRUE(testing::BitIdentical(dst.View({5, 7}), src));
  Zero(ctx, dst);
  EXPECT_TRUE(testing::BitIdentical(dst, Tensor::ZerosCpu({35}, DType::kF32)));
}

// Host -> device -> device -> host round trip keeps every bit, for every dtype.
TEST(TensorCopyCuda, RoundTripThroughTheDeviceIsExact) {
  KELVIN_SKIP_WITHOUT_CUDA(Device::Cuda(0));
  const Context& ctx = testing::ContextFor(Device::Cuda(0));
  for (DType dtype : {DType::kF32, DType::kBF16, DType::kF64}) {
    const Tensor host = testing::Random({71, 229}, dtype, 4);
    const Tensor dev = CopyToDevice(ctx, host, Device::Cuda(0));
    EXPECT_TRUE(dev.is_cuda());
    const Tensor dev2 = CopyToDevice(ctx, dev, Device::Cuda(0));
    EXPECT_TRUE(testing::BitIdentical(CopyToDevice(ctx, dev2, Device::Cpu()), host));
    Tensor zero = CopyToDevice(ctx, host, Device::Cuda(0));
    Zero(ctx, zero);
    EXPECT_TRUE(testing::BitIdentical(testing::ToHost(zero), Tensor::ZerosCpu({71, 229}, dtype)));
  }
}

}  // namespace
}  // namespace kelvin
