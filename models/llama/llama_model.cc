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
#include "core/ops/dropout.h"
#include "core/ops/elementwise.h"
#include "core/ops/embedding.h"
#include "core/ops/rope.h"
#include "core/profile_range.h"
#include "parallel/comm/self_communicator.h"
#include "parallel/context_parallel.h"
#include "ssa/ssa_attention.h"

namespace kelvin::models {

// The training model's attention side for one micro-batch: its activation buffers, the keys,
// values and value source gathered over the context-parallel group; one call per block of the
// rank's tokens (parallel::ContextSplit: the whole rows, or with context parallelism this rank's
// early and late chunk of every row) against every key.
class LlamaModel::MicroBatchKeys : public LlamaAttentionKeys {
 public:
  MicroBatchKeys(LlamaModel& model, const LlamaMicroBatchActivations& slot)
      : model_(model), slot_(slot) {}

  void PlaceKeys(const Context& ctx, const LlamaLayerWeights& /*w*/,
                 LlamaLayerActivations& a) override {
    if (!model_.SplitsRows()) return;
    const parallel::ContextSplit split = model_.SplitOf(slot_);
    Tensor& reorder = model_.scratch_.cp_reorder;
    split.Gather(ctx, a.k, reorder, a.k_all);
    split.Gather(ctx, a.v, reorder, a.v_all);
    if (a.value_source_all.defined()) {
      split.Gather(ctx, a.value_source, reorder, a.value_source_all);
    }
  }

  std::vector<LlamaAttentionCall> Calls(const LlamaLayerActivations& a) const override {
    const Tensor& inv_freq = slot_.inv_freq;
    const double rope_factor = ops::RopeAttentionFactor(model_.config_.rope);
    const ssa::AttentionBackend backend = model_.attention_backend_;
    // The keys: the query tokens themselves, or with context parallelism the whole rows gathered
    // (with their positions).
    const bool gathered = model_.SplitsRows();
    const Tensor& k = gathered ? a.k_all : a.k;
    const Tensor& v = gathered ? a.v_all : a.v;
    const Tensor& value_source = gathered ? a.value_source_all : a.value_source;
    const parallel::ContextSplit split = model_.SplitOf(slot_);
    std::vector<LlamaAttentionCall> calls;
    for (const parallel::ContextSplit::Block& block : split.blocks()) {
      const int64_t begin = block.local_begin, end = begin + slot_.batch * block.length;
      const Tensor host_positions =
          slot_.host_positions.defined() ? slot_.host_positions.Slice(begin, end) : Tensor();
      calls.push_back({{slot_.batch, block.begin, block.length, 0, slot_.seq},
                       begin,
                       end,
                       {Tensor(), slot_.positions.Slice(begin, end), Tensor(), k, v,
                        slot_.key_positions, value_source, inv_freq, rope_factor},
                       a.tau_v,
                       {backend, host_positions, slot_.host_key_positions}});
    }
    return calls;
  }

  // The key-side gradients cover the whole sequence, partial over this rank's queries: summed
  // over the group, each rank keeps its tokens'.
  void KeyGradients(const Context& ctx, LlamaScratch& s, Tensor& dk, Tensor& dv,
                    Tensor& dvalue_source) override {
    LlamaAttentionKeys::KeyGradients(ctx, s, dk, dv, dvalue_source);
    if (!model_.SplitsRows()) return;
    const parallel::ContextSplit split = model_.SplitOf(slot_);
    split.ReduceScatter(ctx, s.dk, s.cp_reorder, s.dk_local);
    split.ReduceScatter(ctx, s.dv, s.cp_reorder, s.dv_local);
    dk = s.dk_local;
    dv = s.dv_local;
    if (s.dvalue_source.defined()) {
      split.ReduceScatter(ctx, s.dvalue_source, s.cp_reorder, s.dvalue_source_local);
      dvalue_source = s.dvalue_source_local;
    }
  }

