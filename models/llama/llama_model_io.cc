// LlamaModel's parameters in and out: random and SSA initialisation, Hugging Face checkpoint
// import (each tensor-parallel rank reads only its slices) and export (the slices gathered).
#include <cmath>
#include <map>
#include <random>
#include <set>

#include "absl/strings/str_cat.h"
#include "core/copy.h"
#include "core/logging.h"
#include "core/ops/dispatch.h"
#include "core/ops/elementwise.h"
#include "models/llama/hf_weight_check.h"
#include "models/llama/llama_base_fingerprint.h"
#include "models/llama/llama_model.h"
#include "models/llama/peft_adapter_directory.h"

namespace kelvin::models {
namespace {

// A loaded weight (host f32, as the masters are read) holding NaN or inf is a damaged file: named
// with its first bad element here, rather than surfacing as a "diverged" loss at step 1.
absl::Status CheckFinite(const Tensor& weights, const std::string& source,
                         const std::string& name) {
  if (!weights.is_cpu() || weights.dtype() != DType::kF32) return absl::OkStatus();
  const float* values = weights.data<float>();
  for (int64_t i = 0; i < weights.numel(); ++i) {
    if (!std::isfinite(values[i])) {
      return absl::DataLossError(absl::StrCat(
          source, ": tensor \"", name, "\" holds ", values[i], " at element ", i,
          ": the model's weights are damaged (or were saved from a diverged run); use an intact "
          "copy of the model"));
    }
  }
  return absl::OkStatus();
}

// dst[.., dst_begin + i, ..] = src[.., src_begin + i, ..] for i < count along `axis` (0 or 1) of
// host tensors of one dtype and equal other dimensions (1-D or 2-D).
void CopyAlongAxis(const Tensor& src, int axis, int64_t src_begin, Tensor& dst, int64_t dst_begin,
                   int64_t count) {
  const int64_t rows = axis == 0 ? count : src.dim(0);
  const int64_t inner = src.ndim() == 1 ? 1 : (axis == 0 ? src.dim(1) : count);
  const int64_t src_row = src.ndim() == 1 ? 1 : src.dim(1),
                dst_row = dst.ndim() == 1 ? 1 : dst.dim(1);
  const size_t bytes = DTypeSize(src.dtype());
  const auto* from = static_cast<const char*>(src.raw_data());
  auto* to = static_cast<char*>(dst.raw_data());
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t src_offset = axis == 0 ? (src_begin + r) * src_row : r * src_row + src_begin;
    const int64_t dst_offset = axis == 0 ? (dst_begin + r) * dst_row : r * dst_row + dst_begin;
    std::memcpy(to + dst_offset * bytes, from + src_offset * bytes, inner * bytes);
  }
}

}  // namespace

void LlamaModel::InitSsaParameters() {
  if (!config_.ssa.has_value()) return;
  for (const LlamaStageLayout::Chunk& chunk : stage_.chunks) {
    for (int64_t l = chunk.layer_begin; l < chunk.layer_end; ++l) {
      for (const SsaParameterSpec& spec : SsaLayerParameters(config_)) {
        Tensor& master = params_.master(LayerParameterName(l, spec.suffix));
        if (spec.suffix == "self_attn.ssa.alpha") {
          ops::Fill(ctx_, master, config_.ssa->alpha_init);
        } else if (spec.suffix == "self_attn.ssa.query_temperature_proj.weight") {
          // Cast: a frozen W_q's master is its bf16 value, a trainable W_tmp's f32.
          ops::Cast(ctx_, params_.master(LayerParameterName(l, "self_attn.q_proj.weight")), master);
        } else if (spec.suffix == "self_attn.ssa.value_temperature_proj.weight") {
          ops::Cast(ctx_, params_.master(LayerParameterName(l, "self_attn.v_proj.weight")), master);
        } else {
          ops::Fill(ctx_, master, 0.0);  // the read-outs a^q [H, d], a^v [G, d]
        }
      }
    }
  }
  params_.SyncModelCopy();
}

template <typename Distribution>
void LlamaModel::AssignRandomDraw(const std::string& name, uint64_t seed,
                                  Distribution distribution) {
  // The full tensor's draw from a stream of its own (the seed and the name), the same on every
  // layout whichever stage holds it; this rank keeps its slice.
  std::mt19937_64 rng = ParameterStream(name, seed);
  const Shape& full_shape = full_shapes_.at(name);
  Tensor full = Tensor::Empty(full_shape, DType::kF64);
  for (int64_t i = 0; i < full.numel(); ++i) full.data<double>()[i] = distribution(rng);
  const ParameterShard& shard = shards_.at(name);
  Tensor slice = full;
  if (shard.axis >= 0) {
    Shape local_shape = full_shape;
    local_shape[shard.axis] = shard.count;
    slice = Tensor::Empty(local_shape, DType::kF64);
    CopyAlongAxis(full, shard.axis, shard.begin, slice, 0, shard.count);
  }
  params_.Assign(name, slice);
}

