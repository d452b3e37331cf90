// LlamaModel: Llama-3 with explicit forward and backward per micro-batch, its attention the SSA
// operator (vanilla without SSA), its parameters under Hugging Face's names, on one rank of any
// TP x CP x PP layout. B rows of T tokens, N = B*T/CP of them this rank's, Nk = B*T the keys
// attention sees, Nl = N/TP with sequence parallelism (else N); D hidden, H/G query/kv heads, d
// head dim, F ffn, V vocab (H, G, F, V local to the rank).
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/context.h"
#include "core/io/hf_checkpoint.h"
#include "core/io/tensor_region.h"
#include "core/optim/parameter_set.h"
#include "core/tensor.h"
#include "models/llama/hf_model_directory.h"
#include "models/llama/llama_activations.h"
#include "models/llama/llama_base_fingerprint.h"
#include "models/llama/llama_config.h"
#include "models/llama/llama_gradient_units.h"
#include "models/llama/llama_layer.h"
#include "models/llama/llama_layer_weights.h"
#include "models/llama/llama_pipeline_stage.h"
#include "models/llama/llama_rope.h"
#include "models/llama/llama_sharding.h"
#include "models/llama/model_export.h"
#include "parallel/comm/communicator.h"
#include "parallel/context_parallel.h"
#include "parallel/pipeline/pipeline_stage.h"
#include "ssa/attention_backend.h"
#include "ssa/ssa_attention_args.h"
#include "ssa/temperature.h"

