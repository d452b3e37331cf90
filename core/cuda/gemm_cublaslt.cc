// GEMM on CUDA through cuBLASLt (f32 accumulation, CUBLAS_COMPUTE_32F: true fp32, never TF32).
// Row-major C[M, N] = op(A) op(B) is computed as the column-major C^T = op(B)^T op(A)^T, so
// cuBLASLt's first operand is our B and its second our A. The matmul descriptor, the layouts and
// the heuristic's top algorithm are cached per problem (device, shape, transposes, dtypes,
// beta == 0, pointer alignments, workspace size).
#include <cublasLt.h>

#include <compare>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>

#include "core/cuda/cuda_check.h"
#include "core/cuda/cuda_context.h"
#include "core/ops/gemm.h"

namespace kelvin::ops::cuda {
namespace {

cudaDataType_t CudaTypeOf(DType dtype) {
  switch (dtype) {
    case DType::kF32:
      return CUDA_R_32F;
    case DType::kBF16:
      return CUDA_R_16BF;
    default:
      KELVIN_FATAL() << "Gemm on CUDA: unsupported dtype " << DTypeName(dtype);
  }
}

// The largest power of two, up to 256, that divides the address: algorithms may need aligned data.
uint32_t AlignmentOf(const void* pointer) {
  const auto address = reinterpret_cast<uintptr_t>(pointer);
  uint32_t alignment = 256;
  while (alignment > 1 && address % alignment != 0) alignment /= 2;
  return alignment;
}

struct PlanKey {
  int device;
  int64_t m, n, k;
  bool transpose_a, transpose_b;
  DType inputs, output;
  bool beta_zero;
  uint32_t alignment_a, alignment_b, alignment_c;  // bytes
  size_t workspace_bytes;
  auto operator<=>(const PlanKey&) const = default;
};

// "[M, N, K] = [71, 229, 13], a^T bf16, b bf16, c f32": the problem as messages name it.
std::string DescribeProblem(const PlanKey& key) {
  return "[M, N, K] = " + ShapeToString({key.m, key.n, key.k}) +
         (key.transpose_a ? ", a^T " : ", a ") + std::string(DTypeName(key.inputs)) +
         (key.transpose_b ? ", b^T " : ", b ") + std::string(DTypeName(key.inputs)) + ", c " +
         std::string(DTypeName(key.output));
}

// A row-major [rows, cols] buffer seen by cuBLASLt: the column-major [cols, rows] matrix with
// leading dimension cols.
cublasLtMatrixLayout_t RowMajorLayout(DType dtype, int64_t rows, int64_t cols) {
  cublasLtMatrixLayout_t layout = nullptr;
  KELVIN_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(
      &layout, CudaTypeOf(dtype), static_cast<uint64_t>(cols), static_cast<uint64_t>(rows), cols));
  return layout;
}

// Everything cublasLtMatmul needs for one PlanKey except the pointers; owns its descriptors.
class MatmulPlan {
 public:
  MatmulPlan(const PlanKey& key, cublasLtHandle_t handle) {
    KELVIN_CUBLAS_CHECK(cublasLtMatmulDescCreate(&desc_, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    const cublasOperation_t op_first = key.transpose_b ? CUBLAS_OP_T : CUBLAS_OP_N;
    const cublasOperation_t op_second = key.transpose_a ? CUBLAS_OP_T : CUBLAS_OP_N;
    KELVIN_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc_, CUBLASLT_MATMUL_DESC_TRANSA,
                                                       &op_first, sizeof(op_first)));
    KELVIN_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc_, CUBLASLT_MATMUL_DESC_TRANSB,
                                                       &op_second, sizeof(op_second)));
    // Stored shapes: a [M, K] or [K, M], b [K, N] or [N, K], c [M, N].
    layout_a_ = key.transpose_a ? RowMajorLayout(key.inputs, key.k, key.m)
                                : RowMajorLayout(key.inputs, key.m, key.k);
    layout_b_ = key.transpose_b ? RowMajorLayout(key.inputs, key.n, key.k)
                                : RowMajorLayout(key.inputs, key.k, key.n);
    layout_c_ = RowMajorLayout(key.output, key.m, key.n);
    algo_ = BestAlgorithm(key, handle);
  }

  ~MatmulPlan() {
    cublasLtMatrixLayoutDestroy(layout_c_);
    cublasLtMatrixLayoutDestroy(layout_b_);
    cublasLtMatrixLayoutDestroy(layout_a_);
    cublasLtMatmulDescDestroy(desc_);
  }

  MatmulPlan(const MatmulPlan&) = delete;
  MatmulPlan& operator=(const MatmulPlan&) = delete;

  // c = alpha * op(a) op(b) + beta * c on the context's stream.
  void Run(const CudaResources& cuda, const void* a, const void* b, void* c, float alpha,
           float beta) const {
    KELVIN_CUBLAS_CHECK(cublasLtMatmul(cuda.cublaslt, desc_, &alpha, b, layout_b_, a, layout_a_,
                                       &beta, c, layout_c_, c, layout_c_, &algo_, cuda.workspace,
                                       cuda.workspace_bytes, cuda.stream));
  }

 private:
  cublasLtMatmulAlgo_t BestAlgorithm(const PlanKey& key, cublasLtHandle_t handle) const {
    cublasLtMatmulPreference_t preference = nullptr;
    KELVIN_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&preference));
    const uint64_t workspace_bytes = key.workspace_bytes;
    KELVIN_CUBLAS_CHECK(
        cublasLtMatmulPreferenceSetAttribute(preference, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                             &workspace_bytes, sizeof(workspace_bytes)));
    // cuBLASLt's A is our b, its B our a; C and D are both our c.
    const std::pair<cublasLtMatmulPreferenceAttributes_t, uint32_t> alignments[] = {
        {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, key.alignment_b},
        {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, key.alignment_a},
        {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, key.alignment_c},
        {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, key.alignment_c}};
    for (const auto& [attribute, bytes] : alignments) {
      KELVIN_CUBLAS_CHECK(
          cublasLtMatmulPreferenceSetAttribute(preference, attribute, &bytes, sizeof(bytes)));
    }
    cublasLtMatmulHeuristicResult_t result = {};
    int found = 0;
    const cublasStatus_t status =
        cublasLtMatmulAlgoGetHeuristic(handle, desc_, layout_b_, layout_a_, layout_c_, layout_c_,
                                       preference, /*requestedAlgoCount=*/1, &result, &found);
    cublasLtMatmulPreferenceDestroy(preference);
    if (status == CUBLAS_STATUS_NOT_SUPPORTED || (status == CUBLAS_STATUS_SUCCESS && found == 0)) {
      KELVIN_FATAL() << "Gemm on CUDA: cuBLASLt has no algorithm for " << DescribeProblem(key)
                     << " (alignments a " << key.alignment_a << ", b " << key.alignment_b << ", c "
                     << key.alignment_c << " bytes)";
    }
    KELVIN_CUBLAS_CHECK(status);
    return result.algo;
  }

  cublasLtMatmulDesc_t desc_ = nullptr;
  cublasLtMatrixLayout_t layout_a_ = nullptr;  // our a, stored shape
  cublasLtMatrixLayout_t layout_b_ = nullptr;  // our b, stored shape
  cublasLtMatrixLayout_t layout_c_ = nullptr;  // our c [M, N]
  cublasLtMatmulAlgo_t algo_ = {};
};