void LlamaModel::InitRandom(uint64_t seed) {
  for (const ParameterSet::Entry& e : params_.entries()) {
    if (IsLoraParameter(e.name)) continue;  // InitLoraParameters
    if (e.group == ParamGroup::kNoDecay) {
      Tensor master = e.master;
      ops::Fill(ctx_, master, 1.0);
      continue;
    }
    AssignRandomDraw(e.name, seed, std::normal_distribution<double>(0.0, kInitStddev));
  }
  InitSsaParameters();
  InitLoraParameters(seed);
  params_.SyncModelCopy();  // the norms' ones
  if (config_.trainable.has_value()) frozen_base_ = RandomBaseOf(config_, seed);
}

void LlamaModel::InitLoraParameters(uint64_t seed) {
  for (const ParameterSet::Entry& e : params_.entries()) {
    if (!IsLoraParameter(e.name)) continue;
    if (e.name.ends_with(".lora_B.weight")) {
      Tensor master = e.master;
      ops::Fill(ctx_, master, 0.0);
      continue;
    }
    // peft's default: torch's kaiming_uniform_ with a = sqrt(5) on A [r, in], whose bound
    // sqrt(6 / ((1 + a^2) in)) is 1 / sqrt(in).
    const double bound = 1.0 / std::sqrt(static_cast<double>(full_shapes_.at(e.name)[1]));
    AssignRandomDraw(e.name, seed, std::uniform_real_distribution<double>(-bound, bound));
  }
  params_.SyncModelCopy();
}

absl::Status LlamaModel::LoadHfCheckpoint(const io::HfCheckpoint& checkpoint) {
  KELVIN_RETURN_IF_ERROR(CheckHfWeightsMatchConfig(checkpoint, config_));
  const int64_t ssa_tensors =
      stage_.num_local_layers() * static_cast<int64_t>(SsaLayerParameters(config_).size());
  std::vector<std::string> missing_ssa;
  for (const ParameterSet::Entry& e : params_.entries()) {
    if (IsLoraParameter(e.name)) continue;  // a base model's checkpoint: InitLoraParameters
    const io::SafetensorsEntry* found = checkpoint.Find(e.name);
    if (found == nullptr && e.name.find(".self_attn.ssa.") != std::string::npos) {
      missing_ssa.push_back(e.name);
      continue;
    }
    // Every other tensor is there in its shape: CheckHfWeightsMatchConfig checked the whole model.
    const ParameterShard& shard = shards_.at(e.name);
    // In the masters' dtype (a forward-only bf16 model's values: read in f32, checked, rounded).
    const DType read_dtype = AccumDType(e.master.dtype());
    KELVIN_ASSIGN_OR_RETURN(const Tensor loaded,
                            shard.axis < 0
                                ? checkpoint.Read(e.name, read_dtype)
                                : checkpoint.ReadSlice(e.name, shard.axis, shard.begin,
                                                       shard.begin + shard.count, read_dtype));
    KELVIN_RETURN_IF_ERROR(CheckFinite(loaded, checkpoint.path(), e.name));
    params_.Assign(e.name, loaded);
  }
  if (static_cast<int64_t>(missing_ssa.size()) == ssa_tensors && ssa_tensors > 0) {
    // Read-outs 0 zero the token terms: tau^v = 1, and tau^q = 1 + sigma(alpha) ln n with the
    // position term (else 1: the pretrained model's logits).
    const ssa::SsaOptions& ssa = *config_.ssa;
    const double sigma = 1 / (1 + std::exp(-ssa.alpha_init));
    KLOG_RANK0(INFO) << checkpoint.path() << " has no SSA tensors: starting SSA from read-outs 0 "
                     << "and alpha " << ssa.alpha_init
                     << (ssa.query_temperature && ssa.position_aware
                             ? absl::StrCat(" (tau^q = 1 + ", sigma,
                                            " ln n, tau^v = 1: the pretrained model's logits "
                                            "with the position term on top)")
                             : std::string(
                                   " (every temperature 1: the pretrained model's logits)"));
    InitSsaParameters();
  } else if (!missing_ssa.empty()) {
    return absl::NotFoundError(absl::StrCat(
        checkpoint.path(), " has some SSA tensors but not \"", missing_ssa.front(),
        "\": was it exported with other model.ssa flags? Use the same flags, or a checkpoint "
        "without SSA tensors to start SSA afresh"));
  }
  if (config_.trainable.has_value()) frozen_base_ = HfBaseOf(checkpoint, config_);
  std::set<std::string> model_names;  // the whole model's, whichever stage holds them
  for (const LlamaParameterSpec& spec :
       StageParameterSpecs(config_, StageLayoutOf(config_, 0, 1, 1))) {
    model_names.insert(spec.name);
  }
  for (const std::string& name : checkpoint.TensorNames()) {
    if (name == kLmHeadName && config_.tie_word_embeddings) {
      KLOG_RANK0(WARNING) << checkpoint.path() << ": ignoring tensor \"" << name
                          << "\": config.json has tie_word_embeddings=true, so the output layer is "
                             "the embedding (as in transformers)";
    } else if (!model_names.count(name)) {
      KLOG_RANK0(WARNING) << checkpoint.path() << ": ignoring tensor \"" << name
                          << "\", which Kelvin's Llama does not use";
    }
  }
  return absl::OkStatus();
}

