// The files of a Hugging Face export besides the weights: generation config, copied tokenizer
// files, the model card and the SSA modeling code.
#include "models/llama/hf_model_directory.h"

#include <filesystem>
#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/build_info.h"
#include "core/io/regular_file.h"
#include "models/llama/hf_modeling_code.h"

namespace kelvin::models {
namespace {

// Llama-3's tokenizer.json is 9 MB; anything beyond this is not a tokenizer file.
constexpr uint64_t kMaxCopiedFileBytes = uint64_t{256} << 20;

std::string GenerationConfigJson(const SpecialTokenIds& ids) {
  nlohmann::json root = {{"_from_model_config", true}};
  if (ids.bos.has_value()) root["bos_token_id"] = *ids.bos;
  if (ids.eos.size() == 1) root["eos_token_id"] = ids.eos.front();
  if (ids.eos.size() > 1) root["eos_token_id"] = ids.eos;
  if (ids.pad.has_value()) root["pad_token_id"] = *ids.pad;
  return root.dump(2) + "\n";
}

std::string Loss(const std::optional<double>& loss) {
  return loss.has_value() ? absl::StrFormat("%.6f", *loss) : "not recorded";
}

std::string SsaSettings(const ssa::SsaOptions& o) {
  const auto on = [](bool flag) { return flag ? "on" : "off"; };
  return absl::StrCat(
      "query temperature ", on(o.query_temperature), ", value temperature ",
      on(o.value_temperature), ", token-aware ", on(o.token_aware), ", position-aware ",
      on(o.position_aware), ", weight sharing ", on(o.weight_sharing), ", clamp ",
      o.temperature_clamp.has_value()
          ? absl::StrCat("[", o.temperature_clamp->lo, ", ", o.temperature_clamp->hi, "]")
          : std::string("none"));
}

std::string ModelCard(const LlamaConfig& config, DType dtype, const HfExportProvenance& p) {
  const bool ssa = config.ssa.has_value();
  std::string card = absl::StrCat(
      "---\nlibrary_name: transformers\ntags:\n- kelvin\n- llama\n", ssa ? "- ssa\n" : "",
      "---\n\n# ", p.job_name.empty() ? "A Kelvin model" : p.job_name, "\n\n", "Written by Kelvin ",
      KelvinVersion(), ".\n\n", "| | |\n|---|---|\n", "| base model | ",
      p.source.empty() ? "unknown" : p.source, " |\n", "| job | ",
      p.job_name.empty() ? "unknown" : p.job_name, " |\n", "| steps trained | ", p.steps, " |\n",
      "| data | ", p.data.empty() ? "unknown" : absl::StrCat("`", p.data, "`"), " |\n",
      "| last training loss | ", Loss(p.train_loss), " |\n", "| last evaluation loss | ",
      Loss(p.eval_loss), " |\n", "| weights | ", dtype == DType::kF32 ? "float32" : "bfloat16",
      ", ", config.NumParameters(), " parameters |\n", "| attention | ",
      ssa ? absl::StrCat("Selective Self-Attention: ", SsaSettings(*config.ssa))
          : std::string("Llama (vanilla)"),
      " |\n\n");
  if (ssa) {
    absl::StrAppend(
        &card,
        "## Loading\n\nThis is a Llama with Selective Self-Attention: per-token query and value "
        "temperatures (the `model.layers.*.self_attn.ssa.*` tensors). Its modeling code ships in "
        "this directory (`modeling_ssa_llama.py`), so transformers needs `trust_remote_code=True`:"
        "\n\n```python\nfrom transformers import AutoModelForCausalLM\n"
        "model = AutoModelForCausalLM.from_pretrained(path, trust_remote_code=True)\n```\n\n"
        "Loaded as a plain `LlamaForCausalLM` it would run without the temperatures and compute "
        "other logits. A serving stack needs the same change to its attention: scale the query "
        "after RoPE by tau^q (from the pre-RoPE query and the position id) and the value by tau^v "
        "before they enter the KV cache.\n");
  } else {
    absl::StrAppend(&card,
                    "## Loading\n\nA plain Llama: `LlamaForCausalLM.from_pretrained(path)` (or "
                    "any stack that serves Llama).\n");
  }
  return card;
}

}  // namespace

absl::Status WriteHfModelDirectory(const std::string& directory, const LlamaConfig& config,
                                   const std::vector<io::HfTensorSource>& tensors,
                                   const HfExportProvenance& provenance) {
  const DType dtype = tensors.empty() ? DType::kF32 : tensors.front().dtype;
  for (const io::HfTensorSource& tensor : tensors) {
    KELVIN_CHECK(tensor.dtype == dtype)
        << "an export's tensors share one dtype: " << tensor.name << " is "
        << DTypeName(tensor.dtype) << ", not " << DTypeName(dtype);
  }
  std::vector<std::pair<std::string, std::string>> files = {
      {"config.json", LlamaConfigToHfJson(config, dtype)},
      {"README.md", ModelCard(config, dtype, provenance)}};
  bool has_generation_config = false;
  for (const char* name : kHfCopiedSourceFiles) {
    const bool generation = std::string_view(name) == "generation_config.json";
    const std::string from = provenance.tokenizer_dir.empty() ? provenance.source_dir
                             : generation                     ? std::string()
                                                              : provenance.tokenizer_dir;
    if (from.empty()) continue;
    const std::string path = (std::filesystem::path(from) / name).string();
    std::error_code error;
    if (!std::filesystem::exists(path, error)) continue;
    KELVIN_ASSIGN_OR_RETURN(
        std::string contents,
        io::ReadRegularFile(path, "the source model's file to copy into the export",
                            kMaxCopiedFileBytes));
    files.emplace_back(name, std::move(contents));
    has_generation_config |= generation;
  }
  if (!has_generation_config) {
    files.emplace_back("generation_config.json", GenerationConfigJson(config.special_tokens));
  }
  if (config.ssa.has_value()) {
    for (auto& file : SsaHfModelingFiles()) files.push_back(std::move(file));
  }
  return io::WriteHfCheckpoint(directory, tensors, size_t{5} << 30, files);
}

}  // namespace kelvin::models