namespace kelvin::models {

// How this rank holds the model: its groups (the trainer passes the process grid's; a group left
// out is one rank, and the model stands in a one-rank group of its own).
struct LlamaParallelism {
  parallel::Communicator* tp = nullptr;  // the tensor-parallel group; one rank: the whole model
  bool sequence_parallel = false;        // norm and residual regions split along the tokens
  parallel::Communicator* cp = nullptr;  // the context-parallel group; one rank: whole rows
  parallel::Communicator* pp = nullptr;  // the pipeline group; one rank: every layer
  int virtual_stages = 1;                // model chunks per pipeline rank
  // The first and last pipeline stages, which sum their tied embeddings' gradients (used when
  // pp has >= 2 ranks and the embeddings are tied; nullptr on the stages in between).
  parallel::Communicator* embedding = nullptr;
};

// Where the model's buffers live and how its weights are kept.
struct LlamaPlacement {
  Context ctx = Context::Cpu();  // every parameter, gradient and activation on ctx's device
  // f32 master weights apart from the values the layers read (always with a bf16 model; tests
  // set it to run the mixed-precision bookkeeping with an f32 model on the CPU).
  bool separate_master = false;
  // ZeRO-1's shard count (DP x CP with the distributed optimizer, else 1): the gradient buffers
  // are padded to a multiple of it (ParameterSet::Allocate).
  int64_t gradient_shards = 1;
  // A model that only runs forward (generation, scoring): its values alone, no master weights or
  // gradients (ParameterSet::AllocateForwardOnly); a backward is an error.
  bool forward_only = false;
  // The attention core of the SSA operator on CUDA (model.attention_backend; ssa_attention.h).
  ssa::AttentionBackend attention_backend = ssa::AttentionBackend::kFused;
};

// One micro-batch's activations on this rank: every layer of its chunks and the stage buffers.
struct LlamaMicroBatchActivations {
  int micro_batch = -1;  // the micro-batch using the slot; -1: free
  int64_t batch = 0, seq = 0;
  Tensor tokens, positions;  // [N] i32 copies of this rank's inputs
  Tensor key_positions;      // [Nk] i32 whole rows (context parallel only)
  // Host copies of positions [N] and key_positions [Nk] (i32) on CUDA when the micro-batch's
  // position ids came from the host: the cuDNN attention core lays out the documents from them.
  Tensor host_positions, host_key_positions;
  // [d/2] the RoPE inverse frequencies of this micro-batch (LlamaRopeFrequencies::ForCall of its
  // largest position id: LongRoPE's factors and dynamic NTK's base depend on it).
  Tensor inv_freq;
  // [N] i64 ops::DropoutTokenKey of this rank's tokens when the micro-batch draws LoRA dropout
  // masks (LlamaModel::SetLoraDropout), else undefined.
  Tensor lora_dropout_keys;
  std::vector<LlamaLayerActivations> layers;  // [local layers]; a chunk's input is its first x
  // [V] each [Nl, D]: the chunk's output (on the last virtual stage the final norm's input).
  std::vector<Tensor> outputs;
  // [V] each [Nl, D]: the gradient of the chunk's output on entry to its backward, of its input
  // after (undefined for the last virtual stage, whose output gradient comes from the logits).
  std::vector<Tensor> output_grads;
  Tensor h_final, rstd_final;  // [N, D], [Nl]: last virtual stage only
  Tensor logits;               // [N, V]: last virtual stage only
};

// Tensor parallelism (Megatron's, llama_sharding.h): each rank of the TP group holds H/TP query
// heads, its KV heads, F/TP FFN columns and V/TP vocabulary rows; the row-parallel outputs are
// all-reduced, or with sequence parallelism reduce-scattered along the tokens, the norm and
// residual regions then holding Nl tokens, all-gathered before the column-parallel GEMMs
// (parallel/tensor_parallel.h).
// Context parallelism (parallel/context_parallel.h): each rank of the CP group holds two chunks of
// T/(2 CP) tokens of every row (an early and a late one, balancing the causal work); attention
// all-gathers the whole sequence's keys, values and value-temperature source and reduce-scatters
// their gradients; everything else is token-local. Parameter gradients are partial per CP rank
// (the trainer sums them with DP's).
// Pipeline parallelism (llama_pipeline_stage.h): each rank holds the layers of its model chunks;
// a chunk's forward and backward run per micro-batch (ForwardChunk, BackwardChunk) and the
// pipeline runner moves activations and gradients between ranks. Every micro-batch in flight has
// its own activations (a slot, taken by BeginMicroBatch, given back by EndMicroBatch), so memory
// follows the schedule's peak of micro-batches in flight.
// Parameter gradients accumulate (+=) across micro-batches until ParameterSet::ZeroGrads; call
// FinishGradients once per step before the optimizer. The SSA parameters are named by
// SsaLayerParameters (llama_config.h).
class LlamaModel : public parallel::PipelineStage {
 public:
  // Declares and allocates this rank's parameters (zero) in `dtype`: f32 or f64 on the CPU, bf16
  // on CUDA (f32 master weights and gradients; the SSA kernel runs in bf16).
  LlamaModel(const LlamaConfig& config, DType dtype, const LlamaParallelism& parallelism = {},
             const LlamaRecompute& recompute = {}, const LlamaPlacement& placement = {});

  const LlamaConfig& config() const { return config_; }
  DType dtype() const { return dtype_; }
  ParameterSet& parameters() { return params_; }
  const ParameterSet& parameters() const { return params_; }
  // The values of layer `layer`'s parameters (a layer of this rank).
  const LlamaLayerWeights& layer_weights(int64_t layer) const {
    return layer_values_[LocalLayer(layer)];
  }
  const LlamaEndWeights& end_weights() const { return end_values_; }
  // The math of every layer, which the KV-cache decoder runs too.
  const LlamaLayer& layer() const { return layer_; }
  // The RoPE frequencies each forward call uses, which the KV-cache decoder uses too.
  const LlamaRopeFrequencies& rope_frequencies() const { return rope_; }
  const LlamaShardLayout& layout() const { return layout_; }
  parallel::Communicator& tp() const { return *tp_; }
  const Context& context() const { return ctx_; }

