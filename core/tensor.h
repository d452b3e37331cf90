// Tensor: a shape, a dtype and a device over reference-counted contiguous storage. Views share the
// storage at a byte offset (Slice along dim 0, View to another shape of the same size).
#pragma once

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

#include "core/check.h"
#include "core/device.h"
#include "core/dtype.h"

namespace kelvin {

using Shape = std::vector<int64_t>;

std::string ShapeToString(const Shape& shape);  // "[71, 229]"
int64_t NumElements(const Shape& shape);

// One allocation; freed through its allocator when the last tensor viewing it goes away.
class Storage {
 public:
  Storage(size_t bytes, Device device);
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;

  void* data() const { return data_; }
  size_t bytes() const { return bytes_; }
  Device device() const { return device_; }

 private:
  void* data_;
  size_t bytes_;
  Device device_;
};

class Tensor {
 public:
  Tensor() = default;  // undefined: no storage; defined() is false

  // Uninitialised memory (use ops::Fill / Zero, or write through data<T>()).
  static Tensor Empty(const Shape& shape, DType dtype, Device device = Device::Cpu());
  // Zero-filled host tensor (device tensors are zeroed through core/copy.h's Zero with a Context).
  static Tensor ZerosCpu(const Shape& shape, DType dtype);

  bool defined() const { return storage_ != nullptr; }
  const Shape& shape() const { return shape_; }
  int ndim() const { return static_cast<int>(shape_.size()); }
  int64_t dim(int axis) const;  // negative axes count from the end
  int64_t numel() const { return NumElements(shape_); }
  DType dtype() const { return dtype_; }
  Device device() const { return storage_ ? storage_->device() : Device::Cpu(); }
  size_t nbytes() const { return static_cast<size_t>(numel()) * DTypeSize(dtype_); }
  bool is_cpu() const { return device().is_cpu(); }
  bool is_cuda() const { return device().is_cuda(); }

  void* raw_data() const;
  template <typename T>
  T* data() const {
    KELVIN_CHECK(DTypeOf<T>() == dtype_)
        << "tensor " << ToString() << " accessed as " << DTypeName(DTypeOf<T>());
    return static_cast<T*>(raw_data());
  }

  // Rows [begin, end) of dim 0, sharing storage.
  Tensor Slice(int64_t begin, int64_t end) const;
  // The same elements under another shape (one entry may be -1: inferred).
  Tensor View(const Shape& shape) const;
  // Collapses all leading dims: [..., n] -> [rows, n].
  Tensor Flatten2D() const;

  bool SameStorage(const Tensor& other) const { return storage_ == other.storage_; }
  std::string ToString() const;  // "f32[71, 229]@cpu"

 private:
  Tensor(std::shared_ptr<Storage> storage, size_t offset_bytes, Shape shape, DType dtype);

  std::shared_ptr<Storage> storage_;
  size_t offset_bytes_ = 0;
  Shape shape_;
  DType dtype_ = DType::kF32;
};

}  // namespace kelvin
