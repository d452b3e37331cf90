// The job's layout and memory plans, worked out from its config.
#include "training/job/job_plan.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "core/check.h"
#include "core/status.h"
#include "models/llama/llama_pipeline_stage.h"
#include "models/llama/llama_sharding.h"
#include "models/llama/model_flops.h"
#include "parallel/pipeline/pipeline_runner.h"
#include "parallel/pipeline/pipeline_schedule.h"
#include "training/job/job_setup.h"
#include "training/job/parallel_setup.h"

namespace kelvin::training {

int DataParallelOf(const config::ParallelConfig& p, int world_size) {
  const int model_parallel = p.tensor_parallel() * p.pipeline_parallel() * p.context_parallel();
  return p.data_parallel() > 0 ? p.data_parallel() : std::max(world_size / model_parallel, 1);
}

absl::StatusOr<parallel::GridSpec> GridSpecOf(const config::JobConfig& job,
                                              const models::LlamaConfig& arch, int world_size) {
  const config::ParallelConfig& p = job.parallel();
  const config::TrainingConfig& t = job.training();
  const int data_parallel = DataParallelOf(p, world_size);
  parallel::GridSpec spec;
  spec.world_size = world_size;
  spec.tensor_parallel = p.tensor_parallel();
  spec.context_parallel = p.context_parallel();
  spec.data_parallel = data_parallel;
  spec.pipeline_parallel = p.pipeline_parallel();
  spec.virtual_pipeline_stages = p.virtual_pipeline_stages();
  spec.sequence_parallel = p.sequence_parallel();
  spec.num_attention_heads = arch.num_attention_heads;
  spec.num_key_value_heads = arch.num_key_value_heads;
  spec.num_layers = arch.num_layers;
  spec.seq_length = t.seq_length();
  spec.micro_batch_size = t.micro_batch_size();
  spec.global_batch_size = t.global_batch_size();
  if (t.gradient_accumulation_steps() > 0) {
    spec.gradient_accumulation_steps = t.gradient_accumulation_steps();
  } else {  // derived: the global batch must split into whole passes of the data-parallel ranks
    const int64_t per_pass = t.micro_batch_size() * std::max(data_parallel, 1);
    const int model_parallel = p.tensor_parallel() * p.pipeline_parallel() * p.context_parallel();
    const bool whole_replicas = model_parallel > 0 && world_size % model_parallel == 0;
    if (whole_replicas && t.global_batch_size() % per_pass != 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "training.global_batch_size=", t.global_batch_size(), " does not split over ", world_size,
          " processes: their ", data_parallel, " data-parallel ranks (", world_size, " / tensor ",
          p.tensor_parallel(), " x context ", p.context_parallel(), " x pipeline ",
          p.pipeline_parallel(), ") x micro_batch_size ", t.micro_batch_size(), " = ", per_pass,
          " sequences per pass must divide it; use another process count, or change "
          "training.global_batch_size or micro_batch_size"));
    }
    spec.gradient_accumulation_steps = t.global_batch_size() / per_pass;
  }
  // A step's program (pipeline schedules list every micro-batch) stays small to build and run.
  constexpr int64_t kMaxMicroBatchesPerStep = 65536;
  if (spec.gradient_accumulation_steps > kMaxMicroBatchesPerStep) {
    return absl::InvalidArgumentError(
        absl::StrCat("training.global_batch_size=", t.global_batch_size(), " makes ",
                     spec.gradient_accumulation_steps, " micro-batches per step on each of the ",
                     data_parallel, " data-parallel ranks, more than ", kMaxMicroBatchesPerStep,
                     ": raise training.micro_batch_size, or lower the global batch"));
  }
  KELVIN_RETURN_IF_ERROR(parallel::ValidateGridSpec(spec));
  const int64_t tp = spec.tensor_parallel;
  for (const auto& [name, size] : {std::pair{"intermediate_size", arch.intermediate_size},
                                   std::pair{"vocab_size", arch.vocab_size}}) {
    if (size % tp != 0) {  // each tensor rank holds 1 / TP of the MLP and of the vocabulary
      return absl::InvalidArgumentError(absl::StrCat(
          "invalid parallel layout: tensor_parallel=", tp, " does not divide the model's ", name,
          "=", size, " (each tensor-parallel rank holds an equal slice of it)"));
    }
  }
  return spec;
}

