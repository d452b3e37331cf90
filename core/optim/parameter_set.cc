// ParameterSet declaration, flat allocation on a device, lookup, and the master weights / model
// copy bookkeeping.
#include "core/optim/parameter_set.h"

#include "core/check.h"
#include "core/copy.h"
#include "core/ops/elementwise.h"

namespace kelvin {
namespace {

constexpr const char* kShardedMastersHint =
    " are sharded over the data-parallel ranks (ZeRO-1): DistributedAdamW::GatherMasters places "
    "them whole in the gradient buffers between steps";

}  // namespace

void ParameterSet::Declare(const std::string& name, const Shape& shape, ParamGroup group,
                           bool trainable) {
  KELVIN_CHECK(!allocated_) << "parameter " << name << " declared after Allocate";
  KELVIN_CHECK(index_.find(name) == index_.end()) << "parameter " << name << " declared twice";
  int64_t& elements = trainable ? group_elements_[static_cast<int>(group)] : frozen_elements_;
  index_[name] = entries_.size();
  entries_.push_back({name, shape, group, trainable, elements, Tensor(), Tensor(), Tensor()});
  elements += kelvin::NumElements(shape);
}

void ParameterSet::ViewValues() {
  for (Entry& e : entries_) {
    const Tensor& flat = e.trainable ? values_[static_cast<int>(e.group)] : frozen_values_;
    e.value = flat.Slice(e.offset, e.offset + kelvin::NumElements(e.shape)).View(e.shape);
  }
}

void ParameterSet::Allocate(const Context& ctx, DType dtype, bool separate_master,
                            int64_t gradient_shards) {
  KELVIN_CHECK(gradient_shards >= 1) << "gradient_shards " << gradient_shards;
  KELVIN_CHECK(!allocated_) << "ParameterSet allocated twice";
  ctx_ = ctx;
  if (frozen_elements_ > 0) frozen_values_ = Zeros(ctx, {frozen_elements_}, dtype);
  separate_master_ = separate_master || dtype == DType::kBF16;
  masters_sharded_ = separate_master_ && gradient_shards > 1;
  const DType accum = AccumDType(dtype);
  for (int g = 0; g < kNumParamGroups; ++g) {
    if (group_elements_[g] == 0) continue;
    values_[g] = Zeros(ctx, {group_elements_[g]}, dtype);
    const int64_t padded =
        (group_elements_[g] + gradient_shards - 1) / gradient_shards * gradient_shards;
    padded_grads_[g] = Zeros(ctx, {padded}, accum);
    grads_[g] = padded_grads_[g].Slice(0, group_elements_[g]);
    if (!masters_sharded_) {
      masters_[g] = separate_master_ ? Zeros(ctx, {group_elements_[g]}, accum) : values_[g];
    }
  }
  ViewValues();
  for (Entry& e : entries_) {
    if (!e.trainable) continue;  // no gradient
    e.grad = grads_[static_cast<int>(e.group)]
                 .Slice(e.offset, e.offset + kelvin::NumElements(e.shape))
                 .View(e.shape);
  }
  allocated_ = true;
  if (masters_sharded_) {
    PlaceWholeMastersInGradients();  // for the model to initialise or load
  } else {
    ViewMasters();
  }
}

void ParameterSet::AllocateForwardOnly(const Context& ctx, DType dtype) {
  KELVIN_CHECK(!allocated_) << "ParameterSet allocated twice";
  ctx_ = ctx;
  forward_only_ = true;
  if (frozen_elements_ > 0) frozen_values_ = Zeros(ctx, {frozen_elements_}, dtype);
  for (int g = 0; g < kNumParamGroups; ++g) {
    if (group_elements_[g] == 0) continue;
    values_[g] = Zeros(ctx, {group_elements_[g]}, dtype);
    masters_[g] = values_[g];
  }
  ViewValues();
  allocated_ = true;
  ViewMasters();
}

void ParameterSet::ViewMasters() {
  for (Entry& e : entries_) {
    const Tensor& masters = masters_[static_cast<int>(e.group)];
    if (!e.trainable) {
      e.master = e.value;  // a frozen value is its own master
      continue;
    }
    e.master = masters.defined()
                   ? masters.Slice(e.offset, e.offset + kelvin::NumElements(e.shape)).View(e.shape)
                   : Tensor();
  }
}

void ParameterSet::PlaceWholeMastersInGradients() {
  KELVIN_CHECK(masters_sharded_ && !masters_in_gradients_)
      << "PlaceWholeMastersInGradients needs sharded masters that are not placed yet";
  for (int g = 0; g < kNumParamGroups; ++g) masters_[g] = grads_[g];
  masters_in_gradients_ = true;
  ViewMasters();
}

void ParameterSet::DropWholeMasters() {
  KELVIN_CHECK(masters_in_gradients_) << "DropWholeMasters without whole masters in the gradients";
  for (Tensor& m : masters_) m = Tensor();
  masters_in_gradients_ = false;
  ViewMasters();
  ZeroGrads();
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

Tensor& ParameterSet::master(const std::string& name) {
  KELVIN_CHECK(allocated_) << "parameter " << name << " read before Allocate";
  Entry& e = entries_[index_.at(Get(name).name)];
  KELVIN_CHECK(!e.trainable || masters_whole())
      << "the master weights of " << name << kShardedMastersHint;
  return e.master;
}

Tensor& ParameterSet::masters(ParamGroup group) {
  KELVIN_CHECK(masters_whole()) << "the master weights" << kShardedMastersHint;
  return masters_[static_cast<int>(group)];
}

Tensor& ParameterSet::grad(const std::string& name) {
  KELVIN_CHECK(allocated_) << "gradient of " << name << " read before Allocate";
  return entries_[index_.at(Get(name).name)].grad;
}

int64_t ParameterSet::NumElements() const { return NumTrainableElements() + frozen_elements_; }

int64_t ParameterSet::NumTrainableElements() const {
  int64_t n = 0;
  for (int64_t e : group_elements_) n += e;
  return n;
}

int64_t ParameterSet::WholeMasterBytes() const {
  if (!separate_master_ || masters_sharded_) return 0;
  int64_t bytes = 0;
  for (const Tensor& m : masters_) {
    if (m.defined()) bytes += static_cast<int64_t>(m.nbytes());
  }
  return bytes;
}

void ParameterSet::ZeroGrads() {
  KELVIN_CHECK(!masters_in_gradients_)
      << "ZeroGrads while the gradient buffers hold the whole master weights: the distributed "
         "optimizer takes its shard of them (or drops the gathered ones) first";
  for (Tensor& g : grads_) {
    if (g.defined()) Zero(ctx_, g);
  }
}

void ParameterSet::Assign(const std::string& name, const Tensor& host) {
  Tensor& master = this->master(name);
  KELVIN_CHECK(host.is_cpu() && host.shape() == master.shape())
      << "parameter " << name << " " << ShapeToString(master.shape())
      << " assigned from a host tensor of another shape: " << host.ToString();
  if (ctx_.is_cuda()) {
    Tensor converted = Tensor::Empty(host.shape(), master.dtype());
    ops::Cast(Context::Cpu(), host, converted);
    CopyTensor(ctx_, converted, master);
  } else {
    ops::Cast(ctx_, host, master);
  }
  if (separate_master_ && Get(name).trainable) ops::Cast(ctx_, master, value(name));
}

Tensor ParameterSet::MasterOnHost(const std::string& name) const {
  const Entry& e = Get(name);
  KELVIN_CHECK(!e.trainable || masters_whole())
      << "the master weights of " << name << kShardedMastersHint;
  const Tensor& master = e.master;
  return master.is_cpu() ? master : CopyToDevice(ctx_, master, Device::Cpu());
}

void ParameterSet::SyncModelCopy() {
  if (!separate_master_) return;
  KELVIN_CHECK(masters_whole()) << "SyncModelCopy: the master weights" << kShardedMastersHint;
  for (int g = 0; g < kNumParamGroups; ++g) {
    if (values_[g].defined()) ops::Cast(ctx_, masters_[g], values_[g]);
  }
}

}  // namespace kelvin
