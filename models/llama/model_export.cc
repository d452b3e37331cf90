// An export in the format asked for, into a directory without the other format's files.
#include "models/llama/model_export.h"

#include <filesystem>

#include "absl/strings/str_cat.h"
#include "core/check.h"
#include "core/io/hf_checkpoint.h"
#include "core/ops/elementwise.h"
#include "models/llama/lora_merge.h"
#include "models/llama/peft_adapter_directory.h"

namespace kelvin::models {
namespace {

// Each tensor in `dtype` (those already in it untouched).
void CastAll(std::vector<std::pair<std::string, Tensor>>& tensors, DType dtype) {
  for (auto& [name, tensor] : tensors) {
    if (tensor.dtype() == dtype) continue;
    Tensor cast = Tensor::Empty(tensor.shape(), dtype);
    ops::Cast(Context::Cpu(), tensor, cast);
    tensor = cast;
  }
}

}  // namespace

absl::Status CheckExportTarget(const std::string& label, const std::string& directory,
                               ExportFormat format) {
  namespace fs = std::filesystem;
  const auto holds = [&directory](std::string_view name) {
    std::error_code error;
    return fs::exists(fs::path(directory) / name, error);
  };
  if (format == ExportFormat::kMerged && holds(kPeftAdapterConfigName)) {
    return absl::FailedPreconditionError(absl::StrCat(
        label, " holds a peft adapter (", kPeftAdapterConfigName,
        "): transformers would load that adapter over its base instead of the merged model "
        "written beside it; export the merged model to another directory, or remove the adapter"));
  }
  if (format == ExportFormat::kPeftAdapter &&
      (holds(io::kHfSingleFileName) || holds(io::kHfIndexFileName))) {
    return absl::FailedPreconditionError(absl::StrCat(
        label, " holds a model (",
        std::string(holds(io::kHfSingleFileName) ? io::kHfSingleFileName : io::kHfIndexFileName),
        "): an adapter written beside it would make the directory neither a model nor an adapter "
        "to transformers; export the adapter to another directory, or remove the model"));
  }
  return absl::OkStatus();
}

absl::Status WriteModelExport(const std::string& directory, const LlamaConfig& config,
                              std::vector<std::pair<std::string, Tensor>> tensors,
                              const HfExportProvenance& provenance, const ExportOptions& options) {
  KELVIN_CHECK(options.dtype == DType::kF32 || options.dtype == DType::kBF16)
      << "an export writes f32 or bf16";
  KELVIN_RETURN_IF_ERROR(CheckExportTarget(directory, directory, options.format));
  if (options.format == ExportFormat::kPeftAdapter) {
    std::vector<std::pair<std::string, Tensor>> adapter = PeftAdapterTensors(config, tensors);
    CastAll(adapter, options.dtype);
    return WritePeftAdapterDirectory(directory, config, adapter, provenance);
  }
  MergeLoraAdapters(config, tensors);
  CastAll(tensors, options.dtype);
  return WriteHfModelDirectory(directory, MergedConfig(config), io::HfTensorSourcesOf(tensors),
                               provenance);
}

}  // namespace kelvin::models