absl::StatusOr<JobLayout> PlanJobLayout(const config::JobConfig& job,
                                        const models::LlamaConfig& arch, int world_size,
                                        bool cuda) {
  KELVIN_RETURN_IF_ERROR(CheckSequenceLength(job, arch));
  JobLayout layout;
  KELVIN_ASSIGN_OR_RETURN(layout.spec, GridSpecOf(job, arch, world_size));
  KELVIN_ASSIGN_OR_RETURN(layout.dtype, ResolveModelDType(job, cuda));
  layout.separate_master = layout.dtype != DType::kF32;
  layout.distributed_optimizer = job.parallel().distributed_optimizer() &&
                                 layout.spec.data_parallel * layout.spec.context_parallel > 1;
  return layout;
}

JobLayout ForwardOnlyLayout(const JobLayout& layout) {
  return {.spec = layout.spec, .dtype = layout.dtype, .forward_only = true};
}

namespace {

// The micro-batches pipeline rank `pipeline_rank` holds at once: one for a forward-only model
// (one micro-batch at a time through the stages), else under the job's schedule (its program's
// slots; 0 without pipeline parallelism: the memory plan's own count).
absl::StatusOr<int> MicroBatchesInFlight(const config::JobConfig& job, const JobLayout& layout,
                                         int pipeline_rank) {
  if (layout.forward_only) return 1;
  const parallel::GridSpec& g = layout.spec;
  if (g.pipeline_parallel == 1) return 0;
  KELVIN_ASSIGN_OR_RETURN(
      const std::vector<parallel::PipelineStep> program,
      parallel::BuildPipelineProgram(
          ScheduleKindOf(job.parallel().pipeline_schedule()), g.pipeline_parallel, pipeline_rank,
          static_cast<int>(g.gradient_accumulation_steps), g.virtual_pipeline_stages));
  return parallel::PipelineRunner::SlotsNeeded(program, pipeline_rank);
}

// PlanRankMemory given the rank's micro-batches in flight.
models::MemoryPlan PlanRankMemoryHolding(const config::JobConfig& job,
                                         const models::LlamaConfig& arch, const JobLayout& layout,
                                         int tensor_rank, int pipeline_rank, int in_flight) {
  const parallel::GridSpec& g = layout.spec;
  models::MemoryPlanOptions o;
  o.micro_batch = job.training().micro_batch_size();
  o.seq_length = job.training().seq_length();
  // A forward-only model shares one layer's buffers for every recomputable field (no backward
  // reads them): JobForwardModel builds it so.
  o.recompute_attention = layout.forward_only || job.model().recompute_attention();
  o.recompute_mlp = layout.forward_only || job.model().recompute_mlp();
  o.forward_only = layout.forward_only;
  o.activation_dtype = layout.dtype;
  o.parameter_dtype = layout.dtype;
  o.separate_master = layout.separate_master;
  o.tensor_parallel = g.tensor_parallel;
  o.tensor_rank = tensor_rank;
  o.sequence_parallel = g.sequence_parallel;
  o.context_parallel = g.context_parallel;
  o.pipeline_parallel = g.pipeline_parallel;
  o.pipeline_rank = pipeline_rank;
  o.virtual_stages = g.virtual_pipeline_stages;
  o.data_parallel = g.data_parallel;
  o.distributed_optimizer = layout.distributed_optimizer;
  o.attention_backend = AttentionBackendOf(job);
  if (in_flight > 0) o.micro_batches_in_flight = in_flight;
  return models::PlanLlamaMemory(arch, o);
}

// The largest plan over the tensor ranks of one pipeline stage (its program built once).
absl::StatusOr<PeakMemory> StagePeak(const config::JobConfig& job, const models::LlamaConfig& arch,
                                     const JobLayout& layout, int pipeline_rank) {
  KELVIN_ASSIGN_OR_RETURN(const int in_flight, MicroBatchesInFlight(job, layout, pipeline_rank));
  PeakMemory peak;
  for (int tp = 0; tp < layout.spec.tensor_parallel; ++tp) {
    const models::MemoryPlan plan =
        PlanRankMemoryHolding(job, arch, layout, tp, pipeline_rank, in_flight);
    if (tp == 0 || plan.Total() > peak.plan.Total()) peak = {plan, tp, pipeline_rank};
  }
  return peak;
}

}  // namespace

absl::StatusOr<models::MemoryPlan> PlanRankMemory(const config::JobConfig& job,
                                                  const models::LlamaConfig& arch,
                                                  const JobLayout& layout, int tensor_rank,
                                                  int pipeline_rank) {
  KELVIN_ASSIGN_OR_RETURN(const int in_flight, MicroBatchesInFlight(job, layout, pipeline_rank));
  return PlanRankMemoryHolding(job, arch, layout, tensor_rank, pipeline_rank, in_flight);
}

