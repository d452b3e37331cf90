// The job plan of `kelvin plan` / `kelvin launch`: the layout derived from the config and a world
// size (data parallel and accumulation derived, layout errors before any work), the dtype per
// device, and the peak memory over the ranks against each rank's own plan.
#include "training/job/job_plan.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "absl/strings/str_format.h"
#include "launcher/config/job_config.h"
#include "training/job/job_setup.h"

namespace kelvin::training {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

constexpr char kJob[] = R"pb(
  name: "plan"
  model { preset: "tiny" }
  data { passkey {} }
  optimizer { lr: 1e-3 }
  training { steps: 10 global_batch_size: 16 seq_length: 128 }
)pb";

struct Planned {
  config::JobConfig job;
  models::LlamaConfig arch;
};

Planned Job(const std::vector<std::string>& overrides) {
  absl::StatusOr<config::JobConfig> job =
      launcher::ParseJobConfig(kJob, "plan.textproto", overrides);
  EXPECT_TRUE(job.ok()) << job.status();
  absl::StatusOr<models::LlamaConfig> arch = ResolveModelArchitecture(job->model());
  EXPECT_TRUE(arch.ok()) << arch.status();
  return {*job, *arch};
}

// The model card of an export names its source model and data by their file names: the absolute
// directories of the machine that trained it stay out of a file meant to be published.
TEST(JobSetup, ExportProvenanceNamesFilesNotLocalDirectories) {
  config::JobConfig job = Job({}).job;
  job.mutable_model()->set_hf_dir("/models/Meta-Llama-3.1-8B/");
  job.mutable_data()->mutable_megatron()->set_path_prefix("/scratch/me/web/web_text_document");
  job.mutable_data()->mutable_megatron()->set_loss_mask_path_prefix("/scratch/me/web/mask");
  job.mutable_data()->mutable_eval()->mutable_token_file()->set_path("/scratch/me/eval.int32");
  const models::HfExportProvenance provenance = ExportProvenanceOf(job);
  EXPECT_EQ(provenance.source, "model.hf_dir=Meta-Llama-3.1-8B");
  EXPECT_EQ(provenance.source_dir,
            "/models/Meta-Llama-3.1-8B/");  // where its files are copied from
  EXPECT_THAT(provenance.data, HasSubstr("path_prefix: \"web_text_document\""));
  EXPECT_THAT(provenance.data, HasSubstr("loss_mask_path_prefix: \"mask\""));
  EXPECT_THAT(provenance.data, HasSubstr("path: \"eval.int32\""));
  EXPECT_THAT(provenance.data, Not(HasSubstr("/scratch")));
}

// model.attention_backend=CUDNN is checked where the model is built: on the CPU (training.device
// AUTO without a GPU) it is an error saying so; FUSED and AUTO run anywhere.
TEST(JobSetup, TheCudnnCoreIsRefusedWhereTheModelRunsOnTheCpu) {
  const absl::StatusOr<ssa::AttentionBackend> refused =
      AttentionBackendFor(Job({"model.attention_backend=CUDNN"}).job, Context::Cpu());
  EXPECT_THAT(refused.status().message(),
              ::testing::HasSubstr("model.attention_backend=CUDNN runs on CUDA only, but this job "
                                   "runs on the CPU"));
  const absl::StatusOr<ssa::AttentionBackend> runs =
      AttentionBackendFor(Job({"model.attention_backend=FUSED"}).job, Context::Cpu());
  ASSERT_TRUE(runs.ok()) << runs.status();
  EXPECT_EQ(*runs, ssa::AttentionBackend::kFused);
}

TEST(JobPlan, DurationsReadAtEveryScale) {
  EXPECT_EQ(FormatDuration(0.8523), "0.9s");
  EXPECT_EQ(FormatDuration(59.94), "59.9s");
  EXPECT_EQ(FormatDuration(247.0), "4m07s");
  EXPECT_EQ(FormatDuration(1704.6), "28m24s");
  EXPECT_EQ(FormatDuration(102300.0), "1d04h");
}