  // Copies this rank's slice of every parameter from a Hugging Face checkpoint (converting
  // dtypes); a missing tensor or a shape mismatch is an error naming the tensor and the checkpoint
  // (CheckHfWeightsMatchConfig, which callers run before they build the model: OpenHfWeightsFor).
  absl::Status LoadHfCheckpoint(const io::HfCheckpoint& checkpoint);
  // Writes the model as `options` says (models/llama/model_export.h: the merged Hugging Face
  // directory, f32 by default, or a LoRA model's peft adapter) that transformers loads,
  // `provenance` in its model card. Under tensor and pipeline parallelism every rank of the
  // model's replica must call it (GatherWholeParameters); TP and pipeline rank 0 write.
  absl::Status ExportHf(const std::string& directory, const HfExportProvenance& provenance = {},
                        const ExportOptions& options = {});
  // The whole model's parameters (host f32, full shapes, Hugging Face order; those `keep` keeps,
  // every one without it) on TP and pipeline rank 0, empty elsewhere: the shards gathered over TP,
  // the stages' tensors sent to pipeline rank 0. Every rank of the model's replica must call it,
  // with the same `keep`.
  std::vector<std::pair<std::string, Tensor>> GatherWholeParameters(
      const std::function<bool(const std::string&)>& keep = {});
  // Deterministic random initialisation (normal(0, 0.02) matrices, unit norms, SSA as
  // InitSsaParameters) from `seed`: each rank takes its slice of the same full draw, so every
  // layout starts from the one model.
  void InitRandom(uint64_t seed);
  // SSA's fine-tuning start (docs/ssa.md): read-outs 0, alpha = alpha_init, and each W_tmp
  // (weight_sharing off) a copy of the W_q / W_v rows of its head (choice: the temperatures then
  // start by reading what the weight-shared variant reads). LoadHfCheckpoint calls it for a
  // checkpoint without SSA tensors (a pretrained Llama).
  void InitSsaParameters();
  // The LoRA adapters' start (config().lora), as peft's default: B zero (so the model is its base),
  // A uniform in +-1 / sqrt(in) (torch's kaiming_uniform_ with a = sqrt(5)), drawn from `seed` as
  // InitRandom draws. The constructor and InitRandom call it; LoadHfCheckpoint leaves the adapters
  // alone (a base has none), so a job calls it after loading its base.
  void InitLoraParameters(uint64_t seed);
  // The frozen base this model holds (llama_base_fingerprint.h), recorded by LoadHfCheckpoint or
  // InitRandom when config().trainable freezes one; nullopt for a full fine-tune or before either.
  const std::optional<LlamaBase>& frozen_base() const { return frozen_base_; }

  const LlamaStageLayout& stage() const { return stage_; }

  // LoRA dropout (config().lora->dropout > 0) in the micro-batches that begin from now on, until
  // the next call: micro-batch m's rows are the global samples first_samples[m], + 1, ... of the
  // training data (data::FirstGlobalSample), and the mask of each adapter input element hashes
  // `seed`, the sample, the token's position in its row, the layer, the projection and the
  // feature, so that every layout and a recompute draw the same mask. Empty `first_samples` (the
  // default, and what evaluation and generation need): no dropout. Without LoRA dropout in the
  // config it changes nothing.
  void SetLoraDropout(uint64_t seed, std::vector<int64_t> first_samples);

  // The whole model on one pipeline rank (no pipeline group). tokens, positions [B, T] i32 (the
  // same on every TP rank) -> logits [B*T, V] of this rank's vocabulary slice (a buffer of the
  // model's, valid until the next Forward; the loss may overwrite it in place with dlogits for
  // Backward). Runs as micro-batch 0. With head_first_row > 0 the LM head runs on the rows
  // [head_first_row, B*T) only and the logits' rows before it are left unset (scoring a corpus,
  // whose overlapping windows score their last rows).
  Tensor& Forward(const Context& ctx, const Tensor& tokens, const Tensor& positions,
                  int64_t head_first_row = 0);
  // dlogits [B*T, V] (usually the logits buffer itself) -> parameter gradients (+=).
  void Backward(const Context& ctx, const Tensor& dlogits);