absl::StatusOr<PeakMemory> PlanPeakMemory(const config::JobConfig& job,
                                          const models::LlamaConfig& arch,
                                          const JobLayout& layout) {
  PeakMemory peak;
  for (int pp = 0; pp < layout.spec.pipeline_parallel; ++pp) {
    KELVIN_ASSIGN_OR_RETURN(const PeakMemory stage, StagePeak(job, arch, layout, pp));
    if (pp == 0 || stage.plan.Total() > peak.plan.Total()) peak = stage;
  }
  return peak;
}

std::vector<std::string> ActivationMemoryRemedies(const config::JobConfig& job) {
  std::vector<std::string> remedies;
  if (!job.model().recompute_attention() || !job.model().recompute_mlp()) {
    remedies.push_back("turn on model.recompute_attention / recompute_mlp");
  }
  if (job.training().micro_batch_size() > 1) remedies.push_back("lower training.micro_batch_size");
  return remedies;
}

absl::Status CheckPlanFitsGpu(const config::JobConfig& job, const JobLayout& layout,
                              const PeakMemory& peak) {
  const int64_t gib = job.launch().gpu_memory_gib();
  constexpr double kGiB = 1 << 30;
  if (gib == 0 || layout.dtype == DType::kF32 || peak.plan.Total() <= gib * (int64_t{1} << 30)) {
    return absl::OkStatus();  // f32: the layout trains on the CPU
  }
  std::vector<std::string> remedies = {"raise parallel.tensor_parallel or pipeline_parallel"};
  if (layout.forward_only) {  // nothing but the weights and one micro-batch's activations
    if (job.training().micro_batch_size() > 1) {
      remedies.push_back("lower training.micro_batch_size");
    }
  } else {
    if (!layout.distributed_optimizer) {
      remedies.push_back("turn on parallel.distributed_optimizer");
    }
    for (const std::string& remedy : ActivationMemoryRemedies(job)) remedies.push_back(remedy);
  }
  return absl::ResourceExhaustedError(absl::StrFormat(
      "the largest rank (pipeline stage %d, tensor rank %d) plans %.2f GiB, more than "
      "launch.gpu_memory_gib=%d: %s",
      peak.pipeline_rank, peak.tensor_rank, static_cast<double>(peak.plan.Total()) / kGiB, gib,
      absl::StrJoin(remedies, ", or ")));
}

ParameterCounts CountParameters(const models::LlamaConfig& arch) {
  ParameterCounts counts;
  for (const models::LlamaParameterSpec& spec :
       models::StageParameterSpecs(arch, models::StageLayoutOf(arch, 0, 1, 1))) {
    (spec.trainable ? counts.trainable : counts.frozen) += NumElements(spec.full_shape);
  }
  return counts;
}

CheckpointBytes PlanCheckpointBytes(const models::LlamaConfig& arch, const JobLayout& layout) {
  const parallel::GridSpec& g = layout.spec;
  const auto bytes = static_cast<int64_t>(DTypeSize(AccumDType(layout.dtype)));
  // ZeRO-1 splits the masters and moments over the replicas, which write a shard each.
  const int64_t state_shards =
      layout.distributed_optimizer ? int64_t{g.data_parallel} * g.context_parallel : 1;
  CheckpointBytes plan;
  const models::LlamaShardLayout tp0 = models::ShardLayoutOf(arch, 0, g.tensor_parallel);
  // Weights and two moments of each trainable parameter (a frozen base is not written).
  plan.total = CountParameters(arch).trainable * bytes * 3;
  for (int pp = 0; pp < g.pipeline_parallel; ++pp) {
    const models::LlamaStageLayout stage =
        models::StageLayoutOf(arch, pp, g.pipeline_parallel, g.virtual_pipeline_stages);
    int64_t elements = 0;  // of the shards tensor rank 0 writes
    for (const models::LlamaParameterSpec& spec : models::StageParameterSpecs(arch, stage)) {
      if (!spec.trainable) continue;
      // The last stage's tied embedding is the first stage's copy.
      if (spec.name == models::kEmbeddingName && !stage.holds_embedding_input()) continue;
      elements += models::RegionOf(models::ShardOf(arch, tp0, spec.name), spec.full_shape).numel();
    }
    const int64_t part = 3 * elements * bytes / state_shards;
    if (part > plan.largest_part) {
      plan.largest_part = part;
      plan.largest_part_stage = pp;
    }
  }
  return plan;
}

