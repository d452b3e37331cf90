// GEMM: argument checks (shapes, dtype pairs, devices, overlap), the empty products, dispatch to
// OpenBLAS or cuBLASLt, and the backward as two GEMMs. M rows of C, N columns of C, K contracted.
#include "core/ops/gemm.h"

#include <sstream>
#include <string>

#include "core/ops/dispatch.h"

namespace kelvin::ops {
namespace {

// [rows, cols] of op(X) for a 2-D tensor X.
struct OpShape {
  int64_t rows, cols;
};

OpShape OpShapeOf(const Tensor& x, bool transpose, std::string_view op, std::string_view name) {
  KELVIN_CHECK(x.defined()) << op << ": " << name << " is undefined";
  KELVIN_CHECK_EQ(x.ndim(), 2) << op << ": " << name << " must be 2-D, got " << x.ToString();
  return transpose ? OpShape{x.dim(1), x.dim(0)} : OpShape{x.dim(0), x.dim(1)};
}

// "a f32[3, 4]@cpu, b^T f32[6, 4]@cpu": the operands as a message names them.
std::string DescribeOperands(const Tensor& a, bool transpose_a, const Tensor& b, bool transpose_b) {
  std::ostringstream out;
  out << (transpose_a ? "a^T " : "a ") << a.ToString() << ", " << (transpose_b ? "b^T " : "b ")
      << b.ToString();
  return out.str();
}

// The [M, N, K] of op(a) @ op(b), checking that the inner dimensions agree.
struct GemmDims {
  int64_t m, n, k;
};

GemmDims DimsOf(const Tensor& a, bool transpose_a, const Tensor& b, bool transpose_b,
                std::string_view op) {
  const OpShape op_a = OpShapeOf(a, transpose_a, op, "a");  // [M, K]
  const OpShape op_b = OpShapeOf(b, transpose_b, op, "b");  // [K, N]
  KELVIN_CHECK_EQ(op_a.cols, op_b.rows)
      << op << ": inner dimensions differ: op(a) is " << ShapeToString({op_a.rows, op_a.cols})
      << " and op(b) is " << ShapeToString({op_b.rows, op_b.cols}) << " ("
      << DescribeOperands(a, transpose_a, b, transpose_b) << ")";
  return {op_a.rows, op_b.cols, op_a.cols};
}

bool SupportedDTypes(Device device, DType inputs, DType output) {
  switch (inputs) {
    case DType::kF32:
      return output == DType::kF32;
    case DType::kF64:
      return device.is_cpu() && output == DType::kF64;
    case DType::kBF16:
      return output == DType::kBF16 || output == DType::kF32;
    default:
      return false;
  }
}

bool Overlap(const Tensor& x, const Tensor& y) {
  if (x.numel() == 0 || y.numel() == 0 || x.device() != y.device()) return false;
  const auto* x_begin = static_cast<const char*>(x.raw_data());
  const auto* y_begin = static_cast<const char*>(y.raw_data());
  return x_begin < y_begin + y.nbytes() && y_begin < x_begin + x.nbytes();
}

}  // namespace

void Gemm(const Context& ctx, const Tensor& a, bool transpose_a, const Tensor& b, bool transpose_b,
          Tensor& c, float alpha, float beta) {
  const auto [m, n, k] = DimsOf(a, transpose_a, b, transpose_b, "Gemm");
  KELVIN_CHECK(c.defined() && c.shape() == Shape({m, n}))
      << "Gemm: c is " << c.ToString() << ", expected [M, N] = " << ShapeToString({m, n}) << " for "
      << DescribeOperands(a, transpose_a, b, transpose_b);
  CheckDevice(ctx, {&a, &b, &c}, "Gemm");
  KELVIN_CHECK(a.dtype() == b.dtype() && SupportedDTypes(ctx.device(), a.dtype(), c.dtype()))
      << "Gemm on " << ctx.device().ToString() << ": unsupported dtypes a " << DTypeName(a.dtype())
      << ", b " << DTypeName(b.dtype()) << ", c " << DTypeName(c.dtype())
      << "; supported (a and b, c): (f32, f32), (bf16, bf16), (bf16, f32)"
      << (ctx.device().is_cpu() ? ", (f64, f64)" : "");
  KELVIN_CHECK(!Overlap(c, a) && !Overlap(c, b))
      << "Gemm: c " << c.ToString() << " overlaps an input ("
      << DescribeOperands(a, transpose_a, b, transpose_b) << ")";
  if (m == 0 || n == 0) return;
  if (k == 0) {  // the empty sum: C = beta * C
#if KELVIN_WITH_CUDA
    if (ctx.is_cuda()) return cuda::ScaleOutput(ctx, c, beta);
#endif
    return cpu::ScaleOutput(c, beta);
  }
#if KELVIN_WITH_CUDA
  if (ctx.is_cuda()) return cuda::Gemm(ctx, a, transpose_a, b, transpose_b, c, alpha, beta);
#endif
  cpu::Gemm(a, transpose_a, b, transpose_b, c, alpha, beta);
}

void GemmBackward(const Context& ctx, const Tensor& dc, const Tensor& a, bool transpose_a,
                  const Tensor& b, bool transpose_b, Tensor* da, Tensor* db, bool accumulate_da,
                  bool accumulate_db) {
  const auto [m, n, k] = DimsOf(a, transpose_a, b, transpose_b, "GemmBackward");
  CheckShape(dc, {m, n}, "gemm_backward.dc");
  KELVIN_CHECK(dc.dtype() == a.dtype() && dc.dtype() == b.dtype())
      << "GemmBackward: dc " << dc.ToString() << " must have the dtype of the inputs ("
      << DescribeOperands(a, transpose_a, b, transpose_b) << ")";
  if (da != nullptr && da->defined()) {
    CheckShape(*da, a.shape(), "gemm_backward.da");
    const float beta = accumulate_da ? 1.0f : 0.0f;
    // d op(A) = dC op(B)^T [M, K]; when A is stored transposed, dA = op(B) dC^T [K, M].
    if (transpose_a) {
      Gemm(ctx, b, transpose_b, dc, /*transpose_b=*/true, *da, 1.0f, beta);
    } else {
      Gemm(ctx, dc, /*transpose_a=*/false, b, !transpose_b, *da, 1.0f, beta);
    }
  }
  if (db != nullptr && db->defined()) {
    CheckShape(*db, b.shape(), "gemm_backward.db");
    const float beta = accumulate_db ? 1.0f : 0.0f;
    // d op(B) = op(A)^T dC [K, N]; when B is stored transposed, dB = dC^T op(A) [N, K].
    if (transpose_b) {
      Gemm(ctx, dc, /*transpose_a=*/true, a, transpose_a, *db, 1.0f, beta);
    } else {
      Gemm(ctx, a, !transpose_a, dc, /*transpose_b=*/false, *db, 1.0f, beta);
    }
  }
}

}  // namespace kelvin::ops
