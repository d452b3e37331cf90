// The command-line side of the forward-only commands: their job (a job file or a model
// directory), --device and --tokenizer.
#include "launcher/commands/inference_options.h"

#include <filesystem>

#include "absl/strings/str_cat.h"
#include "launcher/config/job_config.h"

namespace kelvin::launcher {

config::JobConfig JobOfModelDirectory(const std::string& directory) {
  config::JobConfig job;
  job.set_name(std::filesystem::path(directory).lexically_normal().filename().string());
  job.mutable_model()->set_hf_dir(directory);
  return job;
}

absl::StatusOr<config::JobConfig> LoadForwardOnlyJob(const std::string& command,
                                                     const JobArguments& job) {
  std::error_code error;
  if (!std::filesystem::exists(job.path, error)) {
    return WithWorkingDirectory(
        absl::NotFoundError(absl::StrCat(job.path, " does not exist: ", command,
                                         " takes a job file or a Hugging Face model directory")),
        {job.path});
  }
  if (std::filesystem::is_directory(job.path, error)) {
    if (!job.overrides.empty()) {
      return absl::InvalidArgumentError("--set changes a job file, not a model directory");
    }
    return JobOfModelDirectory(job.path);
  }
  return LoadJobConfig(job.path, job.overrides, JobUse::kForwardOnly);
}

std::optional<int> CheckNoSetOnModelDirectory(const JobArguments& job) {
  std::error_code error;
  if (job.overrides.empty() || !std::filesystem::is_directory(job.path, error)) return std::nullopt;
  return UsageError("--set changes a job file, not a model directory");
}

void AddDeviceOption(CommandLine& line, CLI::App* command, InferenceDevice& device) {
  line.AddValue(command, "--device", "cpu|cuda", "cpu or cuda",
                "cpu in f32 or cuda in bf16 (default: the job's training.device)",
                [&device](const std::string& text) {
                  bool cuda = false;
                  const std::string error = ParseDevice(text, cuda);
                  if (error.empty()) device = cuda ? InferenceDevice::kCuda : InferenceDevice::kCpu;
                  return error;
                });
}

void AddTokenizerOption(CommandLine& line, CLI::App* command, std::string& directory) {
  line.AddText(command, "--tokenizer", "DIR", "a directory holding tokenizer.json",
               "the model's tokenizer (tokenizer.json, tokenizer_config.json, chat template) when "
               "it has none of its own, e.g. one trained from a preset",
               directory);
}

}  // namespace kelvin::launcher