namespace {

// FLOPs for people: "5.4 MFLOP", "13.9 GFLOP", "27.0 PFLOP".
std::string HumanFlops(double flops) {
  if (flops >= 1e15) return absl::StrFormat("%.1f PFLOP", flops / 1e15);
  if (flops >= 1e12) return absl::StrFormat("%.1f TFLOP", flops / 1e12);
  if (flops >= 1e9) return absl::StrFormat("%.1f GFLOP", flops / 1e9);
  return absl::StrFormat("%.1f MFLOP", flops / 1e6);
}

// The step's model FLOPs and, with logging.peak_tflops, the least time a step and the job take
// (at 100% MFU: no run is faster; real runs reach a fraction of it).
std::string FormatComputeBound(const config::JobConfig& job, const models::LlamaConfig& arch,
                               const parallel::GridSpec& g) {
  const double tokens = static_cast<double>(g.global_batch_size * g.seq_length);
  const double per_token = models::TrainingFlopsPerToken(arch, g.seq_length);
  std::string out = absl::StrFormat(
      "compute: %s per step (model FLOPs, models/llama/model_flops.h: %s per token x %.0f tokens)",
      HumanFlops(per_token * tokens), HumanFlops(per_token), tokens);
  const double peak = job.logging().peak_tflops() * 1e12;
  if (peak <= 0) return out + "; set logging.peak_tflops for the least step time\n";
  const double step_seconds = per_token * tokens / (peak * g.world_size);
  absl::StrAppendFormat(&out,
                        "; at least %s per step and %s for the job's %d steps on %d processes of "
                        "%g TFLOP/s (100%% MFU; at 40%%: %s per step)\n",
                        FormatDuration(step_seconds),
                        FormatDuration(step_seconds * static_cast<double>(job.training().steps())),
                        job.training().steps(), g.world_size, job.logging().peak_tflops(),
                        FormatDuration(step_seconds / 0.4));
  return out;
}

}  // namespace

std::string LayoutName(const parallel::GridSpec& g, bool distributed_optimizer) {
  const std::string pp = g.pipeline_parallel > 1 ? absl::StrCat(" pp", g.pipeline_parallel, " vp",
                                                                g.virtual_pipeline_stages)
                                                 : "";
  const std::string cp = g.context_parallel > 1 ? absl::StrCat(" cp", g.context_parallel) : "";
  return absl::StrCat("tp", g.tensor_parallel, g.sequence_parallel ? " sp" : "", cp, pp, " dp",
                      g.data_parallel, distributed_optimizer ? " zero1" : "");
}

std::string FormatDuration(double seconds) {
  const auto s = static_cast<int64_t>(seconds);
  if (s >= 86400) return absl::StrFormat("%dd%02dh", s / 86400, (s % 86400) / 3600);
  if (s >= 3600) return absl::StrFormat("%dh%02dm", s / 3600, (s % 3600) / 60);
  if (s >= 60) return absl::StrFormat("%dm%02ds", s / 60, s % 60);
  return absl::StrFormat("%.1fs", seconds);
}

