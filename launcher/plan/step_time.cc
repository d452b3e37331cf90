// The step-time model (see step_time.h). N: the tokens of one micro-batch on a rank (micro-batch
// x T / CP); Nl = N / TP under sequence parallelism; D, F, V, H, G, d as in models/llama.
#include "launcher/plan/step_time.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/dtype.h"
#include "models/llama/llama_gradient_units.h"
#include "models/llama/llama_pipeline_stage.h"
#include "models/llama/llama_sharding.h"
#include "models/llama/model_flops.h"

namespace kelvin::launcher {

double RingGatherSeconds(double bytes, int ranks, double bytes_per_second) {
  if (ranks <= 1) return 0;
  return (ranks - 1.0) / ranks * bytes / bytes_per_second;
}

double RingAllReduceSeconds(double bytes, int ranks, double bytes_per_second) {
  return 2 * RingGatherSeconds(bytes, ranks, bytes_per_second);
}

bool GroupSpansNodes(int stride, int size, int world_size, int devices_per_node) {
  if (size <= 1) return false;
  for (int first = 0; first < world_size; ++first) {
    if ((first / stride) % size != 0) continue;  // not the first rank of a copy of the group
    const int last = first + (size - 1) * stride;
    if (first / devices_per_node != last / devices_per_node) return true;
  }
  return false;
}

double PipelineBubbleSeconds(double busy_seconds, int stages, int chunks, int64_t micro_batches) {
  if (stages <= 1) return 0;
  return busy_seconds * (stages - 1.0) / (chunks * static_cast<double>(micro_batches));
}

double ExposedAfterCompute(const std::vector<double>& ready, const std::vector<double>& seconds,
                           double compute_end) {
  double end = 0;
  for (size_t i = 0; i < seconds.size(); ++i) end = std::max(end, ready[i]) + seconds[i];
  return std::max(0.0, end - compute_end);
}

double ExposedBeforeCompute(const std::vector<double>& seconds,
                            const std::vector<double>& compute) {
  double gathered = 0, clock = 0, waited = 0;
  for (size_t i = 0; i < seconds.size(); ++i) {
    gathered += seconds[i];
    if (gathered > clock) {
      waited += gathered - clock;
      clock = gathered;
    }
    clock += compute[i];
  }
  return waited;
}

namespace {

// Kelvin's own rates on one H200 (bench/RESULTS.md, 2026-11-30): the cuBLASLt bf16 GEMM at
// 8192x4096x14336 (sixth entry), and the SSA attention kernel forward + backward, causal GQA
// H 32 / G 8, d 128, 16K tokens per call, in FlashAttention's count (eighth entry, the current
// kernel; vanilla attention from its SSA on / off column).
constexpr double kMeasuredGemmTflops = 818.7;
constexpr double kMeasuredPeakTflops = 989.4;
struct MeasuredAttention {
  int64_t tokens;
  double ssa_tflops;
  double ssa_over_vanilla;
};
constexpr MeasuredAttention kMeasuredAttention[] = {{1024, 71.0, 0.892},
                                                    {2048, 83.3, 0.946},
                                                    {4096, 90.7, 0.966},
                                                    {8192, 96.7, 0.986},
                                                    {16384, 106.3, 0.988}};

// The measured attention rate at `tokens` per row, linear in log2 T between the measured rows
// (the nearest row outside them); and where it comes from.
std::pair<double, std::string> MeasuredAttentionTflops(int64_t tokens, bool ssa) {
  const auto rate = [ssa](const MeasuredAttention& m) {
    return ssa ? m.ssa_tflops : m.ssa_tflops / m.ssa_over_vanilla;
  };
  const std::string kernel = ssa ? "SSA kernel" : "SSA kernel with the temperatures off";
  const std::string source =
      " forward + backward, FlashAttention's count, on an H200 "
      "(bench/RESULTS.md, 2026-11-30 eighth entry)";
  const MeasuredAttention* below = &kMeasuredAttention[0];
  for (const MeasuredAttention& m : kMeasuredAttention) {
    if (m.tokens == tokens) {
      return {rate(m), absl::StrFormat("Kelvin's %s at T=%d:%s", kernel, tokens, source)};
    }
    if (m.tokens < tokens) below = &m;
  }
  const MeasuredAttention* above = below + 1;
  if (tokens < below->tokens || above == std::end(kMeasuredAttention)) {
    return {rate(*below), absl::StrFormat("Kelvin's %s at T=%d (the measured row nearest T=%d):%s",
                                          kernel, below->tokens, tokens, source)};
  }
  const double x =
      std::log2(static_cast<double>(tokens) / static_cast<double>(below->tokens)) /
      std::log2(static_cast<double>(above->tokens) / static_cast<double>(below->tokens));
  return {rate(*below) + x * (rate(*above) - rate(*below)),
          absl::StrFormat("Kelvin's %s between T=%d and T=%d (log-linear):%s", kernel,
                          below->tokens, above->tokens, source)};
}

HardwareRates RatesOf(const config::HardwareConfig& h, bool ssa, int64_t tokens) {
  const bool preset = h.preset() != config::HardwareConfig::NONE;
  HardwareRates r;
  r.peak_flops = h.peak_tflops() * 1e12;
  r.memory_bytes_per_second = h.memory_gbps() * 1e9;
  r.intra_node_bytes_per_second = h.intra_node_gbps() * 1e9;
  r.inter_node_bytes_per_second = h.inter_node_gbps() * 1e9;
  r.devices_per_node = h.devices_per_node();
  double efficiency = 1;
  if (h.has_gemm_efficiency()) {
    efficiency = h.gemm_efficiency();
    r.gemm_source = "launch.hardware.gemm_efficiency";
  } else if (preset) {
    efficiency = kMeasuredGemmTflops / kMeasuredPeakTflops;
    r.gemm_source = absl::StrFormat(
        "Kelvin's cuBLASLt bf16 GEMM 8192x4096x14336: %.1f of %.1f TFLOP/s on an H200 "
        "(bench/RESULTS.md, 2026-11-30 sixth entry)",
        kMeasuredGemmTflops, kMeasuredPeakTflops);
  } else {
    r.gemm_source = "launch.hardware.peak_tflops, a measured rate";
  }
  r.gemm_flops = efficiency * r.peak_flops;
  if (h.has_attention_tflops()) {
    r.attention_flops = h.attention_tflops() * 1e12;
    r.attention_source = "launch.hardware.attention_tflops";
  } else {  // a preset (validation requires the field without one)
    const auto [tflops, source] = MeasuredAttentionTflops(tokens, ssa);
    r.attention_flops = tflops * 1e12;
    r.attention_source = source;
  }
  return r;
}

struct Pass {
  double forward = 0, backward = 0;
  double Total() const { return forward + backward; }
  Pass& operator+=(const Pass& o) {
    forward += o.forward;
    backward += o.backward;
    return *this;
  }
};
Pass operator*(double k, const Pass& p) { return {k * p.forward, k * p.backward}; }

// Seconds of one unit of work (a decoder layer, the head, the embedding) for one micro-batch on
// one rank, by what it waits for.
struct Work {
  Pass gemm, attention;
  Pass memory;   // memory-bound passes at the device's memory bandwidth
  Pass tensor;   // tensor-parallel collectives (not overlapped)
  Pass context;  // context-parallel K/V all-gathers and reduce-scatters (not overlapped)
  Pass Sum() const {
    Pass sum = gemm;
    sum += attention;
    sum += memory;
    sum += tensor;
    sum += context;
    return sum;
  }
  Work& operator+=(const Work& o) {
    gemm += o.gemm;
    attention += o.attention;
    memory += o.memory;
    tensor += o.tensor;
    context += o.context;
    return *this;
  }
};
Work operator*(double k, const Work& w) {
  return {k * w.gemm, k * w.attention, k * w.memory, k * w.tensor, k * w.context};
}

// The job's layout and what its groups cost, shared by every stage.
struct Layout {
  const config::JobConfig& job;
  const models::LlamaConfig& arch;
  const parallel::GridSpec& g;
  const HardwareRates& rates;
  double activation_bytes = 2, gradient_bytes = 4;
  double tokens = 0;  // N
  bool tensor_spans = false, context_spans = false, replicas_spans = false, pipeline_spans = false;