 private:
  LlamaModel& model_;
  const LlamaMicroBatchActivations& slot_;
};

LlamaModel::LlamaModel(const LlamaConfig& config, DType dtype, const LlamaParallelism& parallelism,
                       const LlamaRecompute& recompute, const LlamaPlacement& placement)
    : config_(config),
      attention_options_(config.AttentionOptions()),
      layer_(config),
      rope_(config.rope, config.head_dim, dtype, placement.ctx),
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

std::vector<ssa::TemperatureStatistics> LlamaModel::TemperatureStatistics() const {
  return temperature_statistics_;
}

Tensor& LlamaModel::Forward(const Context& ctx, const Tensor& tokens, const Tensor& positions,
                            int64_t head_first_row) {
  KELVIN_CHECK(stage_.stages == 1) << "Forward runs the whole model: use the chunk steps";
  KELVIN_CHECK(head_first_row >= 0 && head_first_row < tokens.numel())
      << "head_first_row " << head_first_row << " outside the " << tokens.numel() << " rows";
  if (HoldsMicroBatch(0)) EndMicroBatch(0);
  BeginMicroBatch(0, tokens, positions);
  return RunChunk(ctx, 0, 0, head_first_row);
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
  int64_t largest = 0;  // the whole rows' largest position id, where the frequencies need it
  if (rope_.DependsOnCall()) {
    const Tensor all = host_copy(positions.View({-1}));
    const int32_t* p = all.data<int32_t>();
    largest = all.numel() > 0 ? *std::max_element(p, p + all.numel()) : 0;
  }
  slot.inv_freq = rope_.ForCall(ctx_, largest);
  slot.lora_dropout_keys = LoraDropoutKeys(micro_batch, tokens.dim(0), tokens.dim(1));
  // This rank's tokens of every row (the whole rows without context parallelism).
  const parallel::ContextSplit split = SplitOf(slot);
  split.Local(ctx_, tokens, slot.tokens);
  split.Local(ctx_, positions, slot.positions);
  if (host_copies) slot.host_positions = split.Local(positions);
  if (SplitsRows()) {  // the keys' positions: the whole rows
    CopyTensor(ctx_, positions.View({-1}), slot.key_positions);
    if (host_copies) slot.host_key_positions = host_copy(positions.View({-1}));
  }
}

void LlamaModel::SetLoraDropout(uint64_t seed, std::vector<int64_t> first_samples) {
  lora_dropout_seed_ = seed;
  lora_dropout_samples_ = std::move(first_samples);
}

Tensor LlamaModel::LoraDropoutKeys(int micro_batch, int64_t batch, int64_t seq) const {
  const bool drops = config_.lora.has_value() && config_.lora->dropout > 0;
  if (!drops || static_cast<size_t>(micro_batch) >= lora_dropout_samples_.size()) return Tensor();
  const int64_t first = lora_dropout_samples_[static_cast<size_t>(micro_batch)];
  Tensor keys = Tensor::Empty({batch * seq}, DType::kI64);  // [B*T] the whole rows'
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t t = 0; t < seq; ++t) {
      keys.data<int64_t>()[b * seq + t] =
          static_cast<int64_t>(ops::DropoutTokenKey(lora_dropout_seed_, first + b, t));
    }
  }
  // [N] this rank's tokens (the whole rows without context parallelism).
  return CopyToDevice(ctx_, parallel::ContextSplit(*cp_, batch, seq).Local(keys), ctx_.device());
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

parallel::ContextSplit LlamaModel::SplitOf(const LlamaMicroBatchActivations& slot) const {
  return {*cp_, slot.batch, slot.seq};
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

Tensor& LlamaModel::RunChunk(const Context& ctx, int micro_batch, int chunk,
                             int64_t head_first_row) {
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
    CopyTensor(ctx, Regions().ReduceTokens(scratch_.proj), input);
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
  Regions().NormForward(ctx, output, end_values_.final_norm, slot.h_final, slot.rstd_final);
  const int64_t rows = slot.h_final.dim(0);
  Tensor head_logits = slot.logits.Slice(head_first_row, rows);  // [rows - first, V/TP]
  Linear(ctx, slot.h_final.Slice(head_first_row, rows), end_values_.lm_head, head_logits);
  return slot.logits;
}

LlamaLayerActivations LlamaModel::LayerBuffers(LlamaMicroBatchActivations& slot, int64_t layer) {
  LlamaLayerActivations a = slot.layers[LocalLayer(layer)];  // handles: writes reach the slot
  for (const LlamaActivationField& field : LlamaActivationFields()) {
    if (Recomputed(field, recompute_)) a.*field.member = recomputed_.*field.member;
  }
  if (slot.lora_dropout_keys.defined()) {
    a.lora_dropout = {slot.lora_dropout_keys, config_.lora->dropout, layer, tp_->rank()};
  }
  return a;
}

void LlamaModel::LayerForward(const Context& ctx, LlamaMicroBatchActivations& slot, int64_t layer,
                              Tensor& x_out) {
  LlamaLayerActivations a = LayerBuffers(slot, layer);
  const LlamaLayerWeights& w = layer_weights(layer);
  MicroBatchKeys keys(*this, slot);
  layer_.Forward(ctx, w, Regions(), keys, a, scratch_.proj, x_out);
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
    Regions().NormBackward(ctx, scratch_.dh, slot.outputs[chunk], end_values_.final_norm,
                           slot.rstd_final, end_grads_.final_norm, dx);
    BackwardDone(gradient_units_.head);
  }
  for (int64_t l = c.layer_end - 1; l >= c.layer_begin; --l) {
    const ProfileRange layer(absl::StrCat("layer ", l, " backward"));
    LayerBackward(ctx, slot, l, dx);
    BackwardDone(gradient_units_.layer[static_cast<size_t>(LocalLayer(l))]);
  }
  if (stage_.starts_model(chunk)) {
    ops::EmbeddingBackward(ctx, slot.tokens, Regions().FullTokenGradient(dx), layout_.vocab_begin,
                           end_grads_.embedding);
    BackwardDone(gradient_units_.embedding);
  }
}

void LlamaModel::LayerBackward(const Context& ctx, LlamaMicroBatchActivations& slot, int64_t layer,
                               Tensor& dx) {
  LlamaLayerActivations a = LayerBuffers(slot, layer);
  MicroBatchKeys keys(*this, slot);
  layer_.Backward(ctx, layer_weights(layer), layer_grads_[LocalLayer(layer)], Regions(), keys,
                  recompute_, a, scratch_, dx);
}

LlamaTokenRegions LlamaModel::Regions() {
  return LlamaTokenRegions(*tp_, parallelism_.sequence_parallel, config_.rms_norm_eps, &scratch_);
}

}  // namespace kelvin::models