namespace {

// The plan's first lines: the model, its dtype and (when it trains) master weights and the
// parameter-efficient split; the layout.
std::string FormatModelAndLayout(const config::JobConfig& job, const models::LlamaConfig& arch,
                                 const JobLayout& layout) {
  const parallel::GridSpec& g = layout.spec;
  std::string out = absl::StrFormat(
      "job %s: %d layers, hidden %d, %d/%d heads, vocab %d, %.3g M parameters, %s%s\n", job.name(),
      arch.num_layers, arch.hidden_size, arch.num_attention_heads, arch.num_key_value_heads,
      arch.vocab_size, arch.NumParameters() / 1e6, DTypeName(layout.dtype),
      layout.separate_master ? " with f32 master weights" : "");
  if (arch.trainable.has_value() && !layout.forward_only) {
    const models::TrainableSets& sets = *arch.trainable;
    std::vector<std::string> names;
    for (const auto& [on, name] :
         {std::pair{sets.adapters, "LoRA adapters"}, std::pair{sets.ssa, "SSA parameters"},
          std::pair{sets.norms, "norms"}, std::pair{sets.embeddings, "embeddings and LM head"}}) {
      if (on) names.push_back(name);
    }
    const ParameterCounts counts = CountParameters(arch);
    absl::StrAppendFormat(&out,
                          "parameter-efficient: %.4g M trainable parameters (%s) on a frozen "
                          "base of %.4g M\n",
                          static_cast<double>(counts.trainable) / 1e6, absl::StrJoin(names, ", "),
                          static_cast<double>(counts.frozen) / 1e6);
  }
  absl::StrAppendFormat(&out,
                        "layout: %d processes = tensor %d%s x context %d x pipeline %d (%d model "
                        "chunk(s) per stage) x data %d%s\n",
                        g.world_size, g.tensor_parallel,
                        g.sequence_parallel ? " (sequence parallel)" : "", g.context_parallel,
                        g.pipeline_parallel, g.virtual_pipeline_stages, g.data_parallel,
                        layout.distributed_optimizer ? " (distributed optimizer)" : "");
  return out;
}

// The memory plan of every pipeline stage (its largest tensor rank), then the compute line
// `between` (empty: none) and the largest rank's total.
absl::StatusOr<std::string> FormatMemory(const config::JobConfig& job,
                                         const models::LlamaConfig& arch, const JobLayout& layout,
                                         const std::string& between) {
  const parallel::GridSpec& g = layout.spec;
  std::string out;
  for (int pp = 0; pp < g.pipeline_parallel; ++pp) {
    KELVIN_ASSIGN_OR_RETURN(const PeakMemory stage, StagePeak(job, arch, layout, pp));
    absl::StrAppend(&out, "memory per rank",
                    g.pipeline_parallel > 1 ? absl::StrCat(", pipeline stage ", pp) : "",
                    g.tensor_parallel > 1
                        ? absl::StrCat(" (tensor rank ", stage.tensor_rank, ", the largest)")
                        : "",
                    ": ", stage.plan.ToString(), "\n");
  }
  absl::StrAppend(&out, between);
  KELVIN_ASSIGN_OR_RETURN(const PeakMemory peak, PlanPeakMemory(job, arch, layout));
  absl::StrAppendFormat(&out, "largest rank: pipeline stage %d, tensor rank %d: %.3f GiB\n",
                        peak.pipeline_rank, peak.tensor_rank,
                        static_cast<double>(peak.plan.Total()) / (1 << 30));
  return out;
}

}  // namespace

absl::StatusOr<std::string> FormatJobPlan(const config::JobConfig& job,
                                          const models::LlamaConfig& arch,
                                          const JobLayout& layout) {
  const parallel::GridSpec& g = layout.spec;
  std::string out = FormatModelAndLayout(job, arch, layout);
  absl::StrAppendFormat(&out,
                        "batch: %d sequences of %d tokens per step = %d micro-batches of %d per "
                        "data-parallel rank\n",
                        g.global_batch_size, g.seq_length, g.gradient_accumulation_steps,
                        g.micro_batch_size);
  KELVIN_ASSIGN_OR_RETURN(const std::string memory,
                          FormatMemory(job, arch, layout, FormatComputeBound(job, arch, g)));
  absl::StrAppend(&out, memory);
  const CheckpointBytes checkpoint = PlanCheckpointBytes(arch, layout);
  absl::StrAppendFormat(
      &out,
      "checkpoint: %.3f GiB per save (weights and AdamW moments) in %d part "
      "file%s, the largest %.3f GiB (pipeline stage %d, tensor rank 0)\n",
      static_cast<double>(checkpoint.total) / (1 << 30), g.world_size, g.world_size > 1 ? "s" : "",
      static_cast<double>(checkpoint.largest_part) / (1 << 30), checkpoint.largest_part_stage);
  return out;
}

absl::StatusOr<std::string> FormatForwardPlan(const config::JobConfig& job,
                                              const models::LlamaConfig& arch,
                                              const JobLayout& layout) {
  KELVIN_CHECK(layout.forward_only) << "FormatForwardPlan takes a forward-only layout";
  const parallel::GridSpec& g = layout.spec;
  std::string out = FormatModelAndLayout(job, arch, layout);
  absl::StrAppendFormat(&out,
                        "forward only (kelvin eval JOB): the weights and one micro-batch's "
                        "activations, no gradients, master weights or optimizer state; "
                        "micro-batches of %d sequences of %d tokens, one at a time through the "
                        "stages\n",
                        g.micro_batch_size, g.seq_length);
  KELVIN_ASSIGN_OR_RETURN(const std::string memory, FormatMemory(job, arch, layout, ""));
  return out + memory;
}

}  // namespace kelvin::training
