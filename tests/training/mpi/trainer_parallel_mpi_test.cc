// Parallel training equals one process (run under mpirun -np 2, 4 and 8): under each layout that
// fits the world, the demo model with SSA gives the one-process run's losses and final parameters
// within the f32 tolerance; the pipeline schedules give bit-identical runs; a preempted parallel
// run resumes bit for bit, and under another layout or in one process within the f32 tolerance;
// damage one rank alone reads in a checkpoint is every rank's verdict (checkpoint.skip_damaged).
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <mpi.h>

#include <csignal>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <random>
#include <tuple>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/io/hf_checkpoint.h"
#include "data/corpus/token_file.h"
#include "data/sft/jsonl_samples.h"
#include "inference/held_out_evaluation.h"
#include "inference/job_forward_model.h"
#include "launcher/commands/convert_command.h"
#include "launcher/commands/eval_command.h"
#include "launcher/config/job_config.h"
#include "models/llama/llama_model.h"
#include "tests/models/random_ssa_checkpoint.h"
#include "tests/testing/backends.h"
#include "tests/testing/compare.h"
#include "tests/testing/files.h"
#include "tests/testing/tensors.h"
#include "tests/testing/tolerance.h"
#include "training/checkpoint/checkpoint_format.h"
#include "training/checkpoint/preemption.h"
#include "training/job/data_sources.h"
#include "training/job/job_plan.h"
#include "training/trainer.h"

namespace kelvin::training {
namespace {

int WorldSize() {
  int size = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  return size;
}

int WorldRank() {
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  return rank;
}

struct Layout {
  const char* name;
  int tp, dp;
  bool sequence_parallel;
  bool distributed_optimizer = false;
  int pp = 1;
  int virtual_stages = 1;
  const char* schedule = "ONE_F_ONE_B";
  int layers = 4;          // 8 for four stages of two chunks
  bool recompute = false;  // model.recompute_attention and recompute_mlp
  int hidden = 128;        // 256: head dim 64, a size the CUDA kernel runs
  const char* device = "CPU";
  int cp = 1;         // context parallel
  bool tied = false;  // tied input and output embeddings
  // f32 master weights apart from the f32 model, as bf16 training keeps them (with ZeRO-1:
  // sharded over the data-parallel ranks)
  bool separate_master = false;
  // LoRA (rank 4, alpha 8) beside all seven projections, training the adapters and SSA on a
  // frozen base
  bool lora = false;

