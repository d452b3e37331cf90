// The step-time model of `kelvin plan`: its formulas on hand-worked numbers (ring collectives,
// the span of a group over nodes, the bubble, what overlap hides), a whole step whose parts add up
// and follow the job's settings, the report's lines, and --layouts ordered by predicted time.
// Correctness of the arithmetic only: nothing here is timed.
#include "launcher/plan/step_time.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "launcher/config/job_config.h"
#include "launcher/plan/layout_search.h"
#include "models/llama/model_flops.h"
#include "training/job/job_setup.h"

namespace kelvin::launcher {
namespace {

using ::testing::HasSubstr;

TEST(StepTimeFormulas, RingCollectives) {
  // 1 GB over 8 ranks at 1 GB/s: all-reduce 2 x 7/8 s, reduce-scatter or all-gather 7/8 s.
  EXPECT_DOUBLE_EQ(RingAllReduceSeconds(1e9, 8, 1e9), 1.75);
  EXPECT_DOUBLE_EQ(RingGatherSeconds(1e9, 8, 1e9), 0.875);
  EXPECT_DOUBLE_EQ(RingGatherSeconds(4e9, 2, 1e9), 2.0);
  EXPECT_EQ(RingAllReduceSeconds(1e9, 1, 1e9), 0.0);  // one rank moves nothing
}

TEST(StepTimeFormulas, GroupSpansNodesAsTheGridLaysRanksOut) {
  // 32 ranks on nodes of 8: tensor groups (stride 1) of 8 stay inside, of 16 do not.
  EXPECT_FALSE(GroupSpansNodes(1, 8, 32, 8));
  EXPECT_TRUE(GroupSpansNodes(1, 16, 32, 8));
  // Ranks 0, 2, 4, 6 (stride 2, size 4) share node 0; 0, 4, 8, 12 (stride 4) do not.
  EXPECT_FALSE(GroupSpansNodes(2, 4, 32, 8));
  EXPECT_TRUE(GroupSpansNodes(4, 4, 32, 8));
  // Data-parallel replicas of TP8 (stride 8) always cross nodes of 8; a size-1 group never does.
  EXPECT_TRUE(GroupSpansNodes(8, 4, 32, 8));
  EXPECT_FALSE(GroupSpansNodes(8, 1, 32, 8));
  // Nodes of 6 with groups of 4: the copy 4..7 holds ranks of nodes 0 and 1.
  EXPECT_TRUE(GroupSpansNodes(1, 4, 12, 6));
}

TEST(StepTimeFormulas, PipelineBubbleIsTheIdleShareOfTheStep) {
  // p = 4, m = 12: idle (p-1)/(m) of the busy time, (p-1)/(m+p-1) = 3/15 of the step.
  const double idle = PipelineBubbleSeconds(10, 4, 1, 12);
  EXPECT_DOUBLE_EQ(idle, 2.5);
  EXPECT_DOUBLE_EQ(idle / (10 + idle), 3.0 / 15);
  EXPECT_DOUBLE_EQ(PipelineBubbleSeconds(10, 4, 2, 12), 1.25);  // two chunks halve it
  EXPECT_EQ(PipelineBubbleSeconds(10, 1, 1, 12), 0.0);
}

TEST(StepTimeFormulas, OverlappedReductionLeavesTheLastBucketOrTheExcess) {
  // Buckets ready at 1, 2, 3 s of a 3 s backward: fast ones leave only the last exposed.
  EXPECT_DOUBLE_EQ(ExposedAfterCompute({1, 2, 3}, {0.5, 0.5, 0.5}, 3), 0.5);
  // Slow ones queue: 1 -> 3 -> 5 -> 7, 4 s past the backward.
  EXPECT_DOUBLE_EQ(ExposedAfterCompute({1, 2, 3}, {2, 2, 2}, 3), 4.0);
  // One bucket for everything, ready at the end: all of it exposed.
  EXPECT_DOUBLE_EQ(ExposedAfterCompute({3}, {1.5}, 3), 1.5);
}

TEST(StepTimeFormulas, OverlappedGatherLeavesTheFirstBucketOrTheExcess) {
  // 1 s gathers before 2 s of forward each: only the first is waited for.
  EXPECT_DOUBLE_EQ(ExposedBeforeCompute({1, 1, 1}, {2, 2, 2}), 1.0);
  // 3 s gathers before 1 s segments: the forward waits 3, then 2, then 2.
  EXPECT_DOUBLE_EQ(ExposedBeforeCompute({3, 3, 3}, {1, 1, 1}), 7.0);
}

// Llama-3.1-8B at 8K tokens on 2 nodes of 8 H200s.
constexpr char kJob[] = R"pb(
  name: "step"
  model {
    preset: "llama3.1-8b"
    precision: BF16
    ssa { enabled: true }
  }
  data { passkey {} }
  optimizer { lr: 1e-5 }
  training { steps: 10 global_batch_size: 32 micro_batch_size: 1 seq_length: 8192 device: CUDA }
  parallel { tensor_parallel: 2 sequence_parallel: true distributed_optimizer: true }
  launch {
    nodes: 2
    processes_per_node: 8
    gpus_per_node: 8
    hardware { preset: H200 }
  }
)pb";

config::JobConfig Job(const std::vector<std::string>& overrides = {}) {
  absl::StatusOr<config::JobConfig> job = ParseJobConfig(kJob, "step.textproto", overrides);
  EXPECT_TRUE(job.ok()) << job.status();
  return job.value_or(config::JobConfig());
}

struct Planned {
  config::JobConfig job;
  models::LlamaConfig arch;
  training::JobLayout layout;
  StepTime step;
};

Planned Plan(const std::vector<std::string>& overrides = {}, int processes = 16, bool cuda = true) {
  Planned p;
  p.job = Job(overrides);
  absl::StatusOr<models::LlamaConfig> arch = training::ResolveModelArchitecture(p.job.model());
  EXPECT_TRUE(arch.ok()) << arch.status();
  p.arch = arch.value_or(models::LlamaConfig());
  absl::StatusOr<training::JobLayout> layout =
      training::PlanJobLayout(p.job, p.arch, processes, cuda);
  EXPECT_TRUE(layout.ok()) << layout.status();
  p.layout = layout.value_or(training::JobLayout());
  p.step = PredictStepTime(p.job, p.arch, p.layout, cuda);
  return p;
}

const CommTime* Find(const StepTime& step, const std::string& kind) {
  for (const CommTime& c : step.comms) {
    if (c.kind == kind) return &c;
  }
  return nullptr;
}

TEST(StepTime, PartsAddUpToTheStepAndItsRates) {
  const Planned p = Plan();
  ASSERT_EQ(p.step.not_predicted, "");
  const StepTime& s = p.step;
  double exposed = 0, all = 0;
  for (const CommTime& c : s.comms) {
    exposed += c.exposed;
    all += c.seconds;
    EXPECT_LE(c.exposed, c.seconds) << c.kind;
  }
  const double compute = s.gemm_seconds + s.attention_seconds + s.memory_bound_seconds;
  EXPECT_NEAR(s.step_seconds, compute + exposed + s.bubble_seconds + s.optimizer_seconds,
              1e-12 * s.step_seconds);
  EXPECT_NEAR(s.step_seconds_without_overlap,
              compute + all + s.bubble_seconds + s.optimizer_seconds, 1e-12 * s.step_seconds);
  // tokens/s per device and MFU by their formulas.
  const double tokens = 32.0 * 8192;
  EXPECT_DOUBLE_EQ(s.tokens_per_second_per_device, tokens / s.step_seconds / 16);
  EXPECT_DOUBLE_EQ(s.mfu, models::TrainingFlopsPerToken(p.arch, 8192) * tokens /
                              (s.step_seconds * 16 * 989.4e12));
  // The preset's rates and Kelvin's measured GEMM fraction.
  EXPECT_DOUBLE_EQ(s.rates.gemm_flops, 818.7e12);
  EXPECT_DOUBLE_EQ(s.rates.attention_flops, 96.7e12);  // the SSA kernel's row at T = 8192
  EXPECT_DOUBLE_EQ(s.rates.inter_node_bytes_per_second, 50e9);
}

TEST(StepTime, PresetFillsOnlyTheFieldsTheJobLeavesUnset) {
  const Planned p =
      Plan({"launch.hardware.inter_node_gbps=25", "launch.hardware.memory_gbps=2400"});
  EXPECT_DOUBLE_EQ(p.step.rates.inter_node_bytes_per_second, 25e9);
  EXPECT_DOUBLE_EQ(p.step.rates.memory_bytes_per_second, 2400e9);
  EXPECT_DOUBLE_EQ(p.step.rates.intra_node_bytes_per_second, 450e9);  // H200's NVLink 4
  EXPECT_DOUBLE_EQ(p.step.rates.peak_flops, 989.4e12);
  EXPECT_EQ(p.step.rates.devices_per_node, 8);
  const config::HardwareConfig& resolved = p.job.launch().hardware();
  EXPECT_FALSE(resolved.has_gemm_efficiency());  // Kelvin's measured fraction, not a field value
}

TEST(StepTime, GemmTimeIsTheHardwareFlopsAtTheMeasuredRate) {
  // One process, recompute of both blocks: every layer's GEMMs, the LM head, at 818.7 TFLOP/s.
  const Planned p = Plan({"parallel.tensor_parallel=1", "parallel.sequence_parallel=false",
                          "model.recompute_attention=true", "model.recompute_mlp=true"},
                         1);
  const models::LayerFlops layer = models::DecoderLayerFlopsPerToken(p.arch, 8192, true, true);
  const double per_token = 32 * layer.gemm.Total() + models::LmHeadFlopsPerToken(p.arch).Total();
  EXPECT_NEAR(p.step.gemm_seconds, 32.0 * 8192 * per_token / 818.7e12, 1e-12 * p.step.gemm_seconds);
  EXPECT_NEAR(p.step.attention_seconds, 32.0 * 8192 * 32 * layer.attention.Total() / 96.7e12,
              1e-12 * p.step.attention_seconds);
  EXPECT_TRUE(p.step.comms.empty());  // one process communicates nothing
  // AdamW over every parameter with bf16 weights beside f32 masters: 28 + 4 + 6 bytes each.
  const auto parameters = static_cast<double>(p.arch.NumParameters());
  EXPECT_NEAR(p.step.optimizer_seconds, 38 * parameters / 4800e9, 1e-12);
}

TEST(StepTime, TensorParallelCollectivesFollowTheRingFormula) {
  // TP2 with sequence parallelism inside a node: per micro-batch 4 regions per layer plus the
  // embedding's and the head's, each a reduce-scatter and an all-gather of [8192, 4096] bf16.
  const Planned p = Plan();
  const CommTime* tp = Find(p.step, "tensor-parallel reduce-scatter + all-gather");
  ASSERT_NE(tp, nullptr);
  EXPECT_EQ(tp->ranks, 2);
  EXPECT_FALSE(tp->spans_nodes);
  const double region = RingAllReduceSeconds(8192.0 * 4096 * 2, 2, 450e9);
  // DP 8: 4 micro-batches of 1 per replica.
  EXPECT_NEAR(tp->seconds, 4 * (4 * 32 + 2) * region, 1e-12 * tp->seconds);
  EXPECT_EQ(tp->exposed, tp->seconds);  // Kelvin does not overlap them
  // Without sequence parallelism: all-reduces, the same ring time.
  const Planned ar = Plan({"parallel.sequence_parallel=false"});
  const CommTime* all_reduce = Find(ar.step, "tensor-parallel all-reduce");
  ASSERT_NE(all_reduce, nullptr);
  EXPECT_DOUBLE_EQ(all_reduce->seconds, tp->seconds);
  // TP16 over two nodes runs at InfiniBand's rate.
  const Planned wide = Plan({"parallel.tensor_parallel=16", "training.global_batch_size=4"});
  const CommTime* across = Find(wide.step, "tensor-parallel reduce-scatter + all-gather");
  ASSERT_NE(across, nullptr);
  EXPECT_TRUE(across->spans_nodes);
}

TEST(StepTime, DataParallelOverlapHidesAllButTheEdges) {
  const Planned p = Plan();
  const CommTime* reduce = Find(p.step, "gradient reduce-scatter (ZeRO-1)");
  const CommTime* gather = Find(p.step, "parameter all-gather (ZeRO-1)");
  ASSERT_NE(reduce, nullptr);
  ASSERT_NE(gather, nullptr);
  EXPECT_EQ(reduce->ranks, 8);
  EXPECT_TRUE(reduce->spans_nodes);  // TP2 x DP8 on nodes of 8
  EXPECT_LT(reduce->exposed, reduce->seconds);
  EXPECT_GT(reduce->exposed, 0);  // the last bucket
  EXPECT_LT(gather->exposed, gather->seconds);
  // The reduce-scatter moves 7/8 of the f32 gradients of tensor rank 0's half of the model (the
  // embedding and LM head split by vocabulary; the norms, whole, are under 0.01%) at 50 GB/s; the
  // gather the same bytes of f32 masters.
  const double elements = reduce->seconds / (7.0 / 8 * 4 / 50e9);
  EXPECT_NEAR(elements, static_cast<double>(p.arch.NumParameters()) / 2,
              1e-3 * static_cast<double>(p.arch.NumParameters()));
  EXPECT_DOUBLE_EQ(gather->seconds, reduce->seconds);
  // Off: everything exposed. One bucket for the whole model: its reduction waits for the end of
  // the backward and its gather for nothing before the first layer.
  const Planned off =
      Plan({"parallel.overlap_grad_reduce=false", "parallel.overlap_param_gather=false"});
  for (const CommTime& c : off.step.comms) EXPECT_EQ(c.exposed, c.seconds) << c.kind;
  EXPECT_DOUBLE_EQ(off.step.step_seconds, off.step.step_seconds_without_overlap);
  EXPECT_GT(off.step.step_seconds, p.step.step_seconds);
  const Planned one_bucket = Plan({"parallel.grad_bucket_elements=100000000000"});
  for (const CommTime& c : one_bucket.step.comms) {
    EXPECT_NEAR(c.exposed, c.seconds, 1e-12 * c.seconds) << c.kind;
  }
  // Plain data parallelism all-reduces: twice the reduce-scatter's time, no gather.
  const Planned ddp = Plan({"parallel.distributed_optimizer=false"});
  const CommTime* all_reduce = Find(ddp.step, "gradient all-reduce");
  ASSERT_NE(all_reduce, nullptr);
  EXPECT_DOUBLE_EQ(all_reduce->seconds, 2 * reduce->seconds);
  EXPECT_EQ(Find(ddp.step, "parameter all-gather (ZeRO-1)"), nullptr);
}

TEST(StepTime, PipelineAddsTransfersAndTheBubble) {
  const Planned p = Plan({"parallel.tensor_parallel=1", "parallel.sequence_parallel=false",
                          "parallel.pipeline_parallel=4", "training.global_batch_size=16"});
  ASSERT_EQ(p.step.not_predicted, "");
  const CommTime* transfers = Find(p.step, "pipeline transfers");
  ASSERT_NE(transfers, nullptr);
  EXPECT_EQ(transfers->ranks, 4);
  EXPECT_TRUE(transfers->spans_nodes);  // stages 4 ranks apart: stages 1 and 2 of a copy cross
  // DP 4, 4 micro-batches of 1 per replica: bubble 3/4 of the slowest stage's busy time.
  double busy = p.step.gemm_seconds + p.step.attention_seconds + p.step.memory_bound_seconds;
  for (const CommTime& c : p.step.comms) {
    if (c.kind == "pipeline transfers") busy += c.seconds;
  }
  EXPECT_NEAR(p.step.bubble_seconds, busy * 3 / 4, 1e-9 * busy);
  EXPECT_EQ(p.step.slowest_stage, 3);  // the LM head and the loss
}

TEST(StepTime, NoPredictionWithoutHardwareOrForTheCpuWithAGpuPreset) {
  const Planned none =
      Plan({"model.precision=FP32", "training.device=CPU", "launch.hardware.preset=NONE",
            "launch.hardware.peak_tflops=1", "launch.hardware.memory_gbps=1",
            "launch.hardware.devices_per_node=8", "launch.hardware.intra_node_gbps=1",
            "launch.hardware.inter_node_gbps=1", "launch.hardware.attention_tflops=0.5"},
           16, /*cuda=*/false);
  EXPECT_EQ(none.step.not_predicted, "");              // a CPU described by its rates
  EXPECT_DOUBLE_EQ(none.step.rates.gemm_flops, 1e12);  // the measured rate itself
  const Planned gpu_on_cpu =
      Plan({"model.precision=FP32", "training.device=CPU"}, 16, /*cuda=*/false);
  EXPECT_THAT(gpu_on_cpu.step.not_predicted,
              HasSubstr("launch.hardware.preset H200 describes GPUs and this plan is for the CPU"));
  config::JobConfig bare = Job();
  bare.mutable_launch()->clear_hardware();
  const Planned with_hardware = Plan();
  EXPECT_THAT(PredictStepTime(bare, with_hardware.arch, with_hardware.layout, true).not_predicted,
              HasSubstr("set launch.hardware"));
  EXPECT_EQ(FormatStepTime(bare, with_hardware.layout,
                           PredictStepTime(bare, with_hardware.arch, with_hardware.layout, true)),
            "no step time predicted: set launch.hardware (preset H100_SXM or H200, or a "
            "machine's measured rates without a preset)\n");
}

TEST(StepTime, ReportNamesRatesSourcesEveryKindAndTheFormula) {
  const Planned p = Plan();
  const std::string report = FormatStepTime(p.job, p.layout, p.step);
  EXPECT_THAT(report, HasSubstr("step time on H200 (989.4 TFLOP/s peak, 4800 GB/s memory, 8 "
                                "devices per node, 450 GB/s inside a node, 50 GB/s between nodes "
                                "per device)"));
  EXPECT_THAT(report, HasSubstr("GEMMs at 818.7 TFLOP/s (0.827 of peak): Kelvin's cuBLASLt bf16 "
                                "GEMM 8192x4096x14336"));
  EXPECT_THAT(report, HasSubstr("attention at 96.7 TFLOP/s: Kelvin's SSA kernel at T=8192: "
                                "forward + backward, FlashAttention's count, on an H200"));
  EXPECT_THAT(report, HasSubstr("tensor-parallel reduce-scatter + all-gather over 2 ranks (inside "
                                "a node): "));
  EXPECT_THAT(report, HasSubstr("gradient reduce-scatter (ZeRO-1) over 8 ranks (across nodes): "));
  EXPECT_THAT(report, HasSubstr(" exposed (behind the last micro-batch's backward, bucket by "
                                "bucket; "));
  EXPECT_THAT(report, HasSubstr("parameter all-gather (ZeRO-1) over 8 ranks"));
  EXPECT_THAT(report, HasSubstr("optimizer step "));
  EXPECT_THAT(report, HasSubstr("MFU "));
  EXPECT_THAT(report, HasSubstr("(model FLOPs per step, models/llama/model_flops.h, / (step time "
                                "x 16 processes x 989.4 TFLOP/s))"));
  EXPECT_THAT(report, HasSubstr("blind to: kernel launch gaps"));
}

TEST(StepTime, AttentionRateInterpolatesTheMeasuredRowsBySequenceLength) {
  // T = 6144 lies between the 4096 (90.7) and 8192 (96.7) rows of the SSA kernel, log-linearly.
  const Planned p = Plan({"training.seq_length=6144"});
  const double x = std::log2(6144.0 / 4096);
  EXPECT_NEAR(p.step.rates.attention_flops, (90.7 + x * (96.7 - 90.7)) * 1e12, 1e3);
  EXPECT_THAT(p.step.rates.attention_source, HasSubstr("between T=4096 and T=8192"));
  const Planned set = Plan({"launch.hardware.attention_tflops=300"});
  EXPECT_DOUBLE_EQ(set.step.rates.attention_flops, 300e12);
  EXPECT_EQ(set.step.rates.attention_source, "launch.hardware.attention_tflops");
}

TEST(StepTime, LayoutsThatFitComeFirstThenTheFastest) {
  const config::JobConfig job =
      Job({"launch.gpu_memory_gib=80", "launch.nodes=4", "training.global_batch_size=64",
           "model.recompute_attention=true"});
  absl::StatusOr<models::LlamaConfig> arch = training::ResolveModelArchitecture(job.model());
  ASSERT_TRUE(arch.ok()) << arch.status();
  const absl::StatusOr<LayoutSearch> search = SearchLayouts(job, *arch, 32, /*cuda=*/true);
  ASSERT_TRUE(search.ok()) << search.status();
  ASSERT_GT(search->candidates.size(), 10u);
  bool seen_unfitting = false;
  double previous = 0;
  for (const LayoutCandidate& c : search->candidates) {
    SCOPED_TRACE(training::LayoutName(c.layout.spec, c.layout.distributed_optimizer));
    ASSERT_EQ(c.step_time.not_predicted, "");
    if (!c.fits) {
      seen_unfitting = true;
      continue;
    }
    EXPECT_FALSE(seen_unfitting) << "a fitting layout after one that does not fit";
    EXPECT_GE(c.step_time.step_seconds, previous);
    previous = c.step_time.step_seconds;
  }
  EXPECT_TRUE(seen_unfitting);  // one process per GPU with the whole model does not fit 80 GiB
  const std::string table = FormatLayoutSearch(job, *search, 32, 5);
  EXPECT_THAT(table, HasSubstr("pipeline bubble        step  tokens/s/device\n"));
  EXPECT_THAT(table, HasSubstr("order: fits, then the shortest predicted step"));
}

}  // namespace
}  // namespace kelvin::launcher