absl::Status LlamaModel::ExportHf(const std::string& directory,
                                  const HfExportProvenance& provenance,
                                  const ExportOptions& options) {
  // An adapter needs its own tensors only: the base is not gathered for it.
  const bool adapter = options.format == ExportFormat::kPeftAdapter;
  std::vector<std::pair<std::string, Tensor>> tensors = GatherWholeParameters(
      adapter ? [this](const std::string& name) { return IsInPeftAdapter(config_, name); }
              : std::function<bool(const std::string&)>());
  if (tensors.empty()) return absl::OkStatus();  // not TP and pipeline rank 0
  return WriteModelExport(directory, config_, std::move(tensors), provenance, options);
}

std::vector<std::pair<std::string, Tensor>> LlamaModel::GatherWholeParameters(
    const std::function<bool(const std::string&)>& keep) {
  parallel::Communicator& tp = *tp_;
  std::vector<std::pair<std::string, Tensor>> tensors;
  for (const ParameterSet::Entry& e : params_.entries()) {
    if (keep && !keep(e.name)) continue;
    Tensor local = Tensor::Empty(e.shape, DType::kF32);
    ops::Cast(Context::Cpu(), params_.MasterOnHost(e.name), local);
    const ParameterShard& shard = shards_.at(e.name);
    if (shard.axis < 0) {
      tensors.emplace_back(e.name, local);
      continue;
    }
    // Every rank's slice, placed where its layout says (replicated KV heads land on themselves).
    Tensor gathered = Tensor::Empty({local.numel() * tp.size()}, DType::kF32);
    tp.AllGather(local.View({-1}), gathered);
    Tensor full = Tensor::Empty(full_shapes_.at(e.name), DType::kF32);
    for (int r = 0; r < tp.size(); ++r) {
      const ParameterShard theirs = ShardOf(config_, ShardLayoutOf(config_, r, tp.size()), e.name);
      const Tensor slice = gathered.Slice(r * local.numel(), (r + 1) * local.numel()).View(e.shape);
      CopyAlongAxis(slice, shard.axis, 0, full, theirs.begin, theirs.count);
    }
    tensors.emplace_back(e.name, full);
  }
  if (tp.rank() != 0) return {};
  if (stage_.stages > 1) {
    GatherPipelineStages(tensors, keep);
    if (stage_.rank != 0) return {};
  }
  return tensors;
}

void LlamaModel::GatherPipelineStages(std::vector<std::pair<std::string, Tensor>>& tensors,
                                      const std::function<bool(const std::string&)>& keep) {
  parallel::Communicator& pp = *pp_;
  const auto kept = [&keep](const std::string& name) { return !keep || keep(name); };
  // The last stage's tied embedding is a copy of the first stage's: it stays home.
  auto travels = [&kept](const std::string& name) { return name != kEmbeddingName && kept(name); };
  if (stage_.rank != 0) {
    for (const auto& [name, tensor] : tensors) {
      if (travels(name)) pp.Send(tensor, 0);
    }
    return;
  }
  std::map<std::string, Tensor> by_name(tensors.begin(), tensors.end());
  for (int stage = 1; stage < stage_.stages; ++stage) {
    const LlamaStageLayout theirs =
        StageLayoutOf(config_, stage, stage_.stages, stage_.virtual_stages);
    for (const LlamaParameterSpec& spec : StageParameterSpecs(config_, theirs)) {
      if (!travels(spec.name)) continue;
      Tensor received = Tensor::Empty(spec.full_shape, DType::kF32);
      pp.Recv(received, stage);
      by_name[spec.name] = received;
    }
  }
  tensors.clear();  // the whole model, in one rank's (Hugging Face) order
  for (const LlamaParameterSpec& spec :
       StageParameterSpecs(config_, StageLayoutOf(config_, 0, 1, 1))) {
    if (kept(spec.name)) tensors.emplace_back(spec.name, by_name.at(spec.name));
  }
}

}  // namespace kelvin::models
