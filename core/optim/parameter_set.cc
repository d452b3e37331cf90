// ParameterSet declaration, flat allocation and lookup.
#include "core/optim/parameter_set.h"

#include <cstring>

#include "core/check.h"

namespace kelvin {

void ParameterSet::Declare(const std::string& name, const Shape& shape, ParamGroup group) {
  KELVIN_CHECK(!allocated_) << "parameter " << name << " declared after Allocate";
  KELVIN_CHECK(index_.find(name) == index_.end()) << "parameter " << name << " declared twice";
  const int g = static_cast<int>(group);
  index_[name] = entries_.size();
  entries_.push_back({name, shape, group, group_elements_[g], Tensor(), Tensor()});
  group_elements_[g] += kelvin::NumElements(shape);
}

void ParameterSet::Allocate(DType dtype) {
  KELVIN_CHECK(!allocated_) << "ParameterSet allocated twice";
  for (int g = 0; g < kNumParamGroups; ++g) {
    if (group_elements_[g] == 0) continue;
    values_[g] = Tensor::ZerosCpu({group_elements_[g]}, dtype);
    grads_[g] = Tensor::ZerosCpu({group_elements_[g]}, AccumDType(dtype));
  }
  for (Entry& e : entries_) {
    const int g = static_cast<int>(e.group);
    const int64_t n = kelvin::NumElements(e.shape);
    e.value = values_[g].Slice(e.offset, e.offset + n).View(e.shape);
    e.grad = grads_[g].Slice(e.offset, e.offset + n).View(e.shape);
  }
  allocated_ = true;
}

const ParameterSet::Entry& ParameterSet::Get(const std::string& name) const {
  const auto it = index_.find(name);
  KELVIN_CHECK(it != index_.end()) << "unknown parameter " << name;
  return entries_[it->second];
}

Tensor& ParameterSet::value(const std::string& name) {
  KELVIN_CHECK(allocated_) << "parameter " << name << " read before Allocate";
  return entries_[index_.at(Get(name).name)].value;
}

Tensor& ParameterSet::grad(const std::string& name) {
  KELVIN_CHECK(allocated_) << "gradient of " << name << " read before Allocate";
  return entries_[index_.at(Get(name).name)].grad;
}

int64_t ParameterSet::NumElements() const {
  int64_t n = 0;
  for (int64_t e : group_elements_) n += e;
  return n;
}

void ParameterSet::ZeroGrads() {
  for (Tensor& g : grads_) {
    if (g.defined()) std::memset(g.raw_data(), 0, g.nbytes());
  }
}

}  // namespace kelvin
