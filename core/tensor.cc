// Tensor construction, views and descriptions.
#include "core/tensor.h"

#include <cstring>
#include <sstream>

#include "core/allocator.h"

namespace kelvin {

std::string ShapeToString(const Shape& shape) {
  std::ostringstream out;
  out << '[';
  for (size_t i = 0; i < shape.size(); ++i) out << (i ? ", " : "") << shape[i];
  out << ']';
  return out.str();
}

int64_t NumElements(const Shape& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

Storage::Storage(size_t bytes, Device device)
    : data_(AllocatorFor(device).Allocate(bytes)), bytes_(bytes), device_(device) {}

Storage::~Storage() { AllocatorFor(device_).Deallocate(data_, bytes_); }

Tensor::Tensor(std::shared_ptr<Storage> storage, size_t offset_bytes, Shape shape, DType dtype)
    : storage_(std::move(storage)),
      offset_bytes_(offset_bytes),
      shape_(std::move(shape)),
      dtype_(dtype) {}

Tensor Tensor::Empty(const Shape& shape, DType dtype, Device device) {
  for (int64_t d : shape) {
    KELVIN_CHECK_GE(d, 0) << "negative dimension in shape " << ShapeToString(shape);
  }
  const size_t bytes = static_cast<size_t>(NumElements(shape)) * DTypeSize(dtype);
  return Tensor(std::make_shared<Storage>(bytes, device), 0, shape, dtype);
}

Tensor Tensor::ZerosCpu(const Shape& shape, DType dtype) {
  Tensor t = Empty(shape, dtype, Device::Cpu());
  std::memset(t.raw_data(), 0, t.nbytes());
  return t;
}

int64_t Tensor::dim(int axis) const {
  const int n = ndim();
  const int a = axis < 0 ? axis + n : axis;
  KELVIN_CHECK(a >= 0 && a < n) << "axis " << axis << " out of range for " << ToString();
  return shape_[static_cast<size_t>(a)];
}

void* Tensor::raw_data() const {
  KELVIN_CHECK(defined()) << "access to an undefined tensor";
  return static_cast<char*>(storage_->data()) + offset_bytes_;
}

Tensor Tensor::Slice(int64_t begin, int64_t end) const {
  KELVIN_CHECK(ndim() >= 1) << "Slice of a scalar tensor " << ToString();
  KELVIN_CHECK(0 <= begin && begin <= end && end <= shape_[0])
      << "Slice [" << begin << ", " << end << ") out of range for " << ToString();
  Shape shape = shape_;
  shape[0] = end - begin;
  const size_t row_bytes =
      static_cast<size_t>(numel() / std::max<int64_t>(shape_[0], 1)) * DTypeSize(dtype_);
  return Tensor(storage_, offset_bytes_ + static_cast<size_t>(begin) * row_bytes, shape, dtype_);
}

Tensor Tensor::View(const Shape& shape) const {
  Shape resolved = shape;
  int inferred = -1;
  int64_t known = 1;
  for (size_t i = 0; i < resolved.size(); ++i) {
    if (resolved[i] == -1) {
      KELVIN_CHECK_EQ(inferred, -1) << "View " << ShapeToString(shape) << " has two -1 dims";
      inferred = static_cast<int>(i);
    } else {
      known *= resolved[i];
    }
  }
  if (inferred >= 0) {
    KELVIN_CHECK(known > 0 && numel() % known == 0)
        << "cannot view " << ToString() << " as " << ShapeToString(shape);
    resolved[static_cast<size_t>(inferred)] = numel() / known;
  }
  KELVIN_CHECK_EQ(NumElements(resolved), numel())
      << "cannot view " << ToString() << " as " << ShapeToString(shape);
  return Tensor(storage_, offset_bytes_, resolved, dtype_);
}

Tensor Tensor::Flatten2D() const {
  KELVIN_CHECK(ndim() >= 1) << "Flatten2D of a scalar tensor";
  return View({-1, shape_.back()});
}

std::string Tensor::ToString() const {
  if (!defined()) return "undefined tensor";
  return std::string(DTypeName(dtype_)) + ShapeToString(shape_) + "@" + device().ToString();
}

}  // namespace kelvin
