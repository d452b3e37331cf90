// Llama-3 forward and explicit backward on the op library and the SSA operator (the Hugging Face
// import and export are in llama_model_io.cc).
#include "models/llama/llama_model.h"

#include <algorithm>
#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/copy.h"
#include "core/logging.h"
#include "core/ops/dispatch.h"
#include "core/ops/elementwise.h"
#include "core/ops/embedding.h"
#include "core/ops/gemm.h"
#include "core/ops/rmsnorm.h"
#include "core/ops/rope.h"
#include "core/ops/swiglu.h"
#include "core/profile_range.h"
#include "parallel/comm/self_communicator.h"
#include "parallel/context_parallel.h"
#include "parallel/tensor_parallel.h"
#include "ssa/ssa_attention.h"

namespace kelvin::models {
namespace {

// y [N, out] = x [N, in] W^T, W [out, in] as Hugging Face stores Linear weights.
void Linear(const Context& ctx, const Tensor& x, const Tensor& w, Tensor& y) {
  ops::Gemm(ctx, x, false, w, true, y);
}

// For y = x W^T: dx (= or +=) dy W, dW += dy^T x.
void LinearBackward(const Context& ctx, const Tensor& dy, const Tensor& x, const Tensor& w,
                    Tensor& dx, bool accumulate_dx, Tensor& dw) {
  ops::GemmBackward(ctx, dy, x, false, w, true, &dx, &dw, accumulate_dx, true);
}

// Rows [block * n / blocks, (block + 1) * n / blocks) of a query-side tensor [n, ...] (an
// undefined tensor stays undefined).
Tensor QueryRows(const Tensor& t, int block, int blocks) {
  if (!t.defined() || blocks == 1) return t;
  const int64_t rows = t.dim(0) / blocks;
  return t.Slice(block * rows, (block + 1) * rows);
}

// The attention inputs of one query block: its rows of the query side, every key.
ssa::SsaAttentionInputs QueryBlockInputs(const ssa::SsaAttentionInputs& in, int block, int blocks) {
  ssa::SsaAttentionInputs part = in;
  part.u = QueryRows(in.u, block, blocks);
  part.query_positions = QueryRows(in.query_positions, block, blocks);
  part.query_source = QueryRows(in.query_source, block, blocks);
  return part;
}

// How the SSA operator runs query block `block`'s attention core: the model's backend and the
// host copies of the block's position ids (llama_model.h, LlamaMicroBatchActivations).
ssa::AttentionCoreOptions CoreOptions(ssa::AttentionBackend backend,
                                      const LlamaMicroBatchActivations& slot, int block,
                                      int blocks) {
  return {backend, QueryRows(slot.host_positions, block, blocks), slot.host_key_positions};
}

}  // namespace

LlamaModel::LlamaModel(const LlamaConfig& config, DType dtype, const LlamaParallelism& parallelism,
                       const LlamaRecompute& recompute, const LlamaPlacement& placement)
    : config_(config),
      attention_options_(config.AttentionOptions()),
      attention_backend_(placement.attention_backend),
      dtype_(dtype),
      ctx_(placement.ctx),
      parallelism_(parallelism),
      alone_(std::make_unique<parallel::SelfCommunicator>("one rank", 0, placement.ctx)),
      tp_(parallelism.tp != nullptr ? parallelism.tp : alone_.get()),
      cp_(parallelism.cp != nullptr ? parallelism.cp : alone_.get()),
      pp_(parallelism.pp != nullptr ? parallelism.pp : alone_.get()),
      layout_(ShardLayoutOf(config, tp_->rank(), tp_->size())),
      stage_(StageLayoutOf(config, pp_->rank(), pp_->size(), parallelism.virtual_stages)),
      recompute_(recompute) {
  KELVIN_CHECK(!parallelism.sequence_parallel || tp_->size() > 1)
      << "sequence parallelism needs a tensor-parallel group of two ranks or more";
  for (const LlamaParameterSpec& spec : StageParameterSpecs(config, stage_)) {
    Declare(spec.name, spec.full_shape, spec.group, spec.trainable);
  }
  if (placement.forward_only) {
    params_.AllocateForwardOnly(ctx_, dtype);
  } else {
    params_.Allocate(ctx_, dtype, placement.separate_master, placement.gradient_shards);
  }
  for (const LlamaStageLayout::Chunk& c : stage_.chunks) {
    for (int64_t layer = c.layer_begin; layer < c.layer_end; ++layer) {  // local layer order
      layer_values_.push_back(LayerWeightsOf(params_, layer, /*gradients=*/false));
      layer_grads_.push_back(LayerWeightsOf(params_, layer, /*gradients=*/true));
    }
  }
  end_values_ = EndWeightsOf(params_, config.tie_word_embeddings, /*gradients=*/false);
  end_grads_ = EndWeightsOf(params_, config.tie_word_embeddings, /*gradients=*/true);
  inv_freq_ = CopyToDevice(
      ctx_, ops::RopeInverseFrequencies(config.rope, config.head_dim, AccumDType(dtype)),
      ctx_.device());
  if (config.rope.type == ops::RopeType::kLongrope) {
    inv_freq_long_ = CopyToDevice(
        ctx_,
        ops::RopeInverseFrequencies(config.rope, config.head_dim, AccumDType(dtype), /*long=*/true),
        ctx_.device());
  }
  InitSsaParameters();
  InitLoraParameters(/*seed=*/0);
  gradient_units_ = GradientUnitsOf(config, stage_);
}

void LlamaModel::Declare(const std::string& name, const Shape& full_shape, ParamGroup group,
                         bool trainable) {
  const ParameterShard shard = ShardOf(config_, layout_, name);
  Shape local_shape = full_shape;
  if (shard.axis >= 0) local_shape[shard.axis] = shard.count;
  params_.Declare(name, local_shape, group, trainable);
  full_shapes_[name] = full_shape;
  shards_[name] = shard;
}

bool LlamaModel::IsCanonicalCopy(const std::string& name) const {
  // The last stage's tied embedding is a copy of the first stage's.
  if (name == kEmbeddingName && !stage_.holds_embedding_input()) return false;
  const ParameterShard& shard = shards_.at(name);
  if (shard.axis < 0) return tp_->rank() == 0;  // replicated: count rank 0's copy
  // Replicated KV heads: the first rank holding each head counts it.
  if (shard.replicated_kv) return tp_->rank() % (tp_->size() / config_.num_key_value_heads) == 0;
  return true;
}

io::TensorRegion LlamaModel::RegionOf(const std::string& name) const {
  return models::RegionOf(shards_.at(name), full_shapes_.at(name));
}

void LlamaModel::FinishGradients() {
  if (stage_.stages > 1 && config_.tie_word_embeddings && end_grads_.embedding.defined()) {
    KELVIN_CHECK(parallelism_.embedding != nullptr)
        << "tied embeddings over pipeline stages need the embedding group";
    parallelism_.embedding->AllReduce(end_grads_.embedding, parallel::ReduceOp::kSum);
  }
  if (!gradients_finished_) {
    for (const ParameterSet::Entry& e : params_.entries()) SumPartialGradient(e);
    return;
  }
  const LlamaGradientUnits& units = gradient_units_;
  for (size_t u = 0; u < units.parameters.size(); ++u) {
    KELVIN_CHECK(static_cast<int>(u) == units.summed_last ||
                 backwards_done_[u] == backwards_per_step_)
        << "gradient unit " << u << " (" << units.parameters[u].front() << ", ...) had "
        << backwards_done_[u] << " backwards this step, not " << backwards_per_step_;
  }
  if (units.summed_last >= 0) FinishUnit(units.summed_last);
  std::fill(backwards_done_.begin(), backwards_done_.end(), 0);
}

void LlamaModel::ReportFinishedGradients(int backwards_per_step,
                                         std::function<void(int unit)> finished) {
  KELVIN_CHECK(backwards_per_step >= 1) << "a step of " << backwards_per_step << " backwards";
  backwards_per_step_ = backwards_per_step;
  gradients_finished_ = std::move(finished);
  backwards_done_.assign(gradient_units_.parameters.size(), 0);
}

void LlamaModel::BackwardDone(int unit) {
  if (!gradients_finished_ || unit < 0) return;
  if (++backwards_done_[static_cast<size_t>(unit)] == backwards_per_step_) FinishUnit(unit);
}

void LlamaModel::ParametersNeeded(int unit) {
  if (wait_for_parameters_ && unit >= 0) wait_for_parameters_(unit);
}

void LlamaModel::FinishUnit(int unit) {
  for (const std::string& name : gradient_units_.parameters[static_cast<size_t>(unit)]) {
    SumPartialGradient(params_.Get(name));
  }
  gradients_finished_(unit);
}

void LlamaModel::SumPartialGradient(const ParameterSet::Entry& e) {
  if (!e.trainable) return;  // frozen: no gradient
  const ParameterShard& shard = shards_.at(e.name);
  Tensor grad = e.grad;
  if ((shard.axis < 0 && parallelism_.sequence_parallel) || shard.partial_over_tensor_parallel) {
    tp_->AllReduce(grad, parallel::ReduceOp::kSum);  // each rank saw its own tokens or outputs
  } else if (shard.replicated_kv) {
    // Sum over the ranks sharing each KV head: every rank adds its gradient into its head's
    // slot of a [G, ...] buffer, the group sums, each rank takes its head's slot back.
    const int64_t g = config_.num_key_value_heads, per_head = grad.numel();
    Tensor slots = Zeros(ctx_, {g * per_head}, grad.dtype());
    Tensor mine = slots.Slice(layout_.kv_begin * per_head, (layout_.kv_begin + 1) * per_head);
    CopyTensor(ctx_, grad.View({-1}), mine);
    tp_->AllReduce(slots, parallel::ReduceOp::kSum);
    Tensor flat = grad.View({-1});
    CopyTensor(ctx_, mine, flat);
  }
}

int64_t LlamaModel::LocalTokens(int64_t tokens) const {
  return parallelism_.sequence_parallel ? tokens / layout_.tp_size : tokens;
}

int64_t LlamaModel::LocalLayer(int64_t layer) const {
  for (const LlamaStageLayout::Chunk& c : stage_.chunks) {
    if (layer >= c.layer_begin && layer < c.layer_end) return c.local_begin + layer - c.layer_begin;
  }
  KELVIN_FATAL() << "layer " << layer << " is not on pipeline rank " << stage_.rank;
  return -1;
}

Tensor& LlamaModel::ReduceTokens(Tensor& partial) {
  if (!parallelism_.sequence_parallel) {
    parallel::ReduceFromTensorParallelRegion(*tp_, partial);
    return partial;
  }
  parallel::ReduceScatterToSequenceParallelRegion(*tp_, partial, scratch_.local_tokens);
  return scratch_.local_tokens;
}

const Tensor& LlamaModel::FullTokenGradient(const Tensor& local) {
  if (!parallelism_.sequence_parallel) return local;
  parallel::GatherFromSequenceParallelRegion(*tp_, local, scratch_.gathered_grad);
  return scratch_.gathered_grad;
}

void LlamaModel::AllocateSlot(LlamaMicroBatchActivations& slot, int64_t batch, int64_t seq) {
  AllocateScratch(batch, seq);
  if (batch == slot.batch && seq == slot.seq) return;
  slot.batch = batch;
  slot.seq = seq;
  const bool cp = SplitsRows();
  const int64_t nk = batch * seq, n = nk / ContextParallelSize(), nl = LocalTokens(n);
  const int64_t d_model = config_.hidden_size;
  const DType acc = AccumDType(dtype_);
  const Device device = ctx_.device();
  auto act = [&](const Shape& shape, DType dtype) { return Tensor::Empty(shape, dtype, device); };
  auto maybe = [&](bool needed, const Shape& shape, DType dtype) {
    return needed ? Tensor::Empty(shape, dtype, device) : Tensor();
  };
  slot.tokens = act({n}, DType::kI32);
  slot.positions = act({n}, DType::kI32);
  slot.key_positions = maybe(cp, {nk}, DType::kI32);
  slot.layers.assign(static_cast<size_t>(stage_.num_local_layers()), {});
  for (LlamaLayerActivations& a : slot.layers) {
    AllocateLayerActivations(batch, seq, /*recomputed=*/false, a);
  }
  slot.outputs.clear();
  slot.output_grads.clear();
  for (int c = 0; c < stage_.virtual_stages; ++c) {
    slot.outputs.push_back(act({nl, d_model}, dtype_));
    slot.output_grads.push_back(act({nl, d_model}, dtype_));
  }
  const bool head = stage_.holds_head();
  slot.h_final = maybe(head, {n, d_model}, dtype_);
  slot.rstd_final = maybe(head, {nl}, acc);
  slot.logits = maybe(head, {n, layout_.vocab}, dtype_);
}

void LlamaModel::AllocateScratch(int64_t batch, int64_t seq) {
  KELVIN_CHECK(!SplitsRows() || seq % (2 * ContextParallelSize()) == 0)
      << "context parallelism: T=" << seq << " tokens per row do not split into 2 x "
      << ContextParallelSize() << " chunks";
  const int64_t nk = batch * seq, n = nk / ContextParallelSize();
  if (nk == scratch_tokens_) return;
  scratch_tokens_ = nk;
  KELVIN_CHECK(LocalTokens(n) * layout_.tp_size == n || !parallelism_.sequence_parallel)
      << "sequence parallelism: B*T=" << n << " tokens do not split over " << layout_.tp_size
      << " tensor-parallel ranks";
  const ActivationSizes<int64_t> sizes = SizesOf(batch, seq);
  for (const LlamaScratchField& field : LlamaScratchFields()) {
    const bool here = ActivationNeeded(field.need, attention_options_, Splits());
    scratch_.*field.member = here ? AllocateField(field, sizes) : Tensor();
  }
  // Without sequence parallelism a norm's input gradient [N, D] takes the partial sums' buffer.
  if (!scratch_.d_proj.defined()) scratch_.d_proj = scratch_.proj;
  AllocateLayerActivations(batch, seq, /*recomputed=*/true, recomputed_);
}

ActivationSizes<int64_t> LlamaModel::SizesOf(int64_t batch, int64_t seq) const {
  const int64_t nk = batch * seq, n = nk / ContextParallelSize();
  return {.local_tokens = LocalTokens(n),
          .tokens = n,
          .key_tokens = nk,
          .model = config_.hidden_size,
          .heads = layout_.heads,
          .kv_heads = layout_.kv_heads,
          .head_dim = config_.head_dim,
          .ffn = layout_.ffn};
}

TokenSplits LlamaModel::Splits() const {
  return {.context_parallel = SplitsRows(), .sequence_parallel = parallelism_.sequence_parallel};
}

template <typename Owner>
Tensor LlamaModel::AllocateField(const ActivationField<Owner>& field,
                                 const ActivationSizes<int64_t>& sizes) const {
  Shape shape;
  for (const ActivationDim dim : field.dims) shape.push_back(sizes.Of(dim));
  if (field.flat) shape = {ActivationElements(field, sizes)};
  return Tensor::Empty(shape, field.statistics ? AccumDType(dtype_) : dtype_, ctx_.device());
}

void LlamaModel::AllocateLayerActivations(int64_t batch, int64_t seq, bool recomputed,
                                          LlamaLayerActivations& a) const {
  const ActivationSizes<int64_t> sizes = SizesOf(batch, seq);
  for (const LlamaActivationField& field : LlamaActivationFields()) {
    const bool here = ActivationNeeded(field.need, attention_options_, Splits()) &&
                      Recomputed(field, recompute_) == recomputed;
    a.*field.member = here ? AllocateField(field, sizes) : Tensor();
  }
}

LlamaModel::BufferBytes LlamaModel::AllocatedBufferBytes() const {
  std::set<const void*> counted;  // buffers that alias one another count once
  auto bytes = [&](std::initializer_list<const Tensor*> tensors) {
    int64_t sum = 0;
    for (const Tensor* t : tensors) {
      if (t->defined() && counted.insert(t->raw_data()).second) {
        sum += static_cast<int64_t>(t->nbytes());
      }
    }
    return sum;
  };
  BufferBytes b;
  const auto fields_bytes = [&](const LlamaLayerActivations& a) {
    int64_t sum = 0;
    for (const LlamaActivationField& field : LlamaActivationFields()) {
      sum += bytes({&(a.*field.member)});
    }
    return sum;
  };
  for (const LlamaMicroBatchActivations& slot : slots_) {
    for (const LlamaLayerActivations& a : slot.layers) b.activations += fields_bytes(a);
    for (const Tensor& t : slot.outputs) b.activations += bytes({&t});
    b.activations += bytes(
        {&slot.h_final, &slot.rstd_final, &slot.tokens, &slot.positions, &slot.key_positions});
    b.logits += bytes({&slot.logits});
    for (const Tensor& t : slot.output_grads) b.backward_scratch += bytes({&t});
  }
  for (const LlamaScratchField& field : LlamaScratchFields()) {
    b.backward_scratch += bytes({&(scratch_.*field.member)});
  }
  b.backward_scratch += fields_bytes(recomputed_);  // the recompute buffers count as scratch
  return b;
}

ssa::SsaAttentionInputs LlamaModel::AttentionInputs(const LlamaMicroBatchActivations& slot,
                                                    const LlamaLayerActivations& a) const {
  const Tensor& inv_freq = slot.long_rope ? inv_freq_long_ : inv_freq_;
  const double rope_factor = ops::RopeAttentionFactor(config_.rope);
  if (!SplitsRows()) {
    return {a.u,      slot.positions, a.query_source, a.k,        a.v,
            Tensor(), a.value_source, inv_freq,       rope_factor};
  }
  return {a.u,        slot.positions,     a.query_source,     a.k_all,
          a.v_all,    slot.key_positions, a.value_source_all, inv_freq,
          rope_factor};
}

int LlamaModel::AttentionBlocks() const { return SplitsRows() ? 2 : 1; }

ssa::SsaBlockShape LlamaModel::AttentionShape(const LlamaMicroBatchActivations& slot,
                                              int block) const {
  if (!SplitsRows()) return ssa::SsaBlockShape::Full(slot.batch, slot.seq);
  const int ranks = ContextParallelSize();
  const int64_t tc = slot.seq / (2 * ranks);
  return {slot.batch, parallel::ContextChunk(cp_->rank(), block, ranks) * tc, tc, 0, slot.seq};
}

std::vector<ssa::TemperatureStatistics> LlamaModel::TemperatureStatistics() const {
  return temperature_statistics_;
}

Tensor& LlamaModel::Forward(const Context& ctx, const Tensor& tokens, const Tensor& positions) {
  KELVIN_CHECK(stage_.stages == 1) << "Forward runs the whole model: use the chunk steps";
  if (HoldsMicroBatch(0)) EndMicroBatch(0);
  BeginMicroBatch(0, tokens, positions);
  return ForwardChunk(ctx, 0, 0);
}

void LlamaModel::BeginMicroBatch(int micro_batch, const Tensor& tokens, const Tensor& positions) {
  KELVIN_CHECK(tokens.ndim() == 2 && positions.shape() == tokens.shape())
      << "a micro-batch takes tokens and positions [B, T], got " << tokens.ToString() << " and "
      << positions.ToString();
  KELVIN_CHECK(micro_batch >= 0 && !HoldsMicroBatch(micro_batch))
      << "micro-batch " << micro_batch << " is already in flight";
  size_t free = 0;
  while (free < slots_.size() && slots_[free].micro_batch >= 0) ++free;
  if (free == slots_.size()) slots_.emplace_back();
  LlamaMicroBatchActivations& slot = slots_[free];
  AllocateSlot(slot, tokens.dim(0), tokens.dim(1));
  slot.micro_batch = micro_batch;
  const bool host_copies = ctx_.is_cuda() && positions.is_cpu();
  if (host_copies) {
    // The CUDA attention's tile skipping relies on the position-id rule without checking it (the
    // CPU kernels check it on every call).
    ssa::CheckPositionIds(positions.View({-1}), tokens.dim(0), 0, tokens.dim(1),
                          "the micro-batch's position ids");
  }
  // A host tensor of t's values (the caller may reuse t once the micro-batch has begun).
  auto host_copy = [&](const Tensor& t) {
    Tensor copy = Tensor::Empty(t.shape(), t.dtype());
    CopyTensor(ctx_, t, copy);
    return copy;
  };
  slot.host_positions = slot.host_key_positions = Tensor();
  slot.long_rope = false;
  if (config_.rope.type == ops::RopeType::kLongrope) {  // the whole rows' largest position id
    const Tensor all = host_copy(positions.View({-1}));
    const int32_t* p = all.data<int32_t>();
    const int64_t largest = all.numel() > 0 ? *std::max_element(p, p + all.numel()) : 0;
    slot.long_rope = ops::RopeUsesLongFactors(config_.rope, largest);
  }
  if (!SplitsRows()) {
    CopyTensor(ctx_, tokens.View({-1}), slot.tokens);
    CopyTensor(ctx_, positions.View({-1}), slot.positions);
    if (host_copies) slot.host_positions = host_copy(positions.View({-1}));
    return;
  }
  KELVIN_CHECK(tokens.is_cpu() && positions.is_cpu())
      << "context parallelism takes the micro-batch's tokens and positions on the host";
  const int rank = cp_->rank(), ranks = ContextParallelSize();
  const Tensor local_positions = parallel::LocalSequence(positions, tokens.dim(0), rank, ranks);
  CopyTensor(ctx_, parallel::LocalSequence(tokens, tokens.dim(0), rank, ranks), slot.tokens);
  CopyTensor(ctx_, local_positions, slot.positions);
  CopyTensor(ctx_, positions.View({-1}), slot.key_positions);
  if (host_copies) {
    slot.host_positions = local_positions;  // LocalSequence's own new tensor
    slot.host_key_positions = host_copy(positions.View({-1}));
  }
}

bool LlamaModel::HoldsMicroBatch(int micro_batch) const {
  for (const LlamaMicroBatchActivations& slot : slots_) {
    if (slot.micro_batch == micro_batch) return true;
  }
  return false;
}

void LlamaModel::EndMicroBatch(int micro_batch) { Slot(micro_batch).micro_batch = -1; }

LlamaMicroBatchActivations& LlamaModel::Slot(int micro_batch) {
  for (LlamaMicroBatchActivations& slot : slots_) {
    if (slot.micro_batch == micro_batch) return slot;
  }
  KELVIN_FATAL() << "micro-batch " << micro_batch << " is not in flight (BeginMicroBatch)";
  return slots_.front();
}

Tensor& LlamaModel::ChunkInput(int micro_batch, int chunk) {
  return Slot(micro_batch).layers[stage_.chunks[chunk].local_begin].x;
}

Tensor& LlamaModel::ChunkOutput(int micro_batch, int chunk) {
  return Slot(micro_batch).outputs[chunk];
}

Tensor& LlamaModel::ChunkGradient(int micro_batch, int chunk) {
  return Slot(micro_batch).output_grads[chunk];
}

Tensor& LlamaModel::ForwardChunk(const Context& ctx, int micro_batch, int chunk) {
  const ProfileRange range(absl::StrCat("micro-batch ", micro_batch, " chunk ", chunk, " forward"));
  LlamaMicroBatchActivations& slot = Slot(micro_batch);
  const LlamaStageLayout::Chunk& c = stage_.chunks[chunk];
  Tensor& input = slot.layers[c.local_begin].x;
  // A tied embedding over pipeline stages is a unit of its own (the LM head on the last stage).
  const int embedding_unit =
      gradient_units_.embedding >= 0 ? gradient_units_.embedding : gradient_units_.summed_last;
  if (stage_.starts_model(chunk)) {
    ParametersNeeded(embedding_unit);
    // Vocab-parallel embedding: each rank's rows, zero elsewhere, summed over the group.
    ops::EmbeddingForward(ctx, slot.tokens, end_values_.embedding, layout_.vocab_begin,
                          scratch_.proj);
    CopyTensor(ctx, ReduceTokens(scratch_.proj), input);
  }
  Tensor& output = slot.outputs[chunk];
  for (int64_t l = c.layer_begin; l < c.layer_end; ++l) {
    const ProfileRange layer(absl::StrCat("layer ", l, " forward"));
    ParametersNeeded(gradient_units_.layer[static_cast<size_t>(LocalLayer(l))]);
    LayerForward(ctx, slot, l, l + 1 < c.layer_end ? slot.layers[LocalLayer(l + 1)].x : output);
  }
  if (!stage_.ends_model(chunk)) return output;
  ParametersNeeded(gradient_units_.head);
  if (config_.tie_word_embeddings) ParametersNeeded(embedding_unit);  // the LM head
  NormForward(ctx, output, end_values_.final_norm, slot.h_final, slot.rstd_final);
  Linear(ctx, slot.h_final, end_values_.lm_head, slot.logits);
  return slot.logits;
}

void LlamaModel::NormForward(const Context& ctx, const Tensor& x, const Tensor& weight, Tensor& h,
                             Tensor& rstd) {
  if (!parallelism_.sequence_parallel) {
    ops::RmsNormForward(ctx, x, weight, config_.rms_norm_eps, h, rstd);
    return;
  }
  ops::RmsNormForward(ctx, x, weight, config_.rms_norm_eps, scratch_.local_tokens, rstd);
  parallel::GatherFromSequenceParallelRegion(*tp_, scratch_.local_tokens, h);
}

void LlamaModel::NormBackward(const Context& ctx, Tensor& dh, const Tensor& x, const Tensor& weight,
                              const Tensor& rstd, Tensor& dweight, Tensor& dx) {
  const Tensor& dh_local = ReduceTokens(dh);  // the TP ranks' partial input gradients, summed
  ops::RmsNormBackward(ctx, dh_local, x, weight, rstd, scratch_.d_proj, dweight);
  ops::Add(ctx, dx, scratch_.d_proj, dx);
}

LlamaLayerActivations LlamaModel::LayerBuffers(LlamaMicroBatchActivations& slot, int64_t layer) {
  LlamaLayerActivations a = slot.layers[LocalLayer(layer)];  // handles: writes reach the slot
  for (const LlamaActivationField& field : LlamaActivationFields()) {
    if (Recomputed(field, recompute_)) a.*field.member = recomputed_.*field.member;
  }
  return a;
}

void LlamaModel::AttentionForward(const Context& ctx, const LlamaMicroBatchActivations& slot,
                                  int64_t layer, LlamaLayerActivations& a) {
  const LlamaLayerWeights& w = layer_weights(layer);
  const int64_t n = a.h_attn.dim(0);
  Tensor u = a.u.View({n, -1}), k = a.k.View({n, -1}), v = a.v.View({n, -1});
  Linear(ctx, a.h_attn, w.q, u);
  Linear(ctx, a.h_attn, w.k, k);
  Linear(ctx, a.h_attn, w.v, v);
  if (a.query_source.defined()) {
    Tensor source = a.query_source.View({n, -1});
    Linear(ctx, a.h_attn, w.query_projection, source);
  }
  if (a.value_source.defined()) {
    Tensor source = a.value_source.View({n, -1});
    Linear(ctx, a.h_attn, w.value_projection, source);
  }
  if (SplitsRows()) {  // the whole sequence's keys, values and value source
    parallel::GatherSequence(ctx, *cp_, slot.batch, a.k, scratch_.cp_reorder, a.k_all);
    parallel::GatherSequence(ctx, *cp_, slot.batch, a.v, scratch_.cp_reorder, a.v_all);
    if (a.value_source_all.defined()) {
      parallel::GatherSequence(ctx, *cp_, slot.batch, a.value_source, scratch_.cp_reorder,
                               a.value_source_all);
    }
  }
  const ssa::SsaAttentionInputs inputs = AttentionInputs(slot, a);
  const int blocks = AttentionBlocks();
  for (int block = 0; block < blocks; ++block) {
    ssa::SsaAttentionOutputs outputs{QueryRows(a.attn, block, blocks),
                                     QueryRows(a.lse, block, blocks),
                                     QueryRows(a.tau_q, block, blocks), a.tau_v};
    ssa::SsaAttentionForward(ctx, attention_options_, AttentionShape(slot, block),
                             QueryBlockInputs(inputs, block, blocks), w.ssa, outputs,
                             CoreOptions(attention_backend_, slot, block, blocks));
  }
}

void LlamaModel::MlpForward(const Context& ctx, int64_t layer, LlamaLayerActivations& a) {
  const LlamaLayerWeights& w = layer_weights(layer);
  Linear(ctx, a.h_mlp, w.gate, a.gate);
  Linear(ctx, a.h_mlp, w.up, a.up);
  ops::SwiGluForward(ctx, a.gate, a.up, a.act);
}

void LlamaModel::LayerForward(const Context& ctx, LlamaMicroBatchActivations& slot, int64_t layer,
                              Tensor& x_out) {
  LlamaLayerActivations a = LayerBuffers(slot, layer);
  const LlamaLayerWeights& w = layer_weights(layer);
  const int64_t n = a.h_attn.dim(0);
  NormForward(ctx, a.x, w.input_norm, a.h_attn, a.rstd_attn);
  AttentionForward(ctx, slot, layer, a);
  const bool record =
      statistics_micro_batch_ == kEveryMicroBatch || slot.micro_batch == statistics_micro_batch_;
  if (config_.ssa.has_value() && record) {  // kept per layer: recompute may drop the temperatures
    temperature_statistics_.resize(static_cast<size_t>(stage_.num_local_layers()));
    // On CUDA reduced on the device. alpha exists with the query temperature; it shapes tau^q only
    // with the position term.
    const Tensor alpha = attention_options_.position_aware ? w.ssa.alpha : Tensor();
    temperature_statistics_[LocalLayer(layer)] =
        ssa::ComputeTemperatureStatistics(ctx, a.tau_q, a.tau_v, alpha);
  }
  Linear(ctx, a.attn.View({n, -1}), w.o, scratch_.proj);
  ops::Add(ctx, a.x, ReduceTokens(scratch_.proj), a.x_mid);
  NormForward(ctx, a.x_mid, w.post_norm, a.h_mlp, a.rstd_mlp);
  MlpForward(ctx, layer, a);
  Linear(ctx, a.act, w.down, scratch_.proj);
  ops::Add(ctx, a.x_mid, ReduceTokens(scratch_.proj), x_out);
}

void LlamaModel::Backward(const Context& ctx, const Tensor& dlogits) {
  Tensor& logits = Slot(0).logits;
  KELVIN_CHECK(dlogits.shape() == logits.shape())
      << "Backward needs dlogits " << ShapeToString(logits.shape()) << ", got "
      << dlogits.ToString();
  if (dlogits.raw_data() != logits.raw_data()) CopyTensor(ctx, dlogits, logits);
  BackwardChunk(ctx, 0, 0);
}

void LlamaModel::BackwardChunk(const Context& ctx, int micro_batch, int chunk) {
  const ProfileRange range(
      absl::StrCat("micro-batch ", micro_batch, " chunk ", chunk, " backward"));
  KELVIN_CHECK(!params_.forward_only())
      << "a backward through a forward-only model (LlamaPlacement::forward_only): it has no "
         "gradients";
  LlamaMicroBatchActivations& slot = Slot(micro_batch);
  const LlamaStageLayout::Chunk& c = stage_.chunks[chunk];
  Tensor& dx = slot.output_grads[chunk];  // [Nl, D]
  if (stage_.ends_model(chunk)) {
    LinearBackward(ctx, slot.logits, slot.h_final, end_values_.lm_head, scratch_.dh, false,
                   end_grads_.lm_head);
    ops::Fill(ctx, dx, 0.0);
    NormBackward(ctx, scratch_.dh, slot.outputs[chunk], end_values_.final_norm, slot.rstd_final,
                 end_grads_.final_norm, dx);
    BackwardDone(gradient_units_.head);
  }
  for (int64_t l = c.layer_end - 1; l >= c.layer_begin; --l) {
    const ProfileRange layer(absl::StrCat("layer ", l, " backward"));
    LayerBackward(ctx, slot, l, dx);
    BackwardDone(gradient_units_.layer[static_cast<size_t>(LocalLayer(l))]);
  }
  if (stage_.starts_model(chunk)) {
    ops::EmbeddingBackward(ctx, slot.tokens, FullTokenGradient(dx), layout_.vocab_begin,
                           end_grads_.embedding);
    BackwardDone(gradient_units_.embedding);
  }
}

void LlamaModel::LayerBackward(const Context& ctx, LlamaMicroBatchActivations& slot, int64_t layer,
                               Tensor& dx) {
  LlamaLayerActivations a = LayerBuffers(slot, layer);
  const LlamaLayerWeights& w = layer_weights(layer);
  LlamaLayerWeights& dw = layer_grads_[LocalLayer(layer)];
  const int64_t n = a.h_attn.dim(0);
  // Recompute runs the same forward again (deterministic: the same bits as when kept).
  if (recompute_.mlp) MlpForward(ctx, layer, a);
  // MLP: x_out = x_mid + down(SwiGLU(gate(h), up(h))), h = RMSNorm(x_mid). dx holds d x_out.
  LinearBackward(ctx, FullTokenGradient(dx), a.act, w.down, scratch_.dact, false, dw.down);
  ops::SwiGluBackward(ctx, scratch_.dact, a.gate, a.up, scratch_.dgate, scratch_.dup);
  LinearBackward(ctx, scratch_.dgate, a.h_mlp, w.gate, scratch_.dh, false, dw.gate);
  LinearBackward(ctx, scratch_.dup, a.h_mlp, w.up, scratch_.dh, true, dw.up);
  NormBackward(ctx, scratch_.dh, a.x_mid, w.post_norm, a.rstd_mlp, dw.post_norm,
               dx);  // dx now holds d x_mid
  // Attention: x_mid = x + o_proj(SsaAttention(q(h), k(h), v(h))), h = RMSNorm(x); the operator
  // applies RoPE and the temperatures.
  if (recompute_.attention) AttentionForward(ctx, slot, layer, a);
  Tensor dattn = scratch_.dattn.View({n, -1});
  LinearBackward(ctx, FullTokenGradient(dx), a.attn.View({n, -1}), w.o, dattn, false, dw.o);
  // The operator accumulates into its gradients.
  for (Tensor* t : {&scratch_.du, &scratch_.dk, &scratch_.dv, &scratch_.dquery_source,
                    &scratch_.dvalue_source}) {
    if (t->defined()) ops::Fill(ctx, *t, 0.0);
  }
  ssa::SsaAttentionGrads grads{
      scratch_.du, scratch_.dk, scratch_.dv, scratch_.dquery_source, scratch_.dvalue_source,
      dw.ssa};
  const ssa::SsaAttentionInputs inputs = AttentionInputs(slot, a);
  const int blocks = AttentionBlocks();
  for (int block = 0; block < blocks; ++block) {  // the key-side gradients accumulate
    const ssa::SsaAttentionOutputs saved{QueryRows(a.attn, block, blocks),
                                         QueryRows(a.lse, block, blocks),
                                         QueryRows(a.tau_q, block, blocks), a.tau_v};
    ssa::SsaAttentionGrads block_grads = grads;
    block_grads.du = QueryRows(grads.du, block, blocks);
    block_grads.dquery_source = QueryRows(grads.dquery_source, block, blocks);
    ssa::SsaAttentionBackward(ctx, attention_options_, AttentionShape(slot, block),
                              QueryRows(scratch_.dattn, block, blocks),
                              QueryBlockInputs(inputs, block, blocks), w.ssa, saved, block_grads,
                              CoreOptions(attention_backend_, slot, block, blocks));
  }
  // With context parallelism the key-side gradients cover the whole sequence, partial over this
  // rank's queries: summed over the group, each rank keeps its tokens'.
  Tensor dk = scratch_.dk, dv = scratch_.dv, dvalue_source = scratch_.dvalue_source;
  if (SplitsRows()) {
    parallel::ReduceScatterSequence(ctx, *cp_, slot.batch, scratch_.dk, scratch_.cp_reorder,
                                    scratch_.dk_local);
    parallel::ReduceScatterSequence(ctx, *cp_, slot.batch, scratch_.dv, scratch_.cp_reorder,
                                    scratch_.dv_local);
    dk = scratch_.dk_local;
    dv = scratch_.dv_local;
    if (scratch_.dvalue_source.defined()) {
      parallel::ReduceScatterSequence(ctx, *cp_, slot.batch, scratch_.dvalue_source,
                                      scratch_.cp_reorder, scratch_.dvalue_source_local);
      dvalue_source = scratch_.dvalue_source_local;
    }
  }
  LinearBackward(ctx, scratch_.du.View({n, -1}), a.h_attn, w.q, scratch_.dh, false, dw.q);
  LinearBackward(ctx, dk.View({n, -1}), a.h_attn, w.k, scratch_.dh, true, dw.k);
  LinearBackward(ctx, dv.View({n, -1}), a.h_attn, w.v, scratch_.dh, true, dw.v);
  if (scratch_.dquery_source.defined()) {
    LinearBackward(ctx, scratch_.dquery_source.View({n, -1}), a.h_attn, w.query_projection,
                   scratch_.dh, true, dw.query_projection);
  }
  if (dvalue_source.defined()) {
    LinearBackward(ctx, dvalue_source.View({n, -1}), a.h_attn, w.value_projection, scratch_.dh,
                   true, dw.value_projection);
  }
  NormBackward(ctx, scratch_.dh, a.x, w.input_norm, a.rstd_attn, dw.input_norm,
               dx);  // dx now holds d x (the layer input)
}

}  // namespace kelvin::models
