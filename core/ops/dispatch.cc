// Argument checks shared by the op dispatchers.
#include "core/ops/dispatch.h"

namespace kelvin::ops {

void CheckShape(const Tensor& t, const Shape& shape, std::string_view name) {
  KELVIN_CHECK(t.defined()) << name << " is undefined; expected shape " << ShapeToString(shape);
  KELVIN_CHECK(t.shape() == shape)
      << name << " is " << t.ToString() << ", expected shape " << ShapeToString(shape);
}

void CheckDType(const Tensor& t, DType dtype, std::string_view name) {
  KELVIN_CHECK(t.dtype() == dtype)
      << name << " is " << t.ToString() << ", expected dtype " << DTypeName(dtype);
}

void CheckDevice(const Context& ctx, std::initializer_list<const Tensor*> tensors,
                 std::string_view op) {
  for (const Tensor* t : tensors) {
    KELVIN_CHECK(t->device() == ctx.device())
        << op << ": tensor " << t->ToString() << " is not on the context's device "
        << ctx.device().ToString();
  }
}

}  // namespace kelvin::ops
