// LlamaModel's parameters in and out: random and SSA initialisation, Hugging Face checkpoint
// import (each tensor-parallel rank reads only its slices) and export (the slices gathered).
#include <filesystem>
#include <fstream>
#include <random>

#include "absl/strings/str_cat.h"
#include "core/copy.h"
#include "core/logging.h"
#include "core/ops/dispatch.h"
#include "core/ops/elementwise.h"
#include "models/llama/llama_model.h"

namespace kelvin::models {
namespace {

constexpr const char* kLmHead = "lm_head.weight";

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
  const Context ctx = Context::Cpu();
  for (int64_t l = 0; l < config_.num_layers; ++l) {
    for (const SsaParameterSpec& spec : SsaLayerParameters(config_)) {
      Tensor& value = params_.value(LayerParam(l, spec.suffix));
      if (spec.suffix == "self_attn.ssa.alpha") {
        ops::Fill(ctx, value, config_.ssa->alpha_init);
      } else if (spec.suffix == "self_attn.ssa.query_temperature_proj.weight") {
        CopyTensor(ctx, params_.value(LayerParam(l, "self_attn.q_proj.weight")), value);
      } else if (spec.suffix == "self_attn.ssa.value_temperature_proj.weight") {
        CopyTensor(ctx, params_.value(LayerParam(l, "self_attn.v_proj.weight")), value);
      } else {
        ops::Fill(ctx, value, 0.0);  // the read-outs a^q [H, d], a^v [G, d]
      }
    }
  }
}

void LlamaModel::InitRandom(uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> normal(0.0, 0.02);
  for (const ParameterSet::Entry& e : params_.entries()) {
    Tensor value = e.value;
    if (e.group == ParamGroup::kNoDecay) {
      ops::Fill(Context::Cpu(), value, 1.0);
      continue;
    }
    // The full tensor's draw, in the same order on every layout; this rank keeps its slice.
    const Shape& full_shape = full_shapes_.at(e.name);
    Tensor full = Tensor::Empty(full_shape, DType::kF64);
    for (int64_t i = 0; i < full.numel(); ++i) full.data<double>()[i] = normal(rng);
    const ParameterShard& shard = shards_.at(e.name);
    Tensor slice = full;
    if (shard.axis >= 0) {
      Shape local_shape = full_shape;
      local_shape[shard.axis] = shard.count;
      slice = Tensor::Empty(local_shape, DType::kF64);
      CopyAlongAxis(full, shard.axis, shard.begin, slice, 0, shard.count);
    }
    ops::Cast(Context::Cpu(), slice, value);
  }
  InitSsaParameters();
}

absl::Status LlamaModel::LoadHfCheckpoint(const io::HfCheckpoint& checkpoint) {
  const Context ctx = Context::Cpu();
  const int64_t ssa_tensors =
      config_.num_layers * static_cast<int64_t>(SsaLayerParameters(config_).size());
  std::vector<std::string> missing_ssa;
  for (const ParameterSet::Entry& e : params_.entries()) {
    const io::SafetensorsEntry* found = checkpoint.Find(e.name);
    if (found == nullptr && e.name.find(".self_attn.ssa.") != std::string::npos) {
      missing_ssa.push_back(e.name);
      continue;
    }
    if (found == nullptr) {
      return absl::NotFoundError(
          absl::StrCat(checkpoint.path(), " has no tensor \"", e.name, "\", which a Llama with ",
                       config_.num_layers, " layers needs (is config.json from the same model?)"));
    }
    const Shape& full_shape = full_shapes_.at(e.name);
    if (found->shape != full_shape) {
      return absl::InvalidArgumentError(absl::StrCat(
          checkpoint.path(), ": tensor \"", e.name, "\" has shape ", ShapeToString(found->shape),
          " but the config implies ", ShapeToString(full_shape)));
    }
    const ParameterShard& shard = shards_.at(e.name);
    KELVIN_ASSIGN_OR_RETURN(const Tensor loaded,
                            shard.axis < 0
                                ? checkpoint.Read(e.name, dtype_)
                                : checkpoint.ReadSlice(e.name, shard.axis, shard.begin,
                                                       shard.begin + shard.count, dtype_));
    Tensor value = e.value;
    CopyTensor(ctx, loaded, value);
  }
  if (static_cast<int64_t>(missing_ssa.size()) == ssa_tensors && ssa_tensors > 0) {
    KLOG_RANK0(INFO) << checkpoint.path() << " has no SSA tensors: starting SSA from read-outs 0 "
                     << "and alpha " << config_.ssa->alpha_init
                     << " (the pretrained model's logits)";
    InitSsaParameters();
  } else if (!missing_ssa.empty()) {
    return absl::NotFoundError(absl::StrCat(
        checkpoint.path(), " has some SSA tensors but not \"", missing_ssa.front(),
        "\": was it exported with other model.ssa flags? Use the same flags, or a checkpoint "
        "without SSA tensors to start SSA afresh"));
  }
  for (const std::string& name : checkpoint.TensorNames()) {
    if (!(name == kLmHead && config_.tie_word_embeddings) && !params_.Contains(name)) {
      KLOG_RANK0(WARNING) << checkpoint.path() << ": ignoring tensor \"" << name
                          << "\", which Kelvin's Llama does not use";
    }
  }
  return absl::OkStatus();
}

absl::Status LlamaModel::ExportHf(const std::string& directory) {
  parallel::Communicator* tp = parallelism_.tp;
  const bool writer = tp == nullptr || tp->rank() == 0;
  std::vector<std::pair<std::string, Tensor>> tensors;
  for (const ParameterSet::Entry& e : params_.entries()) {
    Tensor local = Tensor::Empty(e.shape, DType::kF32);
    ops::Cast(Context::Cpu(), e.value, local);
    const ParameterShard& shard = shards_.at(e.name);
    if (shard.axis < 0) {
      tensors.emplace_back(e.name, local);
      continue;
    }
    // Every rank's slice, placed where its layout says (replicated KV heads land on themselves).
    Tensor gathered = Tensor::Empty({local.numel() * tp->size()}, DType::kF32);
    tp->AllGather(local.View({-1}), gathered);
    Tensor full = Tensor::Empty(full_shapes_.at(e.name), DType::kF32);
    for (int r = 0; r < tp->size(); ++r) {
      const ParameterShard theirs = ShardOf(config_, ShardLayoutOf(config_, r, tp->size()), e.name);
      const Tensor slice = gathered.Slice(r * local.numel(), (r + 1) * local.numel()).View(e.shape);
      CopyAlongAxis(slice, shard.axis, 0, full, theirs.begin, theirs.count);
    }
    tensors.emplace_back(e.name, full);
  }
  if (!writer) return absl::OkStatus();
  std::error_code error;
  std::filesystem::create_directories(directory, error);
  if (error) {
    return absl::PermissionDeniedError(
        absl::StrCat("cannot create export directory ", directory, ": ", error.message()));
  }
  KELVIN_RETURN_IF_ERROR(io::WriteHfCheckpoint(directory, tensors));
  if (config_.ssa.has_value()) {
    KLOG_RANK0(WARNING)
        << "exported to " << directory << " with the SSA tensors "
        << "(model.layers.*.self_attn.ssa.*): Kelvin reloads them; transformers has "
        << "no SSA, ignores them and runs the model without temperatures";
  }
  const std::string config_path = directory + "/config.json";
  std::ofstream out(config_path);
  out << LlamaConfigToHfJson(config_);
  if (!out) return absl::DataLossError(absl::StrCat("cannot write ", config_path));
  return absl::OkStatus();
}

}  // namespace kelvin::models
