// Naive GEMM and its backward as f64 loops over op(X)[row, col] element reads.
#include "core/ops/reference/gemm.h"

#include <vector>

#include "core/ops/reference/values.h"

namespace kelvin::reference {
namespace {

// op(X) of a row-major 2-D tensor X as f64 values, indexed as the (maybe transposed) matrix.
class OpMatrix {
 public:
  OpMatrix(const Tensor& x, bool transpose)
      : values_(ToDoubles(x)), stored_cols_(x.dim(1)), transpose_(transpose) {
    rows_ = transpose ? x.dim(1) : x.dim(0);
    cols_ = transpose ? x.dim(0) : x.dim(1);
  }
  int64_t rows() const { return rows_; }
  int64_t cols() const { return cols_; }
  double operator()(int64_t row, int64_t col) const {
    return transpose_ ? values_[col * stored_cols_ + row] : values_[row * stored_cols_ + col];
  }

 private:
  std::vector<double> values_;
  int64_t stored_cols_;
  bool transpose_;
  int64_t rows_, cols_;
};

// Writes (or adds, with accumulate) the op-shaped gradient g [rows, cols] of op(X) into dx, which
// has X's stored shape.
void StoreGradient(const std::vector<double>& g, int64_t rows, int64_t cols, bool transpose,
                   bool accumulate, Tensor& dx) {
  std::vector<double> out =
      accumulate ? ToDoubles(dx) : std::vector<double>(static_cast<size_t>(rows * cols));
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) {
      out[transpose ? c * rows + r : r * cols + c] += g[r * cols + c];
    }
  }
  FromDoubles(out, dx);
}

}  // namespace

void Gemm(const Tensor& a, bool transpose_a, const Tensor& b, bool transpose_b, Tensor& c,
          double alpha, double beta) {
  const OpMatrix op_a(a, transpose_a), op_b(b, transpose_b);  // [M, K], [K, N]
  const int64_t m = op_a.rows(), k = op_a.cols(), n = op_b.cols();
  KELVIN_CHECK_EQ(op_b.rows(), k) << "reference::Gemm inner dimensions";
  KELVIN_CHECK(c.shape() == Shape({m, n})) << "reference::Gemm c is " << c.ToString();
  std::vector<double> out = ToDoubles(c);  // [M, N]
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      double sum = 0;
      for (int64_t p = 0; p < k; ++p) sum += op_a(i, p) * op_b(p, j);
      double& cij = out[i * n + j];
      cij = beta == 0 ? alpha * sum : alpha * sum + beta * cij;
    }
  }
  FromDoubles(out, c);
}

void GemmBackward(const Tensor& dc, const Tensor& a, bool transpose_a, const Tensor& b,
                  bool transpose_b, Tensor* da, Tensor* db, bool accumulate_da,
                  bool accumulate_db) {
  const OpMatrix op_a(a, transpose_a), op_b(b, transpose_b);  // [M, K], [K, N]
  const int64_t m = op_a.rows(), k = op_a.cols(), n = op_b.cols();
  const std::vector<double> g = ToDoubles(dc);  // [M, N]
  if (da != nullptr) {
    std::vector<double> g_op_a(static_cast<size_t>(m * k));  // [M, K]
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t p = 0; p < k; ++p) {
        for (int64_t j = 0; j < n; ++j) g_op_a[i * k + p] += g[i * n + j] * op_b(p, j);
      }
    }
    StoreGradient(g_op_a, m, k, transpose_a, accumulate_da, *da);
  }
  if (db != nullptr) {
    std::vector<double> g_op_b(static_cast<size_t>(k * n));  // [K, N]
    for (int64_t p = 0; p < k; ++p) {
      for (int64_t j = 0; j < n; ++j) {
        for (int64_t i = 0; i < m; ++i) g_op_b[p * n + j] += op_a(i, p) * g[i * n + j];
      }
    }
    StoreGradient(g_op_b, k, n, transpose_b, accumulate_db, *db);
  }
}

}  // namespace kelvin::reference
