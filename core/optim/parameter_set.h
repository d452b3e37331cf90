// ParameterSet: a model's named parameters, laid out in one flat buffer per optimizer group, with
// their gradients in a matching flat buffer, so the optimizer and gradient reductions work on a
// few large contiguous tensors while layers see named views.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace kelvin {

// How the optimizer treats a parameter: decoupled weight decay or not, and its learning-rate scale.
enum class ParamGroup { kDecay = 0, kNoDecay = 1, kTemperature = 2 };
inline constexpr int kNumParamGroups = 3;

class ParameterSet {
 public:
  struct Entry {
    std::string name;  // Kelvin's name, e.g. "layers.3.attention.wq"
    Shape shape;
    ParamGroup group;
    int64_t offset = 0;  // element offset inside its group's flat buffer
    Tensor value;        // view of values(group), dtype of Allocate
    Tensor grad;         // view of grads(group), AccumDType of the values
  };

  // Declares a parameter (before Allocate); names are unique.
  void Declare(const std::string& name, const Shape& shape, ParamGroup group);
  // Allocates the flat buffers [elements of the group] on the host; gradients zeroed.
  void Allocate(DType dtype);
  bool allocated() const { return allocated_; }

  const std::vector<Entry>& entries() const { return entries_; }
  bool Contains(const std::string& name) const { return index_.count(name) > 0; }
  const Entry& Get(const std::string& name) const;  // aborts on unknown names
  Tensor& value(const std::string& name);
  Tensor& grad(const std::string& name);

  // Flat buffers of one group (undefined tensor when the group is empty).
  Tensor& values(ParamGroup group) { return values_[static_cast<int>(group)]; }
  Tensor& grads(ParamGroup group) { return grads_[static_cast<int>(group)]; }
  int64_t NumElements() const;
  void ZeroGrads();

 private:
  std::vector<Entry> entries_;
  std::map<std::string, size_t> index_;
  int64_t group_elements_[kNumParamGroups] = {};
  Tensor values_[kNumParamGroups];
  Tensor grads_[kNumParamGroups];
  bool allocated_ = false;
};

}  // namespace kelvin