TEST(JobPlan, DerivesDataParallelAndAccumulationFromTheWorldSize) {
  const Planned p = Job({"parallel.tensor_parallel=2", "training.micro_batch_size=2"});
  const absl::StatusOr<parallel::GridSpec> spec = GridSpecOf(p.job, p.arch, 8);
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->data_parallel, 4);
  EXPECT_EQ(spec->gradient_accumulation_steps, 2);  // 16 sequences / (2 x 4 replicas)
}

TEST(JobPlan, LayoutErrorsComeBeforeAnyWork) {
  const Planned p = Job(
      {"parallel.tensor_parallel=2", "parallel.pipeline_parallel=2", "parallel.data_parallel=2"});
  EXPECT_THAT(PlanJobLayout(p.job, p.arch, 6, false).status().message(),
              HasSubstr("invalid parallel layout: world size 6 does not equal tp 2 x cp 1 x dp 2 "
                        "x pp 2 = 8"));
  const Planned bf16 = Job({"model.precision=BF16"});
  EXPECT_THAT(PlanJobLayout(bf16.job, bf16.arch, 1, false).status().message(),
              HasSubstr("model.precision=BF16 with training on the CPU"));
  const Planned long_rows = Job({"training.seq_length=100000", "data.token_file.path=/t"});
  EXPECT_THAT(PlanJobLayout(long_rows.job, long_rows.arch, 1, false).status().message(),
              HasSubstr("training.seq_length=100000 exceeds the model's max_position_embeddings"));
}

TEST(JobPlan, CudaPlansBf16WithMastersAndZeroOneNeedsReplicas) {
  const Planned p = Job({"parallel.distributed_optimizer=true"});
  const absl::StatusOr<JobLayout> one = PlanJobLayout(p.job, p.arch, 1, true);
  ASSERT_TRUE(one.ok()) << one.status();
  EXPECT_EQ(one->dtype, DType::kBF16);
  EXPECT_TRUE(one->separate_master);
  EXPECT_FALSE(one->distributed_optimizer);  // one replica: nothing to shard over
  const absl::StatusOr<JobLayout> two = PlanJobLayout(p.job, p.arch, 2, false);
  ASSERT_TRUE(two.ok()) << two.status();
  EXPECT_EQ(two->dtype, DType::kF32);
  EXPECT_TRUE(two->distributed_optimizer);
}

TEST(JobPlan, PeakIsTheLargestRankAndTheReportListsEveryStage) {
  const Planned p = Job({"parallel.tensor_parallel=2", "parallel.pipeline_parallel=2"});
  const absl::StatusOr<JobLayout> layout = PlanJobLayout(p.job, p.arch, 4, false);
  ASSERT_TRUE(layout.ok()) << layout.status();
  const absl::StatusOr<PeakMemory> peak = PlanPeakMemory(p.job, p.arch, *layout);
  ASSERT_TRUE(peak.ok()) << peak.status();
  int64_t largest = 0;
  for (int pp = 0; pp < 2; ++pp) {
    for (int tp = 0; tp < 2; ++tp) {
      const absl::StatusOr<models::MemoryPlan> plan =
          PlanRankMemory(p.job, p.arch, *layout, tp, pp);
      ASSERT_TRUE(plan.ok()) << plan.status();
      largest = std::max(largest, plan->Total());
    }
  }
  EXPECT_EQ(peak->plan.Total(), largest);
  const absl::StatusOr<models::MemoryPlan> at_peak =
      PlanRankMemory(p.job, p.arch, *layout, peak->tensor_rank, peak->pipeline_rank);
  EXPECT_EQ(at_peak->Total(), largest);
  EXPECT_GT(peak->plan.logits, 0);  // the last stage holds the LM head's logits

  const absl::StatusOr<std::string> report = FormatJobPlan(p.job, p.arch, *layout);
  ASSERT_TRUE(report.ok()) << report.status();
  EXPECT_THAT(*report, HasSubstr("layout: 4 processes = tensor 2 x context 1 x pipeline 2"));
  EXPECT_THAT(*report, HasSubstr("batch: 16 sequences of 128 tokens per step = 16 micro-batches"));
  EXPECT_THAT(*report, HasSubstr("memory per rank, pipeline stage 0 (tensor rank "));
  EXPECT_THAT(*report, HasSubstr("memory per rank, pipeline stage 1 (tensor rank "));
  EXPECT_THAT(*report, HasSubstr(absl::StrFormat("largest rank: pipeline stage %d, tensor rank %d: "
                                                 "%.3f GiB\n",
                                                 peak->pipeline_rank, peak->tensor_rank,
                                                 static_cast<double>(largest) / (1 << 30))));
}

