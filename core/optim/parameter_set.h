// ParameterSet: a model's named parameters, laid out in one flat buffer per optimizer group, with
// their gradients in a matching flat buffer, so the optimizer and gradient reductions work on a
// few large contiguous tensors while layers see named views. The buffers live on one device (the
// Context given to Allocate).
#pragma once

#include <map>
#include <string>
#include <vector>

#include "core/context.h"
#include "core/tensor.h"

namespace kelvin {

// How the optimizer treats a parameter: decoupled weight decay or not, and its learning-rate scale.
enum class ParamGroup { kDecay = 0, kNoDecay = 1, kTemperature = 2 };
inline constexpr int kNumParamGroups = 3;

// Mixed precision (bf16 models): the layers read a bf16 model copy (`value`), the optimizer
// updates f32 master weights (`master`) and the gradients are f32 (`grad`), as Megatron's and
// PyTorch AMP's bf16 training keep them. For f32 and f64 models master and value are one tensor.
// A frozen parameter (declared not trainable: the base of a parameter-efficient fine-tune) holds
// its values alone, in a flat buffer of its own outside the groups: no master weights (its value
// is its own master, as in AllocateForwardOnly), no gradient (an undefined grad view, which the
// ops take as "skip this parameter gradient") and so no optimizer state, since the optimizers and
// the gradient reductions work on the groups' buffers, which hold the trainable parameters only.
class ParameterSet {
 public:
  struct Entry {
    std::string name;  // the Hugging Face name, e.g. "model.layers.3.self_attn.q_proj.weight"
    Shape shape;
    ParamGroup group;
    bool trainable = true;  // false: frozen (values only; see the class comment)
    int64_t offset = 0;     // element offset inside its group's flat buffer (frozen: inside
                            // frozen_values())
    Tensor value;           // view of values(group), dtype of Allocate: what the layers read
    Tensor master;          // view of masters(group), AccumDType: what the optimizer updates;
                            // undefined while the masters are sharded (masters_whole() false);
                            // frozen: the value itself
    Tensor grad;            // view of grads(group), AccumDType of the values; frozen: undefined
  };

  // Declares a parameter (before Allocate); names are unique. `trainable` false freezes it.
  void Declare(const std::string& name, const Shape& shape, ParamGroup group,
               bool trainable = true);
  // Allocates the flat buffers [elements of the group] on ctx's device, zeroed. A bf16 `dtype`
  // gets f32 master weights apart from its values; so does any dtype with separate_master (the
  // CPU tests run the mixed-precision bookkeeping with an f32 model this way). `gradient_shards`
  // (ZeRO-1's shard count): each gradient buffer lies in a zero-padded one of a multiple of it,
  // which the distributed optimizer reduce-scatters and all-gathers in place; with a model copy
  // the masters are then sharded (masters_sharded), placed whole in the gradient buffers until the
  // optimizer takes its shard.
  void Allocate(const Context& ctx, DType dtype, bool separate_master = false,
                int64_t gradient_shards = 1);
  void Allocate(DType dtype) { Allocate(Context::Cpu(), dtype); }
  // For a model that only runs forward (generation, scoring): the values alone, in `dtype` (bf16
  // included), which are their own master weights (Assign rounds into them); no gradient buffers
  // (grads() and the entries' grad views stay undefined), so a bf16 model holds 2 bytes per
  // parameter instead of training's 2 + 4 + 4.
  void AllocateForwardOnly(const Context& ctx, DType dtype);
  bool allocated() const { return allocated_; }
  bool forward_only() const { return forward_only_; }
  const Context& context() const { return ctx_; }
  // Whether the values are a model copy of separate master weights.
  bool has_model_copy() const { return separate_master_; }
  // Whether a distributed optimizer keeps the master weights in shards (ZeRO-1 with a model copy,
  // Allocate with gradient_shards > 1), as Megatron's distributed optimizer keeps them: each
  // data-parallel rank's optimizer holds its shard, and the whole masters exist only while placed
  // in the gradient buffers (free between steps): from Allocate until the optimizer takes its shard
  // (so the model can initialise or load them), and while the optimizer gathers them for an export
  // or to refresh the model copy.
  bool masters_sharded() const { return masters_sharded_; }
  // Whether the whole master weights are readable: always, unless sharded and not placed in the
  // gradient buffers. master(), masters(), MasterOnHost, Assign and SyncModelCopy need them.
  bool masters_whole() const { return !masters_sharded_ || masters_in_gradients_; }
  // Sharded masters only: the gradient buffers (zero, between steps) become the whole masters'
  // storage, for the distributed optimizer to gather every rank's shard into...
  void PlaceWholeMastersInGradients();
  // ...and back to gradients (zeroed), the masters sharded again.
  void DropWholeMasters();