  double Bandwidth(bool spans) const {
    return spans ? rates.inter_node_bytes_per_second : rates.intra_node_bytes_per_second;
  }
  int Replicas() const { return g.data_parallel * g.context_parallel; }
  // One tensor-parallel region's collectives over [N, D]: an all-reduce, or with sequence
  // parallelism a reduce-scatter and an all-gather (the same ring time).
  double TensorRegionSeconds() const {
    return RingAllReduceSeconds(tokens * static_cast<double>(arch.hidden_size) * activation_bytes,
                                g.tensor_parallel, Bandwidth(tensor_spans));
  }
};

// One decoder layer. Memory-bound elements per token in the forward: the two RMSNorms (read and
// write D each) and residual adds (read 2D, write D each), D-wide and split over TP only under
// sequence parallelism; the RoPE/SSA pass reading and writing q, k, v of the rank's heads; SwiGLU
// reading gate and up, writing F / TP. The backward moves twice the forward's bytes (the saved
// input and the incoming gradient read, the input gradient written).
Work LayerWork(const Layout& l) {
  const models::LlamaConfig& a = l.arch;
  const parallel::GridSpec& g = l.g;
  const double tp = g.tensor_parallel;
  const bool recompute_attention = l.job.model().recompute_attention();
  const models::LayerFlops flops = models::DecoderLayerFlopsPerToken(
      a, g.seq_length, recompute_attention, l.job.model().recompute_mlp());
  const double per_rank = l.tokens / tp;  // the layer's FLOPs split over the tensor ranks
  Work w;
  w.gemm = {per_rank * flops.gemm.forward / l.rates.gemm_flops,
            per_rank * flops.gemm.backward / l.rates.gemm_flops};
  w.attention = {per_rank * flops.attention.forward / l.rates.attention_flops,
                 per_rank * flops.attention.backward / l.rates.attention_flops};
  const double kv_heads_local = a.num_key_value_heads >= g.tensor_parallel
                                    ? static_cast<double>(a.num_key_value_heads) / tp
                                    : 1.0;  // replicated when TP > G
  const double d_model = static_cast<double>(a.hidden_size);
  const double elements =
      10 * d_model / (g.sequence_parallel ? tp : 1.0) +
      2 * (static_cast<double>(a.num_attention_heads) / tp + 2 * kv_heads_local) *
          static_cast<double>(a.head_dim) +
      3 * static_cast<double>(a.intermediate_size) / tp;
  const double forward_memory =
      l.tokens * elements * l.activation_bytes / l.rates.memory_bytes_per_second;
  w.memory = {forward_memory, 2 * forward_memory};
  // Attention and MLP regions: entered and left in the forward, and in the backward.
  w.tensor = {2 * l.TensorRegionSeconds(), 2 * l.TensorRegionSeconds()};
  // The whole row's keys and values (and, without weight sharing, the value source) gathered in
  // the forward and again when recompute reruns it; their gradients reduce-scattered.
  const config::SsaConfig& ssa = l.job.model().ssa();
  const int gathered =
      2 + (ssa.enabled() && !ssa.weight_sharing() && ssa.token_aware() && ssa.value_temperature()
               ? 1
               : 0);
  const double kv_bytes = l.tokens * g.context_parallel * kv_heads_local *
                          static_cast<double>(a.head_dim) * l.activation_bytes;
  const double one = RingGatherSeconds(kv_bytes, g.context_parallel, l.Bandwidth(l.context_spans));
  w.context = {gathered * one, gathered * one * (recompute_attention ? 2 : 1)};
  return w;
}

// The last stage's head: the LM head GEMM, the fused loss reading the logits [N, V/TP] and
// writing their gradient, the final norm's tensor-parallel region (its backward all-reduce, or
// all-gather and reduce-scatter).
Work HeadWork(const Layout& l) {
  const double tp = l.g.tensor_parallel;
  const models::PassFlops flops = models::LmHeadFlopsPerToken(l.arch);
  const double logits_seconds = l.tokens * static_cast<double>(l.arch.vocab_size) / tp *
                                l.activation_bytes / l.rates.memory_bytes_per_second;
  Work w;
  w.gemm = {l.tokens / tp * flops.forward / l.rates.gemm_flops,
            l.tokens / tp * flops.backward / l.rates.gemm_flops};
  w.memory = {logits_seconds, logits_seconds};
  w.tensor.backward = l.TensorRegionSeconds();
  return w;
}

// The first stage's vocab-parallel embedding: its lookup summed over the tensor ranks.
Work EmbeddingWork(const Layout& l) {
  Work w;
  w.tensor.forward = l.TensorRegionSeconds();
  return w;
}

// One pipeline stage over a step.
struct StageTime {
  Work per_micro_batch;                   // its layers, head and embedding
  double transfers = 0;                   // pipeline point-to-point per micro-batch
  double reduce = 0, reduce_exposed = 0;  // gradient reduction (all-reduce or reduce-scatter)
  double gather = 0, gather_exposed = 0;  // ZeRO-1 parameter all-gather
  double optimizer = 0;
  double MicroBatchSeconds() const { return per_micro_batch.Sum().Total() + transfers; }
  double Tail() const { return reduce_exposed + gather_exposed + optimizer; }
  double TailWithoutOverlap() const { return reduce + gather + optimizer; }
};

// The stage's gradient reduction and parameter gather in buckets of whole units (as
// parallel::PlanGradientBuckets packs them: consecutive units until a bucket holds
// parallel.grad_bucket_elements), against the last micro-batch's backward and the next forward;
// and AdamW over its shard (trainable parameters only): 28 bytes per shard element (the gradient,
// the f32 master and two moments read, the three written), 4 per element to zero the gradients, and
// with a model copy 6 more (the gathered f32 masters read, the bf16 weights written).
void PlanDataParallel(const Layout& l, const training::JobLayout& layout, int stage_rank,
                      const Work& layer, const Work& head, StageTime& stage) {
  const models::LlamaStageLayout stage_layout =
      models::StageLayoutOf(l.arch, stage_rank, l.g.pipeline_parallel, l.g.virtual_pipeline_stages);
  const models::LlamaShardLayout tp0 = models::ShardLayoutOf(l.arch, 0, l.g.tensor_parallel);
  std::map<std::string, double> elements_of;
  for (const models::LlamaParameterSpec& spec : models::StageParameterSpecs(l.arch, stage_layout)) {
    // A frozen parameter has no gradient to reduce and no master for AdamW.
    elements_of[spec.name] =
        spec.trainable
            ? static_cast<double>(
                  models::RegionOf(models::ShardOf(l.arch, tp0, spec.name), spec.full_shape)
                      .numel())
            : 0.0;
  }
  const models::LlamaGradientUnits units = models::GradientUnitsOf(l.arch, stage_layout);
  std::vector<Pass> unit_seconds(units.parameters.size());
  for (const int unit : units.layer) unit_seconds[static_cast<size_t>(unit)] = layer.Sum();
  if (units.head >= 0) unit_seconds[static_cast<size_t>(units.head)] = head.Sum();
  const double bucket_elements = static_cast<double>(l.job.parallel().grad_bucket_elements());
  std::vector<double> ready, reduce, gather, forward;  // per bucket, in backward order
  double stage_elements = 0, backward_clock = 0, bucket = 0, bucket_forward = 0;
  const int replicas = l.Replicas();
  const double bandwidth = l.Bandwidth(l.replicas_spans);
  for (size_t u = 0; u < units.parameters.size(); ++u) {
    for (const std::string& name : units.parameters[u]) bucket += elements_of.at(name);
    backward_clock += unit_seconds[u].backward;
    bucket_forward += unit_seconds[u].forward;
    if (bucket < bucket_elements && u + 1 < units.parameters.size()) continue;
    const double bytes = bucket * l.gradient_bytes;
    ready.push_back(backward_clock);
    forward.push_back(bucket_forward);
    if (layout.distributed_optimizer) {
      reduce.push_back(RingGatherSeconds(bytes, replicas, bandwidth));
      gather.push_back(RingGatherSeconds(bytes, replicas, bandwidth));  // the f32 masters
    } else {
      reduce.push_back(RingAllReduceSeconds(bytes, replicas, bandwidth));
    }
    stage_elements += bucket;
    bucket = bucket_forward = 0;
  }
  const auto sum = [](const std::vector<double>& v) {
    double s = 0;
    for (const double x : v) s += x;
    return s;
  };
  stage.reduce = sum(reduce);
  stage.reduce_exposed = l.job.parallel().overlap_grad_reduce()
                             ? ExposedAfterCompute(ready, reduce, backward_clock)
                             : stage.reduce;
  std::reverse(gather.begin(), gather.end());  // the next forward needs the first layers first
  std::reverse(forward.begin(), forward.end());
  stage.gather = sum(gather);
  stage.gather_exposed = l.job.parallel().overlap_param_gather()
                             ? ExposedBeforeCompute(gather, forward)
                             : stage.gather;
  const double shard =
      layout.distributed_optimizer ? std::ceil(stage_elements / replicas) : stage_elements;
  const double bytes = 28 * shard + (4 + (layout.separate_master ? 6 : 0)) * stage_elements;
  stage.optimizer = bytes / l.rates.memory_bytes_per_second;
}

}  // namespace

StepTime PredictStepTime(const config::JobConfig& job, const models::LlamaConfig& arch,
                         const training::JobLayout& layout, bool cuda) {
  StepTime step;
  const config::LaunchConfig& launch = job.launch();
  if (!launch.has_hardware()) {
    step.not_predicted =
        "no step time predicted: set launch.hardware (preset H100_SXM or H200, or a machine's "
        "measured rates without a preset)";
    return step;
  }
  const config::HardwareConfig& h = launch.hardware();
  if (h.preset() != config::HardwareConfig::NONE && !cuda) {
    step.not_predicted = absl::StrCat(
        "no step time predicted: launch.hardware.preset ",
        config::HardwareConfig::Preset_Name(h.preset()),
        " describes GPUs and this plan is for the CPU (a CPU's measured rates, without a preset, "
        "give one)");
    return step;
  }
  const parallel::GridSpec& g = layout.spec;
  step.rates = RatesOf(h, job.model().ssa().enabled(), g.seq_length);
  const int dpn = step.rates.devices_per_node, world = g.world_size;
  Layout l{.job = job, .arch = arch, .g = g, .rates = step.rates};
  l.activation_bytes = static_cast<double>(DTypeSize(layout.dtype));
  l.gradient_bytes = static_cast<double>(DTypeSize(AccumDType(layout.dtype)));
  l.tokens = static_cast<double>(g.micro_batch_size * g.seq_length) / g.context_parallel;
  l.tensor_spans = GroupSpansNodes(1, g.tensor_parallel, world, dpn);
  l.context_spans = GroupSpansNodes(g.tensor_parallel, g.context_parallel, world, dpn);
  l.replicas_spans = GroupSpansNodes(g.tensor_parallel, l.Replicas(), world, dpn);
  const int pipeline_stride = g.tensor_parallel * g.context_parallel * g.data_parallel;
  l.pipeline_spans = GroupSpansNodes(pipeline_stride, g.pipeline_parallel, world, dpn);

  const Work layer = LayerWork(l), head = HeadWork(l), embedding = EmbeddingWork(l);
  const double local_tokens = g.sequence_parallel ? l.tokens / g.tensor_parallel : l.tokens;
  const double transfer_seconds = local_tokens * static_cast<double>(arch.hidden_size) *
                                  l.activation_bytes / l.Bandwidth(l.pipeline_spans);
  const auto micro_batches = static_cast<double>(g.gradient_accumulation_steps);
  std::vector<StageTime> stages(static_cast<size_t>(g.pipeline_parallel));
  for (int s = 0; s < g.pipeline_parallel; ++s) {
    StageTime& stage = stages[static_cast<size_t>(s)];
    const double layers =
        static_cast<double>(arch.num_layers) / g.pipeline_parallel;  // validated to divide
    const bool first = s == 0, last = s == g.pipeline_parallel - 1;
    stage.per_micro_batch = layers * layer;
    if (first) stage.per_micro_batch += embedding;
    if (last) stage.per_micro_batch += head;
    // Each chunk sends its output forward and its input gradient back, but at the model's ends.
    stage.transfers =
        (2.0 * g.virtual_pipeline_stages - (first ? 1 : 0) - (last ? 1 : 0)) * transfer_seconds;
    if (g.pipeline_parallel == 1) stage.transfers = 0;
    PlanDataParallel(l, layout, s, layer, head, stage);
  }
  const auto slowest =
      std::max_element(stages.begin(), stages.end(), [](const StageTime& a, const StageTime& b) {
        return a.MicroBatchSeconds() < b.MicroBatchSeconds();
      });
  const auto tail =
      std::max_element(stages.begin(), stages.end(),
                       [](const StageTime& a, const StageTime& b) { return a.Tail() < b.Tail(); });
  double tail_without_overlap = 0;
  for (const StageTime& s : stages) {
    tail_without_overlap = std::max(tail_without_overlap, s.TailWithoutOverlap());
  }
  step.slowest_stage = static_cast<int>(slowest - stages.begin());
  const Work work = micro_batches * slowest->per_micro_batch;
  step.gemm_seconds = work.gemm.Total();
  step.attention_seconds = work.attention.Total();
  step.memory_bound_seconds = work.memory.Total();
  const double busy = micro_batches * slowest->MicroBatchSeconds();
  step.bubble_seconds = PipelineBubbleSeconds(busy, g.pipeline_parallel, g.virtual_pipeline_stages,
                                              g.gradient_accumulation_steps);
  step.optimizer_seconds = tail->optimizer;
  const auto add = [&step](std::string kind, int ranks, bool spans, double seconds, double exposed,
                           std::string overlap) {
    if (ranks > 1) {
      step.comms.push_back({std::move(kind), ranks, spans, seconds, exposed, std::move(overlap)});
    }
  };
  const double tensor = work.tensor.Total(), context = work.context.Total();
  add(g.sequence_parallel ? "tensor-parallel reduce-scatter + all-gather"
                          : "tensor-parallel all-reduce",
      g.tensor_parallel, l.tensor_spans, tensor, tensor, "");
  add("context-parallel K/V all-gather + reduce-scatter", g.context_parallel, l.context_spans,
      context, context, "");
  const double transfers = micro_batches * slowest->transfers;
  add("pipeline transfers", g.pipeline_parallel, l.pipeline_spans, transfers, transfers, "");
  const config::ParallelConfig& p = job.parallel();
  add(layout.distributed_optimizer ? "gradient reduce-scatter (ZeRO-1)" : "gradient all-reduce",
      l.Replicas(), l.replicas_spans, tail->reduce, tail->reduce_exposed,
      p.overlap_grad_reduce() ? "behind the last micro-batch's backward, bucket by bucket" : "");
  if (layout.distributed_optimizer) {
    add("parameter all-gather (ZeRO-1)", l.Replicas(), l.replicas_spans, tail->gather,
        tail->gather_exposed,
        p.overlap_param_gather() ? "behind the next step's first forward, bucket by bucket" : "");
  }
  step.step_seconds = busy + step.bubble_seconds + tail->Tail();
  step.step_seconds_without_overlap = busy + step.bubble_seconds + tail_without_overlap;
  const double tokens_per_step = static_cast<double>(g.global_batch_size * g.seq_length);
  step.tokens_per_second_per_device = tokens_per_step / step.step_seconds / world;
  step.mfu = models::TrainingFlopsPerToken(arch, g.seq_length) * tokens_per_step /
             (step.step_seconds * world * step.rates.peak_flops);
  return step;
}

std::string FormatStepTime(const config::JobConfig& job, const training::JobLayout& layout,
                           const StepTime& step) {
  if (!step.not_predicted.empty()) return step.not_predicted + "\n";
  const config::HardwareConfig& h = job.launch().hardware();
  const HardwareRates& r = step.rates;
  const parallel::GridSpec& g = layout.spec;
  const auto ms = [](double seconds) { return absl::StrFormat("%.1f ms", seconds * 1e3); };
  std::string out = absl::StrFormat(
      "step time on %s (%g TFLOP/s peak, %g GB/s memory, %d devices per node, %g GB/s inside a "
      "node, "
      "%g GB/s between nodes per device)%s:\n",
      h.preset() == config::HardwareConfig::NONE ? std::string("launch.hardware")
                                                 : config::HardwareConfig::Preset_Name(h.preset()),
      h.peak_tflops(), h.memory_gbps(), h.devices_per_node(), h.intra_node_gbps(),
      h.inter_node_gbps(),
      g.pipeline_parallel > 1
          ? absl::StrCat(", pipeline stage ", step.slowest_stage, " the slowest")
          : "");
  absl::StrAppendFormat(&out, "  GEMMs at %.1f TFLOP/s (%.3f of peak): %s\n", r.gemm_flops / 1e12,
                        r.gemm_flops / r.peak_flops, r.gemm_source);
  absl::StrAppendFormat(&out, "  attention at %.1f TFLOP/s: %s\n", r.attention_flops / 1e12,
                        r.attention_source);
  absl::StrAppendFormat(
      &out,
      "  compute %s: GEMMs %s, attention %s, memory-bound passes %s (norms, RoPE/SSA, SwiGLU, "
      "loss)\n",
      ms(step.gemm_seconds + step.attention_seconds + step.memory_bound_seconds),
      ms(step.gemm_seconds), ms(step.attention_seconds), ms(step.memory_bound_seconds));
  for (const CommTime& c : step.comms) {
    absl::StrAppendFormat(&out, "  %s over %d ranks (%s): %s, %s\n", c.kind, c.ranks,
                          c.spans_nodes ? "across nodes" : "inside a node", ms(c.seconds),
                          c.overlap.empty()
                              ? std::string("all exposed")
                              : absl::StrCat(ms(c.exposed), " exposed (", c.overlap, "; ",
                                             ms(c.seconds - c.exposed), " hidden)"));
  }
  if (g.pipeline_parallel > 1) {
    const double idle =
        static_cast<double>(g.pipeline_parallel - 1) /
        (g.virtual_pipeline_stages * static_cast<double>(g.gradient_accumulation_steps) +
         g.pipeline_parallel - 1);
    absl::StrAppendFormat(&out, "  pipeline bubble %s ((p-1)/(v m + p-1) = %.1f%% of the step)\n",
                          ms(step.bubble_seconds), 100 * idle);
  }
  absl::StrAppendFormat(&out, "  optimizer step %s (AdamW over the rank's shard, memory-bound)\n",
                        ms(step.optimizer_seconds));
  absl::StrAppendFormat(
      &out,
      "  step %s predicted (%s without overlap): %.0f tokens/s per device, MFU %.1f%% (model "
      "FLOPs per step, models/llama/model_flops.h, / (step time x %d processes x %g TFLOP/s))\n",
      ms(step.step_seconds), ms(step.step_seconds_without_overlap),
      step.tokens_per_second_per_device, 100 * step.mfu, g.world_size, h.peak_tflops());
  absl::StrAppend(
      &out,
      "  blind to: kernel launch gaps and host overhead, stragglers, collective latency and "
      "protocol overheads (link rates, not NCCL's bus bandwidth), compute slowed by overlapped "
      "communication, GEMM efficiency at smaller (tensor-split) shapes, FP8\n");
  return out;
}

}  // namespace kelvin::launcher