  int world() const { return tp * dp * pp * cp; }
};

// ZeRO-1 with f32 masters apart from the model (bf16 training's bookkeeping): the masters sharded
// over the two data-parallel ranks too.
constexpr Layout kDp2ZeroOneSeparateMasters = {.name = "DP2_ZeRO1_separate_masters",
                                               .tp = 1,
                                               .dp = 2,
                                               .sequence_parallel = false,
                                               .distributed_optimizer = true,
                                               .separate_master = true};

// Rank 0 writes the tiny preset (`layers` layers, `hidden` wide) with SSA and non-zero
// temperature parameters; everyone waits.
std::string StartingCheckpoint(int layers, int hidden, bool tied) {
  absl::StatusOr<models::LlamaConfig> config = models::LlamaPreset("tiny");
  EXPECT_TRUE(config.ok());
  config->num_layers = layers;
  config->hidden_size = hidden;
  config->head_dim = hidden / config->num_attention_heads;
  config->tie_word_embeddings = tied;
  config->ssa = ssa::SsaOptions();
  return testing::WriteRandomSsaCheckpoint(
      *config,
      absl::StrCat(::testing::TempDir(), "/parallel_training_start_", layers, "_", hidden,
                   tied ? "_tied" : ""),
      17);
}

config::JobConfig SmallJob(const Layout& layout, std::vector<std::string> extra = {}) {
  // Written once per shape (collectively: every rank builds the same jobs in the same order), so
  // no rank rewrites a checkpoint another may still be reading.
  static std::map<std::tuple<int, int, bool>, std::string> starts;
  const std::tuple<int, int, bool> shape{layout.layers, layout.hidden, layout.tied};
  if (!starts.count(shape)) {
    starts[shape] = StartingCheckpoint(layout.layers, layout.hidden, layout.tied);
  }
  const std::string& start = starts.at(shape);
  const std::string demo = testing::DemoJobPath();
  std::vector<std::string> overrides = {
      "model.hf_dir=\"" + start + "\"",
      "model.ssa.enabled=true",
      "lr_schedule.warmup_steps=1",
      "training.steps=3",
      "training.seq_length=112",
      "training.micro_batch_size=2",
      "training.global_batch_size=8",
      "training.eval_interval=3",
      "training.eval_steps=3",  // split over the data-parallel replicas, unevenly
      "training.export_hf_dir=\"\"",
      "logging.log_interval=1",  // every step reports its temperatures
      "optimizer.lr=1e-4",
      absl::StrCat("parallel.tensor_parallel=", layout.tp),
      absl::StrCat("parallel.data_parallel=", layout.dp),
      absl::StrCat("parallel.sequence_parallel=", layout.sequence_parallel ? "true" : "false"),
      absl::StrCat("parallel.distributed_optimizer=",
                   layout.distributed_optimizer ? "true" : "false"),
      absl::StrCat("parallel.pipeline_parallel=", layout.pp),
      absl::StrCat("parallel.context_parallel=", layout.cp),
      absl::StrCat("parallel.virtual_pipeline_stages=", layout.virtual_stages),
      absl::StrCat("parallel.pipeline_schedule=", layout.schedule),
      absl::StrCat("model.recompute_attention=", layout.recompute ? "true" : "false"),
      absl::StrCat("model.recompute_mlp=", layout.recompute ? "true" : "false"),
      absl::StrCat("training.device=", layout.device),
      "model.precision=AUTO"};
  if (layout.lora) {
    overrides.insert(overrides.end(),
                     {"model.lora.rank=4", "model.lora.alpha=8",
                      "model.lora.targets=[q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj, "
                      "down_proj]",
                      "model.peft.adapters=true", "model.peft.ssa=true"});
  }
  overrides.insert(overrides.end(), extra.begin(), extra.end());
  absl::StatusOr<config::JobConfig> job = launcher::LoadJobConfig(demo, overrides);
  EXPECT_TRUE(job.ok()) << job.status();
  return job.value_or(config::JobConfig());
}

// The trainer of `layout`'s job (with `extra` overrides) over `world`; `run_id` as in
// TrainerTestOptions.
absl::StatusOr<std::unique_ptr<Trainer>> CreateTrainer(const Layout& layout,
                                                       std::vector<std::string> extra = {},
                                                       MPI_Comm world = MPI_COMM_WORLD,
                                                       const std::string& run_id = "") {
  return Trainer::Create(SmallJob(layout, std::move(extra)), world,
                         {.separate_master = layout.separate_master, .run_id = run_id});
}

struct Tolerances {
  double loss, grad_norm, parameters;  // relative
};

// Each of `model`'s master weights is its slice of the one-process `whole` model's within `tol`.
// Sharded masters (ZeRO-1 beside a model copy) are not whole on any rank: their f32 CPU model copy
// is, the masters exactly.
void ExpectSlicesOf(models::LlamaModel& whole, models::LlamaModel& model, double tol) {
  const ParameterSet& params = model.parameters();
  for (const ParameterSet::Entry& e : params.entries()) {
    const models::ParameterShard shard = models::ShardOf(model.config(), model.layout(), e.name);
    const Tensor expected_slice =
        testing::SliceAlong(whole.parameters().value(e.name), shard.axis, shard.begin, shard.count);
    const Tensor masters = params.masters_whole() ? params.MasterOnHost(e.name) : e.value;
    EXPECT_TRUE(testing::AllClose(masters, expected_slice, tol, e.name));
  }
}

// Steps 2 and 3 of `resumed` (which resumed after step 1) are those of the uninterrupted `whole`
// run within the f32 tolerance.
void ExpectContinues(const Trainer& resumed, const Trainer& whole, const char* what) {
  ASSERT_EQ(resumed.start_step(), 1) << what;
  ASSERT_EQ(resumed.history().size(), 2u) << what;
  for (size_t i = 0; i < 2; ++i) {
    const double expected = whole.history()[i + 1].loss;
    EXPECT_NEAR(resumed.history()[i].loss, expected, testing::kF32RelTol * std::abs(expected))
        << what << ", step " << i + 2;
  }
}

// Trains `layout` and the one-process CPU run of the same job (with `extra` overrides; on every
// rank, over MPI_COMM_SELF): the layout's losses, gradient norms, evaluation loss and final master
// weights (each rank's slices) follow the one-process run's within `tol`, and the rank's memory
// plan is what it allocated.
void ExpectFollowsTheOneProcessRun(const Layout& layout, const Tolerances& tol,
                                   const std::vector<std::string>& extra = {}) {
  Layout one{"one", 1, 1, false};
  one.layers = layout.layers;
  one.hidden = layout.hidden;
  one.tied = layout.tied;
  one.lora = layout.lora;
  absl::StatusOr<std::unique_ptr<Trainer>> reference = CreateTrainer(one, extra, MPI_COMM_SELF);
  ASSERT_TRUE(reference.ok()) << reference.status();
  ASSERT_TRUE((*reference)->Run().ok());
  absl::StatusOr<std::unique_ptr<Trainer>> parallel = CreateTrainer(layout, extra);
  ASSERT_TRUE(parallel.ok()) << parallel.status();
  ASSERT_TRUE((*parallel)->Run().ok());
  models::LlamaModel& model = (*parallel)->model();
  EXPECT_EQ(model.context().is_cuda(), std::string(layout.device) == "CUDA");
  // A frozen base's fingerprint (which its checkpoints record) is the one process's on every
  // layout: each rank's covers the whole model, whichever part it holds.
  const std::optional<models::LlamaBase>& one_base = (*reference)->model().frozen_base();
  ASSERT_EQ(model.frozen_base().has_value(), one_base.has_value());
  if (one_base.has_value()) {
    EXPECT_EQ(model.frozen_base()->fingerprint, one_base->fingerprint);
  }

  const std::vector<StepStats>& expected = (*reference)->history();
  const std::vector<StepStats>& got = (*parallel)->history();
  ASSERT_EQ(got.size(), expected.size());
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_NEAR(got[i].loss, expected[i].loss, tol.loss * std::abs(expected[i].loss))
        << "step " << i + 1;
    EXPECT_NEAR(got[i].grad_norm, expected[i].grad_norm, tol.grad_norm * expected[i].grad_norm)
        << "step " << i + 1;
  }
  // The SSA temperature statistics cover every head and token of the step's last micro-batch
  // (each tensor rank holds its heads, each context rank its tokens, each stage its layers), as
  // in one process. With data parallelism the last micro-batch holds other rows.
  if (layout.dp == 1) {
    const auto near = [](double a, double b) {
      return std::abs(a - b) <=
             testing::kMergedTemperatureRelTol * std::abs(b) + testing::kMergedTemperatureAbsTol;
    };
    for (size_t i = 0; i < got.size(); ++i) {
      ASSERT_FALSE(expected[i].temperatures.empty()) << "step " << i + 1;
      ASSERT_EQ(got[i].temperatures.size(), expected[i].temperatures.size()) << "step " << i + 1;
      for (size_t l = 0; l < got[i].temperatures.size(); ++l) {
        const ssa::TemperatureStatistics& g = got[i].temperatures[l];
        const ssa::TemperatureStatistics& e = expected[i].temperatures[l];
        for (const auto& [gs, es] : {std::pair{&g.query, &e.query}, {&g.value, &e.value}}) {
          EXPECT_TRUE(near(gs->mean, es->mean) && near(gs->std, es->std) &&
                      near(gs->min, es->min) && near(gs->max, es->max))
              << "step " << i + 1 << " layer " << l << ": mean " << gs->mean << " vs " << es->mean
              << ", std " << gs->std << " vs " << es->std;
        }
        ASSERT_EQ(g.sigma_alpha.size(), e.sigma_alpha.size()) << "layer " << l;
        for (size_t h = 0; h < g.sigma_alpha.size(); ++h) {
          EXPECT_TRUE(near(g.sigma_alpha[h], e.sigma_alpha[h])) << "layer " << l << " head " << h;
        }
      }
    }
  }
  // The evaluation at the last step (the vocab-parallel loss).
  ASSERT_EQ((*parallel)->evaluations().size(), 1u);
  const double expected_eval = (*reference)->evaluations().front().loss;
  EXPECT_NEAR((*parallel)->evaluations().front().loss, expected_eval, tol.loss * expected_eval);
  // The same labelled tokens, and the same argmax predictions but for a near-tie that rounding may
  // flip (the nearly untrained model gets few right: a layout that counted each right one twice,
  // or not at all, still shows when it gets 2 or more).
  const inference::EvalStats& got_eval = (*parallel)->evaluations().front();
  const inference::EvalStats& expected_eval_stats = (*reference)->evaluations().front();
  EXPECT_EQ(got_eval.labelled_tokens, expected_eval_stats.labelled_tokens);
  EXPECT_NEAR(got_eval.correct_tokens, expected_eval_stats.correct_tokens, 1);
  // This rank's memory plan is what it allocated.
  const models::MemoryPlan plan = (*parallel)->MemoryPlanOf((*parallel)->TensorParallelRank(),
                                                            (*parallel)->PipelineParallelRank());
  const models::LlamaModel::BufferBytes allocated = model.AllocatedBufferBytes();
  EXPECT_EQ(plan.activations, allocated.activations);
  EXPECT_EQ(plan.logits, allocated.logits);
  EXPECT_EQ(plan.backward_scratch, allocated.backward_scratch);
  EXPECT_EQ(plan.parameters,
            model.parameters().NumElements() * static_cast<int64_t>(DTypeSize(model.dtype())));
  EXPECT_EQ(plan.optimizer_state, (*parallel)->OptimizerStateBytes());
  EXPECT_EQ(plan.master_weights, (*parallel)->MasterWeightBytes());
  if (layout.separate_master) {
    EXPECT_GT(plan.master_weights, 0);
  }
  int64_t gradient_bytes = 0;  // the padded gradient buffers, and ZeRO-1's reduced shards [S]
  for (int g = 0; g < kNumParamGroups; ++g) {
    const Tensor& padded = model.parameters().padded_grads(static_cast<ParamGroup>(g));
    if (padded.defined()) gradient_bytes += static_cast<int64_t>(padded.nbytes());
  }
  if (layout.distributed_optimizer && layout.dp * layout.cp > 1) {
    gradient_bytes += (*parallel)->OptimizerStateBytes() / 2;  // a shard per moment pair
  }
  EXPECT_EQ(plan.gradients, gradient_bytes);
  ExpectSlicesOf((*reference)->model(), model, tol.parameters);
}

// The demo model with SSA, started from a checkpoint with non-zero temperatures (random read-outs
// and alphas), trained 3 steps on the same global batch; the one-process reference runs on every
// rank over MPI_COMM_SELF, and each rank compares its slices of the final parameters.
class ParallelTraining : public ::testing::TestWithParam<Layout> {};

TEST_P(ParallelTraining, EqualsOneProcess) {
  const Layout layout = GetParam();
  if (layout.world() != WorldSize()) {
    GTEST_SKIP() << layout.name << " needs " << layout.world() << " ranks";
  }
  ExpectFollowsTheOneProcessRun(
      layout, {testing::kF32RelTol, testing::kF32ReducedGradNormRelTol, testing::kF32RelTol});
}

// Fine-tuning samples (the SFT example's, prepared by rank 0) packed whole into rows with a loss
// mask and document masking, under a context-parallel layout of this world size (each rank holds
// chunks of rows whose documents, padding and masked labels straddle the chunk boundaries).
TEST(ParallelTraining, PackedFineTuningSamplesEqualOneProcess) {
  const std::string prefix = ::testing::TempDir() + "/parallel_training_sft/copy_digits";
  int prepared_ok = 1;  // rank 0's result, shared so that no rank waits for a failed one
  if (WorldRank() == 0) {
    const absl::StatusOr<data::PreparedSamples> prepared = data::PrepareJsonlSamples(
        std::string(KELVIN_FIXTURES_DIR) + "/sft/copy_digits.jsonl", prefix);
    EXPECT_TRUE(prepared.ok()) << prepared.status();
    prepared_ok = prepared.ok() ? 1 : 0;
  }
  MPI_Bcast(&prepared_ok, 1, MPI_INT, 0, MPI_COMM_WORLD);
  ASSERT_EQ(prepared_ok, 1);
  const std::vector<std::string> sft = {
      "data.megatron.path_prefix=\"" + prefix + "\"",
      "data.megatron.loss_mask_path_prefix=\"" + prefix + "_loss_mask\"", "data.packing=DOCUMENTS",
      "data.document_masking=true", "data.eval_fraction=0.05"};
  Layout layout{"CP2", 1, 1, false};
  layout.cp = 2;
  if (WorldSize() == 4) layout = Layout{"TP2_SPxCP2", 2, 1, true};
  if (WorldSize() == 8) layout = Layout{"TP2_SPxCP2xDP2", 2, 2, true};
  if (WorldSize() >= 4) layout.cp = 2;
  ASSERT_EQ(layout.world(), WorldSize()) << layout.name;
  ExpectFollowsTheOneProcessRun(
      layout, {testing::kF32RelTol, testing::kF32ReducedGradNormRelTol, testing::kF32RelTol}, sft);
}

// A token file of documents whose lengths, cycled, meet the context-parallel chunks of a 112-token
// row in every way (14 tokens per chunk at CP 4, 28 at CP 2): a single token, shorter than a chunk,
// exactly a chunk, one more than a chunk, spanning several chunks, and longer than the row (packing
// keeps its first 112 tokens). Each ends with the separator 0; ids 1..250 at random. Written by
// rank 0; everyone waits.
std::string WriteDocumentsAcrossChunks() {
  const std::string path = ::testing::TempDir() + "/parallel_training_documents.i32";
  if (WorldRank() == 0) {
    constexpr int64_t kLengths[] = {1, 5, 13, 14, 15, 27, 29, 60, 130, 3, 41, 112, 2, 90};
    std::mt19937 rng(29);
    std::vector<int32_t> tokens;
    for (int repeat = 0; repeat < 12; ++repeat) {
      for (const int64_t length : kLengths) {
        for (int64_t i = 0; i + 1 < length; ++i)
          tokens.push_back(1 + static_cast<int32_t>(rng() % 250));
        tokens.push_back(0);
      }
    }
    EXPECT_TRUE(data::WriteTokenFile(path, tokens, data::TokenType::kInt32).ok());
  }
  MPI_Barrier(MPI_COMM_WORLD);
  return path;
}

// Documents packed whole with document masking under context parallelism of 2 or 4 (4 ranks: CP4
// alone; 8 ranks: CP4 under TP2 with sequence parallelism): each rank's two chunks of a row cut
// through documents, and a row's documents and padding are spread over the ranks. The loss of a
// step is the sum of -log p over the global batch's labelled tokens divided by their count, on one
// rank as on many: the losses, gradient norms and parameters equal the one-process run's. A wrong
// mask at a chunk boundary, or a document's tokens counted on two ranks, changes the loss.
TEST(ParallelTraining, PackedDocumentsAcrossContextChunksEqualOneProcess) {
  const std::vector<std::string> documents = {
      "data.token_file.path=\"" + WriteDocumentsAcrossChunks() + "\"",
      "data.token_file.document_separator_token=0", "data.packing=DOCUMENTS",
      "data.document_masking=true", "data.eval_fraction=0.05"};
  Layout layout{"CP2", 1, 1, false};
  layout.cp = 2;
  if (WorldSize() == 4) layout = Layout{"CP4", 1, 1, false};
  if (WorldSize() == 8) layout = Layout{"TP2_SPxCP4", 2, 1, true};
  if (WorldSize() >= 4) layout.cp = 4;
  ASSERT_EQ(layout.world(), WorldSize()) << layout.name;
  ExpectFollowsTheOneProcessRun(
      layout, {testing::kF32RelTol, testing::kF32ReducedGradNormRelTol, testing::kF32RelTol},
      documents);
}

// The layout of this world size that exercises most: sequence parallelism and, with 4 ranks,
// context parallelism with the distributed optimizer's state sharded over it, with 8 pipeline
// stages and data parallelism too.
Layout CheckpointLayout() {
  if (WorldSize() == 2) return Layout{"TP2_SP", 2, 1, true};
  if (WorldSize() == 4) {  // ZeRO-1 over the context-parallel ranks, the f32 masters sharded
    return Layout{.name = "TP2_SPxCP2_ZeRO1_separate_masters",
                  .tp = 2,
                  .dp = 1,
                  .sequence_parallel = true,
                  .distributed_optimizer = true,
                  .cp = 2,
                  .separate_master = true};
  }
  return Layout{"TP2_SPxPP2xDP2_ZeRO1", 2, 2, true, true, 2};
}

// A frozen base (the SSA parameters and norms train, model.peft) under ZeRO-1 at this world size,
// the masters sharded with 4 ranks: the one-process run's losses and parameters (the frozen ones
// held, not updated), and the plan what was allocated (masters, gradients and moments of the
// trainable parameters only).
TEST(ParallelTraining, AFrozenBaseEqualsOneProcess) {
  Layout layout{"DP2_ZeRO1", 1, 2, false, true};
  if (WorldSize() == 4) {
    layout = Layout{.name = "TP2_SPxDP2_ZeRO1_separate_masters",
                    .tp = 2,
                    .dp = 2,
                    .sequence_parallel = true,
                    .distributed_optimizer = true,
                    .separate_master = true};
  }
  if (WorldSize() == 8) layout = Layout{"TP2_SPxPP2xDP2_ZeRO1", 2, 2, true, true, 2};
  ExpectFollowsTheOneProcessRun(
      layout, {testing::kF32RelTol, testing::kF32ReducedGradNormRelTol, testing::kF32RelTol},
      {"model.peft.ssa=true", "model.peft.norms=true"});
}

// LoRA adapters and SSA on a frozen base: TP2 (the column-parallel adapters' A and the row-parallel
// ones' B summed over the ranks), CP2 x DP2 with ZeRO-1, and TP2+SP x PP2 x DP2 with ZeRO-1 follow
// the one-process run (B, from zero, within kF32AdamFromZeroRelTol); with LoRA dropout too, every
// layout drawing the one process's masks (a row-parallel input's features counted from its slice,
// context-parallel tokens by their place in the row, data-parallel rows by their sample).
TEST(ParallelTraining, LoraAdaptersEqualOneProcess) {
  Layout layout{.name = "TP2", .tp = 2, .dp = 1, .sequence_parallel = false, .lora = true};
  if (WorldSize() == 4) {
    layout = Layout{.name = "CP2xDP2_ZeRO1",
                    .tp = 1,
                    .dp = 2,
                    .sequence_parallel = false,
                    .distributed_optimizer = true,
                    .cp = 2,
                    .lora = true};
  }
  if (WorldSize() == 8) {
    layout = Layout{.name = "TP2_SPxPP2xDP2_ZeRO1",
                    .tp = 2,
                    .dp = 2,
                    .sequence_parallel = true,
                    .distributed_optimizer = true,
                    .pp = 2,
                    .lora = true};
  }
  const Tolerances tol{testing::kF32RelTol, testing::kF32ReducedGradNormRelTol,
                       testing::kF32AdamFromZeroRelTol};
  ExpectFollowsTheOneProcessRun(layout, tol);
  ExpectFollowsTheOneProcessRun(layout, tol, {"model.lora.dropout=0.25"});
}

// The same layout under two schedules (or a's job with `a_extra` and b's with `b_extra`): identical
// losses, gradient norms and parameters.
void ExpectBitIdenticalRuns(const Layout& a, const Layout& b, std::vector<std::string> a_extra = {},
                            std::vector<std::string> b_extra = {}) {
  absl::StatusOr<std::unique_ptr<Trainer>> first = CreateTrainer(a, std::move(a_extra));
  ASSERT_TRUE(first.ok()) << first.status();
  ASSERT_TRUE((*first)->Run().ok());
  absl::StatusOr<std::unique_ptr<Trainer>> second = CreateTrainer(b, std::move(b_extra));
  ASSERT_TRUE(second.ok()) << second.status();
  ASSERT_TRUE((*second)->Run().ok());
  ASSERT_EQ((*first)->history().size(), (*second)->history().size());
  for (size_t i = 0; i < (*first)->history().size(); ++i) {
    EXPECT_EQ((*first)->history()[i].loss, (*second)->history()[i].loss)
        << a.name << " vs " << b.name << ", step " << i + 1;
    EXPECT_EQ((*first)->history()[i].grad_norm, (*second)->history()[i].grad_norm)
        << a.name << " vs " << b.name << ", step " << i + 1;
  }
  EXPECT_EQ((*first)->evaluations().front().loss, (*second)->evaluations().front().loss);
  for (const ParameterSet::Entry& e : (*first)->model().parameters().entries()) {
    EXPECT_TRUE(
        testing::BitIdentical((*second)->model().parameters().value(e.name), e.value, e.name))
        << a.name << " vs " << b.name;
  }
}

TEST(PipelineSchedules, GiveBitIdenticalRuns) {
  const char* afab = "ALL_FORWARD_ALL_BACKWARD";
  if (WorldSize() == 2) {
    ExpectBitIdenticalRuns({"PP2_1F1B", 1, 1, false, false, 2},
                           {"PP2_AFAB", 1, 1, false, false, 2, 1, afab});
  } else if (WorldSize() == 4) {
    ExpectBitIdenticalRuns({"PP4_1F1B", 1, 1, false, false, 4},
                           {"PP4_AFAB", 1, 1, false, false, 4, 1, afab});
    ExpectBitIdenticalRuns({"PP4_V2_interleaved", 1, 1, false, false, 4, 2, "INTERLEAVED_1F1B", 8},
                           {"PP4_V2_AFAB", 1, 1, false, false, 4, 2, afab, 8});
  } else {
    ExpectBitIdenticalRuns({"TP2xPP2xDP2_1F1B", 2, 2, false, false, 2},
                           {"TP2xPP2xDP2_AFAB", 2, 2, false, false, 2, 1, afab});
  }
}

// Each layer's gradients reduced in a bucket of its own as soon as the step's last backward
// finished them, and with ZeRO-1 each bucket's updated parameters gathered while the next forward
// reads the layers before it, against the same buckets reduced after the backward and gathered
// inside the optimizer step: the same bits. The layouts cover all-reduce and ZeRO-1's
// reduce-scatter and gather (with the masters whole, and sharded beside a model copy),
// context-parallel replicas, sequence-parallel norms (summed over TP as each layer finishes), tied
// embeddings over stages (summed last, the last stage's LM head), interleaved chunks, and 2 to 4
// micro-batches per step.
class OverlappedCommunication : public ::testing::TestWithParam<Layout> {};

TEST_P(OverlappedCommunication, EqualsTheReductionAfterTheBackwardAndTheGatherInTheStep) {
  const Layout layout = GetParam();
  if (layout.world() != WorldSize()) {
    GTEST_SKIP() << layout.name << " needs " << layout.world() << " ranks";
  }
  // One unit per bucket; on two ranks also several units per bucket (more ranks are slow on the
  // test machine's two cores).
  std::vector<const char*> buckets = {"1"};
  if (WorldSize() == 2) buckets.push_back("300000");
  for (const char* bucket : buckets) {
    SCOPED_TRACE(absl::StrCat("grad_bucket_elements ", bucket));
    const std::string size = absl::StrCat("parallel.grad_bucket_elements=", bucket);
    ExpectBitIdenticalRuns(
        layout, layout,
        {"parallel.overlap_grad_reduce=true", "parallel.overlap_param_gather=true", size},
        {"parallel.overlap_grad_reduce=false", "parallel.overlap_param_gather=false", size});
  }
}

INSTANTIATE_TEST_SUITE_P(
    Layouts, OverlappedCommunication,
    ::testing::Values(Layout{"DP2", 1, 2, false}, Layout{"DP2_ZeRO1", 1, 2, false, true},
                      kDp2ZeroOneSeparateMasters,
                      Layout{.name = "CP2", .tp = 1, .dp = 1, .sequence_parallel = false, .cp = 2},
                      Layout{"TP2_SPxDP2_ZeRO1", 2, 2, true, true},
                      Layout{.name = "PP2xDP2_ZeRO1_tied_separate_masters",
                             .tp = 1,
                             .dp = 2,
                             .sequence_parallel = false,
                             .distributed_optimizer = true,
                             .pp = 2,
                             .tied = true,
                             .separate_master = true},
                      Layout{"TP2xPP2_V2xDP2_ZeRO1", 2, 2, false, true, 2, 2, "INTERLEAVED_1F1B",
                             8}),
    [](const ::testing::TestParamInfo<Layout>& info) { return std::string(info.param.name); });

// `kelvin eval JOB`'s forward-only model on a layout scores the held-out set exactly as the
// trainer's own model does at the same weights (one loss path, held-out batches split alike), and
// allocates what its memory plan says on every rank: the weights and one micro-batch's buffers,
// no gradients, masters or optimizer state.
class ForwardOnlyEvaluation : public ::testing::TestWithParam<Layout> {};

TEST_P(ForwardOnlyEvaluation, ScoresAsTheTrainerAndAllocatesItsPlan) {
  const Layout& layout = GetParam();
  if (WorldSize() != layout.world()) {
    GTEST_SKIP() << layout.name << " needs " << layout.world() << " ranks";
  }
  absl::StatusOr<std::unique_ptr<Trainer>> trainer = CreateTrainer(layout);
  ASSERT_TRUE(trainer.ok()) << trainer.status();
  const absl::StatusOr<inference::EvalStats> trained = (*trainer)->Evaluate(0);
  ASSERT_TRUE(trained.ok()) << trained.status();
  const config::JobConfig job = SmallJob(layout);
  const absl::StatusOr<models::LlamaConfig> arch = ResolveModelArchitecture(job.model());
  ASSERT_TRUE(arch.ok()) << arch.status();
  absl::StatusOr<std::unique_ptr<inference::JobForwardModel>> forward =
      inference::JobForwardModel::Build(job, *arch, MPI_COMM_WORLD);
  ASSERT_TRUE(forward.ok()) << forward.status();
  absl::StatusOr<DataSources> data = BuildDataSources(job, *arch);
  ASSERT_TRUE(data.ok()) << data.status();
  inference::HeldOutEvaluation evaluation(job, (*forward)->scored(), *data);
  const absl::StatusOr<inference::EvalStats> scored = evaluation.Evaluate(0);
  ASSERT_TRUE(scored.ok()) << scored.status();
  EXPECT_EQ(scored->loss, trained->loss);
  EXPECT_EQ(scored->labelled_tokens, trained->labelled_tokens);
  EXPECT_EQ(scored->correct_tokens, trained->correct_tokens);
  EXPECT_EQ(scored->retrieval_accuracy, trained->retrieval_accuracy);

  const models::LlamaModel& model = (*forward)->model();
  const models::MemoryPlan& plan = (*forward)->memory_plan();
  const models::LlamaModel::BufferBytes allocated = model.AllocatedBufferBytes();
  EXPECT_EQ(plan.activations, allocated.activations);
  EXPECT_EQ(plan.logits, allocated.logits);
  EXPECT_EQ(plan.backward_scratch, allocated.backward_scratch);
  EXPECT_EQ(plan.parameters,
            model.parameters().NumElements() * static_cast<int64_t>(DTypeSize(model.dtype())));
  EXPECT_TRUE(model.parameters().forward_only());
  EXPECT_EQ(plan.gradients + plan.master_weights + plan.optimizer_state, 0);
}

INSTANTIATE_TEST_SUITE_P(
    Layouts, ForwardOnlyEvaluation,
    ::testing::Values(Layout{"TP2_SP", 2, 1, true}, Layout{"DP2_ZeRO1", 1, 2, false, true},
                      Layout{.name = "CP2", .tp = 1, .dp = 1, .sequence_parallel = false, .cp = 2},
                      Layout{.name = "PP2_tied",
                             .tp = 1,
                             .dp = 1,
                             .sequence_parallel = false,
                             .pp = 2,
                             .tied = true},
                      Layout{"TP2xDP2_ZeRO1", 2, 2, false, true},
                      Layout{"TP2xPP2_V2xDP2_ZeRO1", 2, 2, false, true, 2, 2, "INTERLEAVED_1F1B",
                             8}),
    [](const ::testing::TestParamInfo<Layout>& info) { return std::string(info.param.name); });

// The part files of `checkpoint` hold what kelvin plan says a checkpoint of the job writes: all of
// them the whole model's weights and moments, the largest its largest part (headers aside; ZeRO-1
// shards round up).
void ExpectPlannedCheckpointSize(const config::JobConfig& job, const models::LlamaConfig& arch,
                                 const std::string& checkpoint) {
  const absl::StatusOr<JobLayout> layout = PlanJobLayout(job, arch, WorldSize(), false);
  ASSERT_TRUE(layout.ok()) << layout.status();
  const CheckpointBytes planned = PlanCheckpointBytes(arch, *layout);
  constexpr int64_t kHeader = 64 << 10;  // generous for the JSON header of a part
  int64_t total = 0, largest = 0;
  for (int r = 0; r < WorldSize(); ++r) {
    const auto bytes = static_cast<int64_t>(std::filesystem::file_size(
        std::filesystem::path(checkpoint) / PartFileName(r, WorldSize())));
    total += bytes;
    largest = std::max(largest, bytes);
  }
  EXPECT_GE(total, planned.total);
  EXPECT_LE(total, planned.total + WorldSize() * kHeader);
  EXPECT_GE(largest, planned.largest_part);
  EXPECT_LE(largest, planned.largest_part + planned.largest_part / 100 + kHeader);
}

// The Hugging Face directories `a` and `b` hold the same tensors with the same values.
void ExpectSameTensors(const std::string& a, const std::string& b) {
  const absl::StatusOr<io::HfCheckpoint> first = io::HfCheckpoint::Open(a);
  const absl::StatusOr<io::HfCheckpoint> second = io::HfCheckpoint::Open(b);
  ASSERT_TRUE(first.ok()) << first.status();
  ASSERT_TRUE(second.ok()) << second.status();
  ASSERT_EQ(first->TensorNames(), second->TensorNames());
  for (const std::string& name : first->TensorNames()) {
    const absl::StatusOr<Tensor> x = first->Read(name, DType::kF32);
    const absl::StatusOr<Tensor> y = second->Read(name, DType::kF32);
    ASSERT_TRUE(x.ok() && y.ok()) << name;
    EXPECT_TRUE(testing::BitIdentical(*x, *y, name));
  }
}

// Another layout of this world size that resumes CheckpointLayout's checkpoints: other tensor,
// pipeline and data-parallel splits, ZeRO-1 shards of another size, replicated KV heads (TP4).
Layout ReshardedLayout() {
  if (WorldSize() == 2) {  // the f32 masters restored into their shards
    return kDp2ZeroOneSeparateMasters;
  }
  if (WorldSize() == 4) return Layout{"PP2xDP2_ZeRO1", 1, 2, false, true, 2};
  return Layout{"TP4xDP2", 4, 2, false};
}

// A parallel run stopped by a preemption signal that reaches one rank only, and resumed from its
// checkpoint, equals the uninterrupted run bit for bit; resumed under another layout, or in one
// process, it follows it within the f32 tolerance; kelvin convert and kelvin eval under the layout
// give back its weights and its evaluation.
TEST(ParallelCheckpoint, PreemptedOnOneRankResumesBitForBitAndUnderOtherLayouts) {
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  const Layout layout = CheckpointLayout();
  absl::StatusOr<std::unique_ptr<Trainer>> whole = CreateTrainer(layout);
  ASSERT_TRUE(whole.ok()) << whole.status();
  ASSERT_TRUE((*whole)->Run().ok());

  const std::string dir = ::testing::TempDir() + "/parallel_checkpoint";
  if (rank == 0) std::filesystem::remove_all(dir);
  MPI_Barrier(MPI_COMM_WORLD);
  const config::JobConfig job = SmallJob(layout, {"checkpoint.dir=\"" + dir + "\""});
  absl::StatusOr<std::unique_ptr<Trainer>> first = Trainer::Create(
      job, MPI_COMM_WORLD, {.separate_master = layout.separate_master, .run_id = ""});
  ASSERT_TRUE(first.ok()) << first.status();
  InstallPreemptionHandlers();
  if (rank == WorldSize() - 1) std::raise(SIGUSR1);  // the signal reaches one rank only
  const absl::Status stopped = (*first)->Run();
  ClearPreemption();
  EXPECT_EQ(stopped.code(), absl::StatusCode::kCancelled) << stopped;
  ASSERT_EQ((*first)->history().size(), 1u);
  // Copies of the step-1 checkpoint for the resumes under other layouts below: one shared, one
  // per rank for its one-process run.
  const std::string step1 = dir + "_step1", own = absl::StrCat(dir, "_step1_rank", rank);
  const auto copy_step1 = [&](const std::string& to) {
    std::filesystem::remove_all(to);
    std::filesystem::create_directories(to);
    std::filesystem::copy(dir + "/step_00000001", to + "/step_00000001",
                          std::filesystem::copy_options::recursive);
  };
  if (rank == 0) {
    copy_step1(step1);
    ExpectPlannedCheckpointSize(job, (*first)->model().config(), step1 + "/step_00000001");
  }
  copy_step1(own);
  MPI_Barrier(MPI_COMM_WORLD);

  absl::StatusOr<std::unique_ptr<Trainer>> second = Trainer::Create(
      job, MPI_COMM_WORLD, {.separate_master = layout.separate_master, .run_id = ""});
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_EQ((*second)->start_step(), 1);
  ASSERT_TRUE((*second)->Run().ok());
  ASSERT_EQ((*second)->history().size(), 2u);
  for (size_t i = 0; i < 2; ++i) {
    EXPECT_EQ((*second)->history()[i].loss, (*whole)->history()[i + 1].loss) << "step " << i + 2;
  }
  for (const ParameterSet::Entry& e : (*whole)->model().parameters().entries()) {
    EXPECT_TRUE(
        testing::BitIdentical((*second)->model().parameters().value(e.name), e.value, e.name));
  }

  // Another layout resumes the step-1 checkpoint, its pieces resharded, and so does one process
  // (on every rank, over MPI_COMM_SELF): both continue as the uninterrupted run within the f32
  // tolerance, and the other layout's weights are slices of the one process's.
  const Layout resharded_layout = ReshardedLayout();
  absl::StatusOr<std::unique_ptr<Trainer>> resharded =
      CreateTrainer(resharded_layout, {"checkpoint.dir=\"" + step1 + "\""});
  ASSERT_TRUE(resharded.ok()) << resharded.status();
  ASSERT_TRUE((*resharded)->Run().ok());
  ExpectContinues(**resharded, **whole, resharded_layout.name);
  absl::StatusOr<std::unique_ptr<Trainer>> alone =
      CreateTrainer({"one", 1, 1, false}, {"checkpoint.dir=\"" + own + "\""}, MPI_COMM_SELF);
  ASSERT_TRUE(alone.ok()) << alone.status();
  ASSERT_TRUE((*alone)->Run().ok());
  ExpectContinues(**alone, **whole, "one process");
  ExpectSlicesOf((*alone)->model(), (*resharded)->model(), testing::kF32RelTol);
  ExpectSlicesOf((*alone)->model(), (*whole)->model(), testing::kF32RelTol);
  std::filesystem::remove_all(own);

  // Ranks that see different newest checkpoints (a shared filesystem showing a save late) all
  // refuse to resume: rank 0 sees the checkpoints of step1, the others an empty directory.
  const std::string seen = rank == 0 ? step1 : absl::StrCat(dir, "_empty_rank", rank);
  if (rank != 0) std::filesystem::create_directories(seen);
  absl::StatusOr<std::unique_ptr<Trainer>> split_view =
      CreateTrainer(layout, {"checkpoint.dir=\"" + seen + "\""});
  ASSERT_EQ(split_view.ok(), WorldSize() == 1);
  if (WorldSize() > 1) {
    EXPECT_NE(std::string(split_view.status().message())
                  .find("the ranks found different checkpoints in checkpoint.dir=\"" + seen +
                        "\" (steps -1 to 3; -1: none)"),
              std::string::npos)
        << split_view.status();
  }
  if (rank != 0) std::filesystem::remove_all(seen);

  // kelvin convert (one process, rank 0): the Hugging Face files assembled from every rank's
  // pieces load back, sharded, to the same weights; kelvin eval under the layout scores the
  // checkpoint as the run's last evaluation did.
  const std::string hf = dir + "_hf";
  if (rank == 0) {
    const absl::StatusOr<int64_t> converted = launcher::ConvertCheckpointToHf(job, hf);
    EXPECT_TRUE(converted.ok()) << converted.status();  // no ASSERT: the others wait below
    EXPECT_EQ(converted.value_or(-1), 3);
  }
  MPI_Barrier(MPI_COMM_WORLD);  // the files are written
  // The trainer's own export of the same step (its masters gathered over the tensor, pipeline and,
  // when sharded, data-parallel ranks) holds the same tensors, bit for bit.
  const std::string exported = dir + "_exported";
  ASSERT_TRUE((*second)->ExportHf(exported).ok());
  MPI_Barrier(MPI_COMM_WORLD);
  if (rank == 0) ExpectSameTensors(exported, hf);
  absl::StatusOr<std::unique_ptr<Trainer>> loaded =
      CreateTrainer(layout, {"model.hf_dir=\"" + hf + "\""});
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  for (const ParameterSet::Entry& e : (*second)->model().parameters().entries()) {
    EXPECT_TRUE(
        testing::BitIdentical((*loaded)->model().parameters().value(e.name), e.value, e.name));
  }
  const absl::StatusOr<inference::EvalStats> eval = inference::EvaluateJob(job);
  ASSERT_TRUE(eval.ok()) << eval.status();
  EXPECT_EQ(eval->loss, (*second)->evaluations().back().loss);
  MPI_Barrier(MPI_COMM_WORLD);
  if (rank == 0) {
    std::filesystem::remove_all(dir);
    std::filesystem::remove_all(hf);
    std::filesystem::remove_all(exported);
    std::filesystem::remove_all(step1);
  }
}

// A layout saving every step in the background (checkpoint.async_save: each rank's part written on
// a thread, committed once every rank's is) writes the same files as saving in turn.
TEST(ParallelCheckpoint, BackgroundSavesWriteTheSameFilesAsSavesInTurn) {
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  const Layout layout = CheckpointLayout();
  const std::string base = ::testing::TempDir() + "/parallel_async_checkpoint";
  const std::string dirs[2] = {base + "_in_turn", base + "_background"};
  for (int async = 0; async < 2; ++async) {
    if (rank == 0) std::filesystem::remove_all(dirs[async]);
    MPI_Barrier(MPI_COMM_WORLD);
    absl::StatusOr<std::unique_ptr<Trainer>> trainer = CreateTrainer(
        layout,
        {"checkpoint.dir=\"" + dirs[async] + "\"", "checkpoint.interval_steps=1",
         "checkpoint.keep_last=0",
         absl::StrCat("checkpoint.async_save=", async ? "true" : "false")},
        MPI_COMM_WORLD, "0123456789abcdef0123456789abcdef");  // one identity: same bytes
    ASSERT_TRUE(trainer.ok()) << trainer.status();
    ASSERT_TRUE((*trainer)->Run().ok());
    const std::vector<SavedCheckpoint>& saved = (*trainer)->saved_checkpoints();
    ASSERT_EQ(saved.size(), 3u);
    for (size_t i = 0; i < 3; ++i) {  // the last one, waited for, in turn
      EXPECT_EQ(saved[i].written_in_background, async == 1 && i < 2) << i;
    }
  }
  MPI_Barrier(MPI_COMM_WORLD);
  if (rank == 0) {
    for (int step = 1; step <= 3; ++step) {
      const std::string name = absl::StrFormat("step_%08d", step);
      std::vector<std::string> files = {"checkpoint.json"};
      for (int r = 0; r < WorldSize(); ++r) files.push_back(PartFileName(r, WorldSize()));
      for (const std::string& file : files) {
        const std::filesystem::path a = std::filesystem::path(dirs[0]) / name / file;
        const std::filesystem::path b = std::filesystem::path(dirs[1]) / name / file;
        ASSERT_TRUE(std::filesystem::exists(b)) << b;
        EXPECT_TRUE(testing::FileBytes(a) == testing::FileBytes(b)) << b;
      }
    }
    for (const std::string& dir : dirs) std::filesystem::remove_all(dir);
  }
  MPI_Barrier(MPI_COMM_WORLD);
}

// Tied embeddings over two pipeline stages: the first stage writes the embedding, the last stage's
// copy is restored but not written; one process resumes the step-1 checkpoint and continues as the
// uninterrupted one-process run, and its weights are the pipeline run's.
TEST(ParallelCheckpoint, TiedEmbeddingsOverPipelineStagesResumeInOneProcess) {
  if (WorldSize() != 2) GTEST_SKIP() << "a two-stage pipeline runs on 2 ranks";
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  Layout pipeline{"PP2_tied", 1, 1, false, false, 2};
  pipeline.tied = true;
  Layout one{"one_tied", 1, 1, false};
  one.tied = true;
  absl::StatusOr<std::unique_ptr<Trainer>> reference = CreateTrainer(one, {}, MPI_COMM_SELF);
  ASSERT_TRUE(reference.ok()) << reference.status();
  ASSERT_TRUE((*reference)->Run().ok());
  ASSERT_TRUE((*reference)->model().config().tie_word_embeddings);

  const std::string dir = ::testing::TempDir() + "/parallel_checkpoint_tied";
  if (rank == 0) std::filesystem::remove_all(dir);
  MPI_Barrier(MPI_COMM_WORLD);
  absl::StatusOr<std::unique_ptr<Trainer>> staged =
      CreateTrainer(pipeline, {"checkpoint.dir=\"" + dir + "\"", "checkpoint.interval_steps=1"});
  ASSERT_TRUE(staged.ok()) << staged.status();
  ASSERT_TRUE((*staged)->Run().ok());
  const std::string own = absl::StrCat(dir, "_step1_rank", rank);
  std::filesystem::remove_all(own);
  std::filesystem::create_directories(own);
  std::filesystem::copy(dir + "/step_00000001", own + "/step_00000001",
                        std::filesystem::copy_options::recursive);
  absl::StatusOr<std::unique_ptr<Trainer>> alone =
      CreateTrainer(one, {"checkpoint.dir=\"" + own + "\""}, MPI_COMM_SELF);
  ASSERT_TRUE(alone.ok()) << alone.status();
  ASSERT_TRUE((*alone)->Run().ok());
  ExpectContinues(**alone, **reference, "one process after PP2 with tied embeddings");
  ExpectSlicesOf((*alone)->model(), (*staged)->model(), testing::kF32RelTol);
  std::filesystem::remove_all(own);
  MPI_Barrier(MPI_COMM_WORLD);
  if (rank == 0) std::filesystem::remove_all(dir);
}

// Damage that one rank alone reads (its ZeRO-1 shard's bytes in its part file) is every rank's
// verdict: without checkpoint.skip_damaged every rank stops with that rank's message, naming the
// part; with it every rank sets the checkpoint aside and resumes from the one before (the ranks
// deciding apart left the others waiting for the one that set it aside, until the timeout).
TEST(ParallelCheckpoint, DamageOneRankSeesIsEveryRanksVerdict) {
  if (WorldSize() != 2) GTEST_SKIP() << "two ranks, each reading its own ZeRO-1 shard";
  const int rank = WorldRank();
  const std::string dir = ::testing::TempDir() + "/parallel_checkpoint_damaged_one_part";
  if (rank == 0) std::filesystem::remove_all(dir);
  MPI_Barrier(MPI_COMM_WORLD);
  const Layout layout{"DP2_ZeRO1", 1, 2, false, true};
  // A short collective timeout: ranks that decide apart wait seconds, not minutes, for each other.
  const std::vector<std::string> extra = {"checkpoint.dir=\"" + dir + "\"",
                                          "checkpoint.interval_steps=1",
                                          "parallel.collective_timeout_seconds=20"};
  absl::StatusOr<std::unique_ptr<Trainer>> first = CreateTrainer(layout, extra);
  ASSERT_TRUE(first.ok()) << first.status();
  ASSERT_TRUE((*first)->Run().ok());
  first->reset();
  const std::filesystem::path newest = std::filesystem::path(dir) / "step_00000003";
  const std::filesystem::path part = newest / PartFileName(1, 2);  // rank 1's shard alone
  if (rank == 0) {
    std::fstream file(part, std::ios::in | std::ios::out | std::ios::binary);
    file.seekp(-4, std::ios::end);  // the last piece's last element
    file.write("\xff\xff\xff\x7f", 4);
  }
  MPI_Barrier(MPI_COMM_WORLD);
  absl::StatusOr<std::unique_ptr<Trainer>> stopped = CreateTrainer(layout, extra);
  ASSERT_FALSE(stopped.ok());
  EXPECT_EQ(stopped.status().code(), absl::StatusCode::kDataLoss) << stopped.status();
  EXPECT_THAT(std::string(stopped.status().message()), ::testing::HasSubstr(part.string()));
  std::vector<std::string> skipping = extra;
  skipping.push_back("checkpoint.skip_damaged=true");
  absl::StatusOr<std::unique_ptr<Trainer>> resumed = CreateTrainer(layout, skipping);
  ASSERT_TRUE(resumed.ok()) << resumed.status();
  EXPECT_EQ((*resumed)->start_step(), 2);
  EXPECT_TRUE(std::filesystem::exists(newest.string() + ".damaged"));
  MPI_Barrier(MPI_COMM_WORLD);
  if (rank == 0) std::filesystem::remove_all(dir);
}

// On a GPU machine: TP2xPP2 with its 4 processes sharing one GPU (the MPI communicators stage the
// device tensors through host memory), in bf16 with f32 master weights, follows the f32
// one-process CPU run within bf16 tolerances.
TEST(ParallelTrainingCuda, Tp2Pp2SharingOneGpuFollowsTheCpuRun) {
  KELVIN_SKIP_WITHOUT_CUDA(Device::Cuda());
  if (WorldSize() != 4) GTEST_SKIP() << "TP2xPP2 needs 4 ranks";
  Layout layout{"TP2xPP2_cuda", 2, 1, false, false, 2};
  layout.hidden = 256;
  layout.device = "CUDA";
  ExpectFollowsTheOneProcessRun(
      layout, {testing::kBf16TrainingLossRelTol, testing::kBf16TrainingGradNormRelTol,
               testing::kBf16TrainedWeightRelTol});
}

INSTANTIATE_TEST_SUITE_P(
    Layouts, ParallelTraining,
    ::testing::Values(
        Layout{"TP2", 2, 1, false}, Layout{"TP2_SP", 2, 1, true}, Layout{"DP2", 1, 2, false},
        Layout{"DP2_ZeRO1", 1, 2, false, true}, Layout{"TP4", 4, 1, false},
        Layout{"TP2xDP2_ZeRO1", 2, 2, false, true}, Layout{"TP4_SP", 4, 1, true},
        Layout{"TP2xDP2", 2, 2, false}, Layout{"TP2_SPxDP2", 2, 2, true},
        Layout{"DP4", 1, 4, false}, Layout{"PP2_1F1B", 1, 1, false, false, 2},
        Layout{"PP4_V2_interleaved", 1, 1, false, false, 4, 2, "INTERLEAVED_1F1B", 8},
        Layout{"TP2xPP2", 2, 1, false, false, 2}, Layout{"TP2_SPxPP2", 2, 1, true, false, 2},
        Layout{"TP2_SPxPP2_recompute", 2, 1, true, false, 2, 1, "ONE_F_ONE_B", 4, true},
        Layout{"PP2xDP2_ZeRO1", 1, 2, false, true, 2}, Layout{"TP2xPP2xDP2", 2, 2, false, false, 2},
        kDp2ZeroOneSeparateMasters,
        Layout{.name = "TP2xDP2_ZeRO1_separate_masters",
               .tp = 2,
               .dp = 2,
               .sequence_parallel = false,
               .distributed_optimizer = true,
               .separate_master = true},
        // ... with tied embeddings over two stages (their gradients summed before the shards).
        Layout{.name = "PP2xDP2_ZeRO1_tied_separate_masters",
               .tp = 1,
               .dp = 2,
               .sequence_parallel = false,
               .distributed_optimizer = true,
               .pp = 2,
               .tied = true,
               .separate_master = true},
        // Context parallel: each rank 1/CP of every row's tokens, the keys all-gathered.
        Layout{.name = "CP2", .tp = 1, .dp = 1, .sequence_parallel = false, .cp = 2},
        Layout{.name = "CP4", .tp = 1, .dp = 1, .sequence_parallel = false, .cp = 4},
        Layout{.name = "CP2xDP2_ZeRO1",
               .tp = 1,
               .dp = 2,
               .sequence_parallel = false,
               .distributed_optimizer = true,
               .cp = 2},
        Layout{.name = "TP2_SPxCP2", .tp = 2, .dp = 1, .sequence_parallel = true, .cp = 2},
        Layout{.name = "CP2xPP2_recompute",
               .tp = 1,
               .dp = 1,
               .sequence_parallel = false,
               .pp = 2,
               .recompute = true,
               .cp = 2},
        Layout{
            .name = "TP2xCP2xPP2", .tp = 2, .dp = 1, .sequence_parallel = false, .pp = 2, .cp = 2}),
    [](const ::testing::TestParamInfo<Layout>& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace kelvin::training