  // Pipeline steps, by micro-batch id (any int >= 0, unique among those in flight).
  // Takes a free activation slot for micro-batch `micro_batch` and copies its tokens and positions
  // [B, T] (host or device; every stage needs the positions, the first the tokens).
  int PipelineChunks() const override { return stage_.virtual_stages; }
  bool StartsModel(int chunk) const override { return stage_.starts_model(chunk); }
  bool EndsModel(int chunk) const override { return stage_.ends_model(chunk); }
  void BeginMicroBatch(int micro_batch, const Tensor& tokens, const Tensor& positions) override;
  bool HoldsMicroBatch(int micro_batch) const override;
  // Gives the slot back (after the micro-batch's last backward on this rank and its sends).
  void EndMicroBatch(int micro_batch) override;
  // [Nl, D]: where chunk `chunk`'s input activation is received (not on virtual stage 0).
  Tensor& ChunkInput(int micro_batch, int chunk) override;
  // Runs the chunk's layers (virtual stage 0: from the embedding of the tokens) -> its output
  // [Nl, D] to send on, or on the last virtual stage the logits [N, V] (which the loss may
  // overwrite in place with dlogits for BackwardChunk).
  Tensor& ForwardChunk(const Context& ctx, int micro_batch, int chunk) override {
    return RunChunk(ctx, micro_batch, chunk, 0);
  }
  // [Nl, D]: the chunk's output of its last ForwardChunk (what is sent on).
  Tensor& ChunkOutput(int micro_batch, int chunk) override;
  // [Nl, D]: the chunk's gradient buffer: it receives the gradient of the chunk's output before
  // BackwardChunk (not on the last virtual stage, whose comes from the logits) and holds the
  // gradient of its input after (what is sent back; virtual stage 0 has none).
  Tensor& ChunkGradient(int micro_batch, int chunk) override;
  // Parameter gradients (+=) of the chunk, from the gradient of its output (the logits buffer's
  // dlogits on the last virtual stage, else ChunkGradient) to that of its input (ChunkGradient;
  // on virtual stage 0 into the embedding's gradient).
  void BackwardChunk(const Context& ctx, int micro_batch, int chunk) override;

  // After the step's last Backward: sums over the TP group the gradients that are partial per
  // rank (norm weights under sequence parallelism; replicated KV heads when TP > G), and the tied
  // embeddings' gradients of the first and last pipeline stages. With ReportFinishedGradients the
  // units that already finished were summed then; this finishes the rest.
  void FinishGradients();
  // The order in which a step's backward finishes this rank's gradients (GradientBuckets' units).
  const LlamaGradientUnits& gradient_units() const { return gradient_units_; }
  // From now on, a step being `backwards_per_step` backwards through every unit (its
  // micro-batches): after a unit's last one its partial gradients are summed over the TP group and
  // `finished(unit)` is called; FinishGradients finishes the unit summed over stages.
  void ReportFinishedGradients(int backwards_per_step, std::function<void(int unit)> finished);
  // From now on every forward calls `wait(unit)` before it first reads a unit's parameters (the
  // units of gradient_units(), in the order the forward reads them), so that parameters still
  // arriving (parallel::ParameterGather) are waited for only where they are needed.
  void WaitForParametersWith(std::function<void(int unit)> wait) {
    wait_for_parameters_ = std::move(wait);
  }
  // Whether this rank's tensor of parameter `name` is the one copy of its elements among the TP
  // and pipeline ranks: false for the copies of replicated parameters on all but one rank (and
  // for the last stage's tied embedding). Summing over the canonical copies counts every element
  // of the full model once (the global gradient norm); checkpoints write those copies only.
  bool IsCanonicalCopy(const std::string& name) const;
  // Where this rank's tensor of parameter `name` sits in the full one.
  io::TensorRegion RegionOf(const std::string& name) const;