TEST(JobPlan, TheLargestRankMustFitTheGpuMemoryWhenGiven) {
  const auto check = [](const std::vector<std::string>& overrides, int world, bool cuda) {
    const Planned p = Job(overrides);
    const absl::StatusOr<JobLayout> layout = PlanJobLayout(p.job, p.arch, world, cuda);
    EXPECT_TRUE(layout.ok()) << layout.status();
    const absl::StatusOr<PeakMemory> peak = PlanPeakMemory(p.job, p.arch, *layout);
    EXPECT_TRUE(peak.ok()) << peak.status();
    return CheckPlanFitsGpu(p.job, *layout, *peak);
  };
  // Llama-3.1-8B on one GPU: bf16 weights, f32 masters, gradients and moments alone are 120 GB.
  const std::vector<std::string> one_gpu = {"model.preset=llama3.1-8b", "launch.gpu_memory_gib=80"};
  const absl::Status too_big = check(one_gpu, 1, true);
  EXPECT_EQ(too_big.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(too_big.message(),
              HasSubstr("the largest rank (pipeline stage 0, tensor rank 0) plans "));
  EXPECT_THAT(too_big.message(),
              HasSubstr(" GiB, more than launch.gpu_memory_gib=80: raise parallel.tensor_parallel "
                        "or pipeline_parallel, or turn on parallel.distributed_optimizer, or turn "
                        "on model.recompute_attention / recompute_mlp"));
  // Remedies already in use are not offered.
  std::vector<std::string> recomputing = one_gpu;
  recomputing.insert(recomputing.end(),
                     {"model.recompute_attention=true", "model.recompute_mlp=true"});
  EXPECT_THAT(check(recomputing, 1, true).message(), Not(HasSubstr("recompute")));
  // Sharded over TP8 x PP2 it fits; unchecked without gpu_memory_gib, and on the CPU.
  std::vector<std::string> sharded = one_gpu;
  sharded.insert(sharded.end(), {"parallel.tensor_parallel=8", "parallel.pipeline_parallel=2"});
  EXPECT_TRUE(check(sharded, 16, true).ok());
  EXPECT_TRUE(check({"model.preset=llama3.1-8b"}, 1, true).ok());
  EXPECT_TRUE(check(one_gpu, 1, false).ok());
}

// plan --forward-only: the model `kelvin eval JOB` builds on the layout, each rank's weights and
// one micro-batch's activations: the plan of every stage is that rank's forward-only plan, with no
// gradients, masters or moments, and neither the training step's compute nor a checkpoint.
TEST(JobPlan, TheForwardOnlyReportIsTheModelEvalBuilds) {
  const Planned p = Job({"parallel.tensor_parallel=2", "parallel.pipeline_parallel=2",
                         "training.micro_batch_size=2"});
  const absl::StatusOr<JobLayout> training = PlanJobLayout(p.job, p.arch, 4, false);
  ASSERT_TRUE(training.ok()) << training.status();
  const JobLayout layout = ForwardOnlyLayout(*training);
  EXPECT_TRUE(layout.forward_only);
  EXPECT_FALSE(layout.separate_master);
  EXPECT_FALSE(layout.distributed_optimizer);
  const absl::StatusOr<std::string> report = FormatForwardPlan(p.job, p.arch, layout);
  ASSERT_TRUE(report.ok()) << report.status();
  EXPECT_THAT(*report, HasSubstr("layout: 4 processes = tensor 2 x context 1 x pipeline 2"));
  EXPECT_THAT(*report,
              HasSubstr("forward only (kelvin eval JOB): the weights and one micro-batch's "
                        "activations, no gradients, master weights or optimizer state; "
                        "micro-batches of 2 sequences of 128 tokens, one at a time "
                        "through the stages\n"));
  for (int pp = 0; pp < 2; ++pp) {
    models::MemoryPlan largest;
    int largest_rank = 0;
    for (int tp = 0; tp < 2; ++tp) {
      const absl::StatusOr<models::MemoryPlan> plan = PlanRankMemory(p.job, p.arch, layout, tp, pp);
      ASSERT_TRUE(plan.ok()) << plan.status();
      EXPECT_EQ(plan->gradients + plan->master_weights + plan->optimizer_state, 0);
      if (tp == 0 || plan->Total() > largest.Total()) {
        largest = *plan;
        largest_rank = tp;
      }
    }
    EXPECT_THAT(*report, HasSubstr(absl::StrFormat(
                             "memory per rank, pipeline stage %d (tensor rank %d, the largest): "
                             "%s\n",
                             pp, largest_rank, largest.ToString())));
  }
  const absl::StatusOr<PeakMemory> peak = PlanPeakMemory(p.job, p.arch, layout);
  ASSERT_TRUE(peak.ok()) << peak.status();
  EXPECT_THAT(*report,
              HasSubstr(absl::StrFormat("largest rank: pipeline stage %d, tensor rank %d: "
                                        "%.3f GiB\n",
                                        peak->pipeline_rank, peak->tensor_rank,
                                        static_cast<double>(peak->plan.Total()) / (1 << 30))));
  EXPECT_THAT(*report, Not(HasSubstr("compute:")));
  EXPECT_THAT(*report, Not(HasSubstr("checkpoint:")));
  // The training plan of the same layout holds more: gradients, moments, the schedule's
  // micro-batches.
  const absl::StatusOr<PeakMemory> training_peak = PlanPeakMemory(p.job, p.arch, *training);
  ASSERT_TRUE(training_peak.ok()) << training_peak.status();
  EXPECT_GT(training_peak->plan.Total(), peak->plan.Total());
}

// An 8B model's forward-only slice fits one 80 GiB GPU where its training does not; one that does
// not fit is told to spread the model or shrink the micro-batch, nothing a trainer alone has.
TEST(JobPlan, TheForwardOnlyModelMustFitTheGpuMemoryWhenGiven) {
  const auto check = [](const std::vector<std::string>& overrides) {
    const Planned p = Job(overrides);
    const absl::StatusOr<JobLayout> training = PlanJobLayout(p.job, p.arch, 1, true);
    EXPECT_TRUE(training.ok()) << training.status();
    const JobLayout layout = ForwardOnlyLayout(*training);
    const absl::StatusOr<PeakMemory> peak = PlanPeakMemory(p.job, p.arch, layout);
    EXPECT_TRUE(peak.ok()) << peak.status();
    return CheckPlanFitsGpu(p.job, layout, *peak);
  };
  EXPECT_TRUE(check({"model.preset=llama3.1-8b", "launch.gpu_memory_gib=80"}).ok());
  const absl::Status too_big =
      check({"model.preset=llama3.1-8b", "launch.gpu_memory_gib=8", "training.micro_batch_size=2"});
  EXPECT_EQ(too_big.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(too_big.message(),
              HasSubstr(" GiB, more than launch.gpu_memory_gib=8: raise parallel.tensor_parallel "
                        "or pipeline_parallel, or lower training.micro_batch_size"));
  EXPECT_THAT(too_big.message(), Not(HasSubstr("distributed_optimizer")));
  EXPECT_THAT(too_big.message(), Not(HasSubstr("recompute")));
}

}  // namespace
}  // namespace kelvin::training