  const std::vector<Entry>& entries() const { return entries_; }
  bool Contains(const std::string& name) const { return index_.count(name) > 0; }
  const Entry& Get(const std::string& name) const;  // aborts on unknown names
  Tensor& value(const std::string& name);
  Tensor& master(const std::string& name);
  Tensor& grad(const std::string& name);

  // [frozen elements] the frozen parameters' values (undefined when none is frozen).
  const Tensor& frozen_values() const { return frozen_values_; }
  // Flat buffers of one group, trainable parameters only (undefined tensor when the group is
  // empty; masters also while sharded).
  Tensor& values(ParamGroup group) { return values_[static_cast<int>(group)]; }
  Tensor& masters(ParamGroup group);
  Tensor& grads(ParamGroup group) { return grads_[static_cast<int>(group)]; }
  // grads(group) and its zero tail [a multiple of gradient_shards elements].
  Tensor& padded_grads(ParamGroup group) { return padded_grads_[static_cast<int>(group)]; }
  int64_t NumElements() const;           // every parameter's, frozen ones included
  int64_t NumTrainableElements() const;  // those the optimizer updates
  // Bytes of the whole master weights kept apart from the values (0 without a model copy, or when
  // sharded: the distributed optimizer holds the shards).
  int64_t WholeMasterBytes() const;
  void ZeroGrads();

  // Parameter `name` = `host` (a host tensor of its shape, any float dtype), converted into the
  // master weights and the model copy (a frozen one: into its value, rounded to its dtype).
  void Assign(const std::string& name, const Tensor& host);
  // A host copy of parameter `name`'s master weights (the tensor itself when already on the host).
  Tensor MasterOnHost(const std::string& name) const;
  // values = masters (rounded to the model's dtype) after the masters changed: no-op without a
  // model copy.
  void SyncModelCopy();

 private:
  // Points the entries' value views at values_ and frozen_values_.
  void ViewValues();
  // Points the entries' master views at masters_ (undefined views where a group has none).
  void ViewMasters();

  std::vector<Entry> entries_;
  std::map<std::string, size_t> index_;
  int64_t group_elements_[kNumParamGroups] = {};  // trainable parameters only
  int64_t frozen_elements_ = 0;
  Context ctx_ = Context::Cpu();
  Tensor frozen_values_;             // [frozen elements] the model's dtype
  Tensor values_[kNumParamGroups];   // [group elements] the model's dtype
  Tensor masters_[kNumParamGroups];  // [group elements] AccumDType; values_ without a model copy
  Tensor grads_[kNumParamGroups];    // [group elements] AccumDType, views of padded_grads_
  Tensor padded_grads_[kNumParamGroups];  // [group elements rounded up to gradient_shards]
  bool separate_master_ = false;
  bool forward_only_ = false;  // AllocateForwardOnly
  bool masters_sharded_ = false;
  bool masters_in_gradients_ = false;  // sharded masters placed whole in the gradient buffers
  bool allocated_ = false;
};

}  // namespace kelvin