// The cached plan for `key`, created on first use. Plans are never evicted (a training job uses a
// few dozen shapes), so references stay valid after the lock is released.
const MatmulPlan& PlanFor(const PlanKey& key, cublasLtHandle_t handle) {
  static std::mutex mutex;
  static std::map<PlanKey, std::unique_ptr<MatmulPlan>> plans;
  std::lock_guard<std::mutex> lock(mutex);
  std::unique_ptr<MatmulPlan>& plan = plans[key];
  if (plan == nullptr) plan = std::make_unique<MatmulPlan>(key, handle);
  return *plan;
}

}  // namespace

void Gemm(const Context& ctx, const Tensor& a, bool transpose_a, const Tensor& b, bool transpose_b,
          Tensor& c, float alpha, float beta) {
  const CudaResources& cuda = CudaOf(ctx);
  const PlanKey key = {.device = cuda.device,
                       .m = c.dim(0),
                       .n = c.dim(1),
                       .k = transpose_a ? a.dim(0) : a.dim(1),
                       .transpose_a = transpose_a,
                       .transpose_b = transpose_b,
                       .inputs = a.dtype(),
                       .output = c.dtype(),
                       .beta_zero = beta == 0.0f,
                       .alignment_a = AlignmentOf(a.raw_data()),
                       .alignment_b = AlignmentOf(b.raw_data()),
                       .alignment_c = AlignmentOf(c.raw_data()),
                       .workspace_bytes = cuda.workspace_bytes};
  PlanFor(key, cuda.cublaslt).Run(cuda, a.raw_data(), b.raw_data(), c.raw_data(), alpha, beta);
}

}  // namespace kelvin::ops::cuda
