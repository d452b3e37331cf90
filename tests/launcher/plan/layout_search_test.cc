// `kelvin plan --layouts`: every listed layout is one the job accepts (its --set flags give that
// layout and its memory), each split the job refuses is counted with its reason, the fit and the
// pipeline bubble are what the plan says, and the list follows its stated order.
#include "launcher/plan/layout_search.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <set>
#include <tuple>

#include "launcher/config/job_config.h"
#include "training/job/job_setup.h"

namespace kelvin::launcher {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

// Llama-3.1-8B fine-tuned at 8K tokens on 4 nodes of 8 GPUs of 80 GiB.
constexpr char kJob[] = R"pb(
  name: "layouts"
  model { preset: "llama3.1-8b" precision: BF16 recompute_attention: true }
  data { passkey {} }
  optimizer { lr: 1e-5 }
  training { steps: 10 global_batch_size: 64 micro_batch_size: 1 seq_length: 8192 device: CUDA }
  launch { nodes: 4 processes_per_node: 8 gpus_per_node: 8 gpu_memory_gib: 80 }
)pb";

config::JobConfig Job(const std::vector<std::string>& overrides = {}) {
  absl::StatusOr<config::JobConfig> job = ParseJobConfig(kJob, "layouts.textproto", overrides);
  EXPECT_TRUE(job.ok()) << job.status();
  return job.value_or(config::JobConfig());
}

models::LlamaConfig Arch(const config::JobConfig& job) {
  absl::StatusOr<models::LlamaConfig> arch = training::ResolveModelArchitecture(job.model());
  EXPECT_TRUE(arch.ok()) << arch.status();
  return arch.value_or(models::LlamaConfig());
}

TEST(LayoutSearch, EachLayoutIsOneTheJobAcceptsWithTheMemoryItsFlagsPlan) {
  const config::JobConfig job = Job();
  const models::LlamaConfig arch = Arch(job);
  const absl::StatusOr<LayoutSearch> search = SearchLayouts(job, arch, 32, /*cuda=*/true);
  ASSERT_TRUE(search.ok()) << search.status();
  ASSERT_GT(search->candidates.size(), 20u);
  std::set<std::string> names;
  for (const LayoutCandidate& c : search->candidates) {
    const parallel::GridSpec& g = c.layout.spec;
    const std::string name = training::LayoutName(g, c.layout.distributed_optimizer);
    SCOPED_TRACE(name);
    EXPECT_TRUE(names.insert(name).second) << "listed twice";
    EXPECT_EQ(g.tensor_parallel * g.context_parallel * g.pipeline_parallel * g.data_parallel, 32);
    EXPECT_EQ(g.sequence_parallel, g.tensor_parallel > 1);
    EXPECT_EQ(c.layout.distributed_optimizer, g.data_parallel * g.context_parallel > 1);
    // The printed flags select this very layout, whose plan is the listed one.
    std::vector<std::string> overrides = LayoutOverrides(c);
    const config::JobConfig chosen = Job(overrides);
    const absl::StatusOr<training::JobLayout> layout =
        training::PlanJobLayout(chosen, arch, 32, true);
    ASSERT_TRUE(layout.ok()) << layout.status();
    EXPECT_EQ(training::LayoutName(layout->spec, layout->distributed_optimizer), name);
    const absl::StatusOr<training::PeakMemory> peak =
        training::PlanPeakMemory(chosen, arch, *layout);
    ASSERT_TRUE(peak.ok()) << peak.status();
    EXPECT_EQ(peak->plan.Total(), c.peak.plan.Total());
    EXPECT_EQ(c.fits, c.peak.plan.Total() <= int64_t{80} << 30);
    const double p = g.pipeline_parallel, m = static_cast<double>(64 / g.data_parallel);
    EXPECT_DOUBLE_EQ(c.pipeline_bubble, (p - 1) / (g.virtual_pipeline_stages * m + p - 1));
    EXPECT_EQ(c.tensor_parallel_in_node, g.tensor_parallel <= 8);
  }
  // One process per GPU holds the whole 8B model's bf16 weights, f32 gradients and activations:
  // listed, and not fitting 80 GiB.
  const auto whole = std::find_if(
      search->candidates.begin(), search->candidates.end(), [](const LayoutCandidate& c) {
        return c.layout.spec.tensor_parallel * c.layout.spec.context_parallel *
                   c.layout.spec.pipeline_parallel ==
               1;
      });
  ASSERT_NE(whole, search->candidates.end());
  EXPECT_FALSE(whole->fits);
  // 32 layers cannot be cut into 32 stages of 2 chunks each.
  EXPECT_GE(search->invalid, 1);
  EXPECT_THAT(search->invalid_reasons,
              testing::Contains(HasSubstr("num_layers=32 is not divisible by pipeline_parallel 32 "
                                          "x virtual_pipeline_stages 2")));
}

TEST(LayoutSearch, TheOrderIsFitThenLeastModelParallelismThenBubbleThenHeadroom) {
  const config::JobConfig job = Job();
  const absl::StatusOr<LayoutSearch> search = SearchLayouts(job, Arch(job), 32, true);
  ASSERT_TRUE(search.ok()) << search.status();
  const auto key = [](const LayoutCandidate& c) {
    const parallel::GridSpec& g = c.layout.spec;
    return std::make_tuple(!c.fits, g.tensor_parallel * g.context_parallel * g.pipeline_parallel,
                           !c.tensor_parallel_in_node, c.pipeline_bubble, c.peak.plan.Total());
  };
  for (size_t i = 1; i < search->candidates.size(); ++i) {
    EXPECT_LE(key(search->candidates[i - 1]), key(search->candidates[i])) << i;
  }
  const LayoutCandidate& first = search->candidates.front();
  EXPECT_TRUE(first.fits);
  const std::string table = FormatLayoutSearch(job, *search, 32, 5);
  EXPECT_THAT(table, HasSubstr("layouts of job layouts on 32 processes, keeping micro-batch 1 x "
                               "8192 tokens, recompute_attention on, recompute_mlp off; fit: "
                               "largest rank <= launch.gpu_memory_gib=80"));
  EXPECT_THAT(table, HasSubstr("    1  " + training::LayoutName(first.layout.spec, true)));
  EXPECT_THAT(table, HasSubstr(absl::StrCat("  ... ", search->candidates.size() - 5, " more")));
  EXPECT_THAT(table, HasSubstr("the first: --set parallel.tensor_parallel=" +
                               std::to_string(first.layout.spec.tensor_parallel)));
}

TEST(LayoutSearch, WhenNothingFitsTheTableSaysSoAndSuggestsNoFlags) {
  const config::JobConfig job = Job({"launch.gpu_memory_gib=4"});
  const absl::StatusOr<LayoutSearch> search = SearchLayouts(job, Arch(job), 8, true);
  ASSERT_TRUE(search.ok()) << search.status();
  for (const LayoutCandidate& c : search->candidates) EXPECT_FALSE(c.fits);
  const std::string table = FormatLayoutSearch(job, *search, 8, 3);
  EXPECT_THAT(table,
              HasSubstr(absl::StrCat("0 of ", search->candidates.size(), " valid layouts fit")));
  EXPECT_THAT(table, Not(HasSubstr("the first:")));
  // A sequence longer than the model takes is the job's error, not a layout's.
  const config::JobConfig too_long = Job({"training.seq_length=262144"});
  EXPECT_FALSE(SearchLayouts(too_long, Arch(too_long), 8, true).ok());
}

}  // namespace
}  // namespace kelvin::launcher
