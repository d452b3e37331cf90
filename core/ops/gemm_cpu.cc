// GEMM on the CPU through OpenBLAS: f32 and f64 call cblas_[sd]gemm on the tensors' own buffers
// (no copies); bf16 inputs are widened to f32 scratch first, and a bf16 C is computed in an f32
// scratch that is rounded back. M rows of C, N columns of C, K contracted.
#include <cblas.h>

#include <limits>

#include "core/ops/gemm.h"

namespace kelvin::ops::cpu {
namespace {

// Conversions below this many elements stay on one thread: waking OpenMP's team costs more, and
// its workers then spin on the cores OpenBLAS's own threads are about to need.
constexpr int64_t kParallelElements = int64_t{1} << 16;

// The arguments cblas_?gemm takes besides pointers and scalars, for row-major tensors.
struct BlasShape {
  CBLAS_TRANSPOSE transpose_a, transpose_b;
  blasint m, n, k;
  blasint lda, ldb, ldc;  // row lengths of the stored a, b and c
};

blasint ToBlasInt(int64_t value, const char* what) {
  KELVIN_CHECK_LE(value, static_cast<int64_t>(std::numeric_limits<blasint>::max()))
      << "Gemm on CPU: " << what << " exceeds OpenBLAS's integer range";
  return static_cast<blasint>(value);
}

BlasShape BlasShapeOf(const Tensor& a, bool transpose_a, const Tensor& b, bool transpose_b,
                      const Tensor& c) {
  return {transpose_a ? CblasTrans : CblasNoTrans,
          transpose_b ? CblasTrans : CblasNoTrans,
          ToBlasInt(c.dim(0), "M"),
          ToBlasInt(c.dim(1), "N"),
          ToBlasInt(transpose_a ? a.dim(0) : a.dim(1), "K"),
          ToBlasInt(a.dim(1), "a's row length"),
          ToBlasInt(b.dim(1), "b's row length"),
          ToBlasInt(c.dim(1), "c's row length")};
}

void BlasGemm(const BlasShape& s, float alpha, const float* a, const float* b, float beta,
              float* c) {
  cblas_sgemm(CblasRowMajor, s.transpose_a, s.transpose_b, s.m, s.n, s.k, alpha, a, s.lda, b, s.ldb,
              beta, c, s.ldc);
}

void BlasGemm(const BlasShape& s, double alpha, const double* a, const double* b, double beta,
              double* c) {
  cblas_dgemm(CblasRowMajor, s.transpose_a, s.transpose_b, s.m, s.n, s.k, alpha, a, s.lda, b, s.ldb,
              beta, c, s.ldc);
}

// A new f32 tensor with the shape and values of the bf16 tensor x.
Tensor WidenToF32(const Tensor& x) {
  Tensor out = Tensor::Empty(x.shape(), DType::kF32);  // x's shape
  const bf16* src = x.data<bf16>();
  float* dst = out.data<float>();
  const int64_t count = x.numel();
#pragma omp parallel for schedule(static) if (count >= kParallelElements)
  for (int64_t i = 0; i < count; ++i) dst[i] = static_cast<float>(src[i]);
  return out;
}

// bf16 a and b; c bf16 or f32. Products of bf16 values are exact in f32, so only the f32 sums and
// the final rounding of a bf16 c differ from the f64 result.
void GemmBf16Inputs(const BlasShape& s, const Tensor& a, const Tensor& b, Tensor& c, float alpha,
                    float beta) {
  const Tensor a32 = WidenToF32(a), b32 = WidenToF32(b);  // shapes of a and b
  if (c.dtype() == DType::kF32) {
    return BlasGemm(s, alpha, a32.data<float>(), b32.data<float>(), beta, c.data<float>());
  }
  // beta = 0 must not read c, so the f32 accumulator starts from c only when beta != 0.
  Tensor c32 = beta == 0.0f ? Tensor::Empty(c.shape(), DType::kF32) : WidenToF32(c);  // [M, N]
  BlasGemm(s, alpha, a32.data<float>(), b32.data<float>(), beta, c32.data<float>());
  const float* src = c32.data<float>();
  bf16* dst = c.data<bf16>();
  const int64_t count = c.numel();
#pragma omp parallel for schedule(static) if (count >= kParallelElements)
  for (int64_t i = 0; i < count; ++i) dst[i] = bf16(src[i]);
}

// c = beta * c in Acc arithmetic; beta = 0 writes zeros without reading c.
template <typename T, typename Acc>
void ScaleInPlace(T* c, int64_t count, Acc beta) {
  for (int64_t i = 0; i < count; ++i) {
    c[i] = beta == Acc(0) ? T(Acc(0)) : T(beta * static_cast<Acc>(c[i]));
  }
}

}  // namespace

void Gemm(const Tensor& a, bool transpose_a, const Tensor& b, bool transpose_b, Tensor& c,
          float alpha, float beta) {
  const BlasShape s = BlasShapeOf(a, transpose_a, b, transpose_b, c);
  switch (a.dtype()) {
    case DType::kF32:
      return BlasGemm(s, alpha, a.data<float>(), b.data<float>(), beta, c.data<float>());
    case DType::kF64:
      return BlasGemm(s, double{alpha}, a.data<double>(), b.data<double>(), double{beta},
                      c.data<double>());
    case DType::kBF16:
      return GemmBf16Inputs(s, a, b, c, alpha, beta);
    default:
      KELVIN_FATAL() << "Gemm on CPU: unsupported input dtype " << DTypeName(a.dtype());
  }
}

void ScaleOutput(Tensor& c, float beta) {
  switch (c.dtype()) {
    case DType::kF32:
      return ScaleInPlace(c.data<float>(), c.numel(), beta);
    case DType::kF64:
      return ScaleInPlace(c.data<double>(), c.numel(), double{beta});
    case DType::kBF16:
      return ScaleInPlace(c.data<bf16>(), c.numel(), beta);
    default:
      KELVIN_FATAL() << "Gemm on CPU: unsupported output dtype " << DTypeName(c.dtype());
  }
}

}  // namespace kelvin::ops::cpu