  // Bytes of the buffers allocated for the current micro-batch shape, by the memory plan's
  // categories (what PlanLlamaMemory predicts): activations, logits, backward scratch.
  struct BufferBytes {
    int64_t activations = 0, logits = 0, backward_scratch = 0;
  };
  BufferBytes AllocatedBufferBytes() const;

  // Per layer of this rank (stage().chunks order), the temperatures of the layer's last recorded
  // forward (docs/ssa.md, "Statistics"); empty without SSA and before the first.
  std::vector<ssa::TemperatureStatistics> TemperatureStatistics() const;
  // Records the statistics in the forwards of micro-batch `micro_batch` only, of every one
  // (kEveryMicroBatch, the default) or of none (kNoMicroBatch). Each recording reduces the layer's
  // temperatures on the host (on CUDA a copy that waits for the stream), so the trainer records
  // the last micro-batch of the steps whose statistics it reports, and nothing on the others.
  static constexpr int kEveryMicroBatch = -1, kNoMicroBatch = -2;
  void RecordTemperatureStatisticsOf(int micro_batch) { statistics_micro_batch_ = micro_batch; }

 private:
  // Declares this rank's slice of the parameter `name` of full shape `full_shape`.
  void Declare(const std::string& name, const Shape& full_shape, ParamGroup group, bool trainable);
  // Parameter `name` = this rank's slice of a full tensor drawn element by element from
  // `distribution` on a stream seeded by `seed` and the name (the same on every layout).
  template <typename Distribution>
  void AssignRandomDraw(const std::string& name, uint64_t seed, Distribution distribution);
  // Pipeline rank 0's `tensors` (full, f32) += every other stage's (those `keep` keeps), in
  // Hugging Face order; the other stages send theirs (TP rank 0 of each stage calls it).
  void GatherPipelineStages(std::vector<std::pair<std::string, Tensor>>& tensors,
                            const std::function<bool(const std::string&)>& keep);
  // ForwardChunk with the LM head on the rows [head_first_row, N) only (Forward's option).
  Tensor& RunChunk(const Context& ctx, int micro_batch, int chunk, int64_t head_first_row);
  LlamaMicroBatchActivations& Slot(int micro_batch);  // the slot micro-batch `micro_batch` holds
  // (Re)allocates `slot` for [batch, seq] when its shape differs, and the backward scratch.
  void AllocateSlot(LlamaMicroBatchActivations& slot, int64_t batch, int64_t seq);
  void AllocateScratch(int64_t batch, int64_t seq);
  // The activation sizes of a micro-batch of B x T = `batch` x `seq` on this rank.
  ActivationSizes<int64_t> SizesOf(int64_t batch, int64_t seq) const;
  TokenSplits Splits() const;
  // [N] i64 on the model's device: the LoRA dropout keys of micro-batch `micro_batch`'s B x T =
  // `batch` x `seq` tokens on this rank (SetLoraDropout), or undefined when it draws no mask.
  Tensor LoraDropoutKeys(int micro_batch, int64_t batch, int64_t seq) const;
  // A buffer for `field` at `sizes` on the model's device.
  template <typename Owner>
  Tensor AllocateField(const ActivationField<Owner>& field,
                       const ActivationSizes<int64_t>& sizes) const;
  int64_t LocalTokens(int64_t tokens) const;  // Nl of N tokens
  int ContextParallelSize() const { return cp_->size(); }
  // Whether rows are split over context-parallel ranks (attention then runs two query blocks
  // against the gathered keys: MicroBatchKeys).
  bool SplitsRows() const { return cp_->size() > 1; }
  // Which tokens of the slot's rows this rank holds (all of them without context parallelism).
  parallel::ContextSplit SplitOf(const LlamaMicroBatchActivations& slot) const;
  // A backward of micro-batch through `unit` (-1: none) is done: counted, and the unit finished
  // after the step's last one (ReportFinishedGradients).
  void BackwardDone(int unit);
  // Sums over the TP group the gradient of parameter `e` where it is partial per rank.
  void SumPartialGradient(const ParameterSet::Entry& e);
  // SumPartialGradient of every parameter of `unit`, then the finished report.
  void FinishUnit(int unit);
  // The forward is about to read `unit`'s parameters (-1: none): WaitForParametersWith's wait.
  void ParametersNeeded(int unit);
  int64_t LocalLayer(int64_t layer) const;  // the index of layer `layer` among this rank's
  // The token regions over this rank's TP group and the scratch (LlamaTokenRegions).
  LlamaTokenRegions Regions();
  // Layer `layer` of micro-batch `slot`: its activations -> x_out [Nl, D] (LlamaLayer::Forward).
  void LayerForward(const Context& ctx, LlamaMicroBatchActivations& slot, int64_t layer,
                    Tensor& x_out);
  // A layer's activation fields for a micro-batch of B x T = `batch` x `seq`: those kept in the
  // slots, or (`recomputed`) the recompute buffers; the others undefined.
  void AllocateLayerActivations(int64_t batch, int64_t seq, bool recomputed,
                                LlamaLayerActivations& a) const;
  // Layer `layer`'s activation buffers: the slot's, with the recomputed ones from recomputed_.
  LlamaLayerActivations LayerBuffers(LlamaMicroBatchActivations& slot, int64_t layer);
  // dx [Nl, D]: gradient w.r.t. the layer output on entry, w.r.t. its input on return.
  void LayerBackward(const Context& ctx, LlamaMicroBatchActivations& slot, int64_t layer,
                     Tensor& dx);
  class MicroBatchKeys;  // a micro-batch's attention side (LlamaAttentionKeys)

