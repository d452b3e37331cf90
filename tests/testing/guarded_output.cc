// Guards are compared bit for bit on host copies, so the sentinel may be any value of the dtype.
#include "tests/testing/guarded_output.h"

#include <cstring>

#include "core/copy.h"
#include "core/ops/elementwise.h"
#include "tests/testing/tensors.h"

namespace kelvin::testing {
namespace {

constexpr double kSentinel = -31337.25;  // far from any test value, finite in every float dtype

}  // namespace

GuardedOutput::GuardedOutput(const Shape& shape, DType dtype, Device device,
                             const Tensor* interior) {
  int64_t numel = 1;
  for (const int64_t dim : shape) numel *= dim;
  Tensor host = Tensor::Empty({kGuard + numel + kGuard}, dtype);
  ops::Fill(Context::Cpu(), host, IsFloating(dtype) ? kSentinel : -31337);
  if (interior != nullptr) {
    Tensor middle = host.Slice(kGuard, kGuard + numel).View(shape);
    ops::Cast(Context::Cpu(), Cast(*interior, DType::kF64), middle);
  }
  sentinel_ = host;
  whole_ = CopyToDevice(Context::Cpu(), host, device);
  view_ = whole_.Slice(kGuard, kGuard + numel).View(shape);
}

::testing::AssertionResult GuardedOutput::GuardsIntact(const std::string& what) const {
  const Tensor now = ToHost(whole_);
  const size_t element = DTypeSize(now.dtype());
  const int64_t numel = view_.numel();
  const auto* got = static_cast<const unsigned char*>(now.raw_data());
  const auto* want = static_cast<const unsigned char*>(sentinel_.raw_data());
  for (const int64_t begin : {int64_t{0}, kGuard + numel}) {
    for (int64_t i = begin; i < begin + kGuard; ++i) {
      if (std::memcmp(got + i * element, want + i * element, element) != 0) {
        return ::testing::AssertionFailure()
               << what << ": written outside the output: guard element " << i - begin
               << (begin == 0 ? " before" : " after") << " it (of " << kGuard << ")";
      }
    }
  }
  return ::testing::AssertionSuccess();
}

}  // namespace kelvin::testing