  LlamaConfig config_;
  ssa::SsaOptions attention_options_;  // config_.AttentionOptions()
  LlamaLayer layer_;                   // the math of every layer
  LlamaRopeFrequencies rope_;          // the RoPE frequencies of each forward call
  ssa::AttentionBackend attention_backend_;
  DType dtype_;
  Context ctx_;  // the device of every buffer
  LlamaParallelism parallelism_;
  std::unique_ptr<parallel::Communicator> alone_;  // the one-rank group for those left out
  // This rank's groups, never null: parallelism_'s, else alone_.
  parallel::Communicator *tp_, *cp_, *pp_;
  LlamaShardLayout layout_;
  LlamaStageLayout stage_;
  std::optional<LlamaBase> frozen_base_;          // frozen_base()
  uint64_t lora_dropout_seed_ = 0;                // SetLoraDropout
  std::vector<int64_t> lora_dropout_samples_;     // by micro-batch id; empty: no dropout
  std::map<std::string, Shape> full_shapes_;      // by parameter name
  std::map<std::string, ParameterShard> shards_;  // by parameter name
  ParameterSet params_;
  // [local layers] views of each layer's parameter values and gradients in params_.
  std::vector<LlamaLayerWeights> layer_values_, layer_grads_;
  LlamaEndWeights end_values_, end_grads_;  // this stage's embedding, final norm and LM head
  LlamaGradientUnits gradient_units_;
  // ReportFinishedGradients: the backwards per step, the callback, and [units] this step's count.
  int backwards_per_step_ = 0;
  std::function<void(int unit)> gradients_finished_;
  std::vector<int> backwards_done_;
  std::function<void(int unit)> wait_for_parameters_;  // WaitForParametersWith's

  // Activation slots, one per micro-batch in flight (kept allocated for reuse).
  std::vector<LlamaMicroBatchActivations> slots_;
  LlamaRecompute recompute_;
  // The recomputed fields' buffers, shared by every layer and slot (the others undefined).
  LlamaLayerActivations recomputed_;
  std::vector<ssa::TemperatureStatistics> temperature_statistics_;  // [local layers] with SSA
  int statistics_micro_batch_ = kEveryMicroBatch;                   // RecordTemperatureStatisticsOf
  // Scratch sized for the current micro-batch shape (reallocated when it changes).
  int64_t scratch_tokens_ = 0;
  LlamaScratch scratch_;
};

}  // namespace kelvin::models
