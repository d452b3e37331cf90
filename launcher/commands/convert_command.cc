// Convert streams a checkpoint's logical tensors into the Hugging Face directory.
#include "launcher/commands/convert_command.h"

#include <algorithm>
#include <memory>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "core/check.h"
#include "core/logging.h"
#include "core/ops/elementwise.h"
#include "core/status.h"
#include "launcher/commands/inference_options.h"
#include "launcher/commands/process_launch.h"
#include "launcher/config/job_config.h"
#include "models/llama/model_export.h"
#include "training/checkpoint/training_state.h"
#include "training/job/job_setup.h"

namespace kelvin::launcher {
namespace {

// The export's bos and eos ids from the tokenizer given with it (tokenizer_config.json's
// bos_token and eos_token): its bos replaces the model's; its eos does unless it is one of the
// model's eos ids already (Llama-3 Instruct ends a turn at several).
void SetSpecialTokensOf(const data::Tokenizer& tokenizer, models::SpecialTokenIds& ids) {
  if (tokenizer.bos_id().has_value()) ids.bos = *tokenizer.bos_id();
  if (tokenizer.eos_id().has_value() &&
      std::find(ids.eos.begin(), ids.eos.end(), *tokenizer.eos_id()) == ids.eos.end()) {
    ids.eos = {*tokenizer.eos_id()};
  }
}

// A frozen-base job's checkpoint (the trainable tensors alone) over its base, in a model on the CPU
// (f32, as the checkpoint holds the tensors), written in `format`.
absl::Status ConvertOverTheBase(const config::JobConfig& job, const models::LlamaConfig& arch,
                                const std::string& directory, const ConvertOptions& options,
                                models::ExportFormat format,
                                const models::HfExportProvenance& provenance) {
  KELVIN_ASSIGN_OR_RETURN(
      const training::TrainingPlacement placement,
      inference::ResolveInferencePlacement(job, inference::InferenceDevice::kCpu, 0));
  KELVIN_ASSIGN_OR_RETURN(const std::unique_ptr<models::LlamaModel> model,
                          inference::LoadInferenceModel(job, options.checkpoint, placement));
  return models::WriteModelExport(directory, arch, model->GatherWholeParameters(), provenance,
                                  {.format = format, .dtype = options.dtype});
}

}  // namespace

absl::StatusOr<int64_t> ConvertCheckpointToHf(const config::JobConfig& job,
                                              const std::string& directory,
                                              const ConvertOptions& options) {
  if (job.checkpoint().dir().empty()) {
    return absl::InvalidArgumentError(
        "kelvin convert reads the job's checkpoints: set checkpoint.dir");
  }
  const bool flag = options.format != config::ExportFormat::AUTO;
  KELVIN_ASSIGN_OR_RETURN(
      const models::ExportFormat format,
      training::ResolveExportFormat(job, flag ? options.format : job.training().export_format(),
                                    flag ? "--format" : "training.export_format"));
  KELVIN_RETURN_IF_ERROR(
      training::CheckExportDirectory(absl::StrCat("--out ", directory), directory, job, format));
  if (format == models::ExportFormat::kPeftAdapter && !options.tokenizer.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--tokenizer ", options.tokenizer,
        " goes into a merged export, but this writes a peft adapter, which carries no tokenizer "
        "(its users load the base's): drop --tokenizer, or give --format merged"));
  }
  KELVIN_CHECK(options.dtype == DType::kF32 || options.dtype == DType::kBF16)
      << "convert writes f32 or bf16";
  KELVIN_ASSIGN_OR_RETURN(models::LlamaConfig arch,
                          training::ResolveModelArchitecture(job.model()));
  if (!options.tokenizer.empty()) {  // checked before the checkpoint is read
    KELVIN_ASSIGN_OR_RETURN(
        const data::Tokenizer tokenizer,
        inference::LoadTokenizerOfModel(
            options.tokenizer, absl::StrCat("--tokenizer ", options.tokenizer), arch.vocab_size));
    SetSpecialTokensOf(tokenizer, arch.special_tokens);
  }
  KELVIN_ASSIGN_OR_RETURN(const std::optional<std::string> chosen,
                          training::ChooseCheckpoint(job.checkpoint().dir(), options.checkpoint));
  if (!chosen.has_value()) {
    return training::NoCompleteCheckpointError(job.checkpoint().dir(), ": nothing to convert");
  }
  KELVIN_ASSIGN_OR_RETURN(const training::CheckpointReader reader,
                          training::OpenJobCheckpoint(*chosen, job.name()));
  KELVIN_RETURN_IF_ERROR(
      training::CheckNoOtherTensors(reader, training::CheckpointTensorNames(arch)));
  models::HfExportProvenance provenance = training::ExportProvenanceOf(job);
  provenance.tokenizer_dir = options.tokenizer;
  provenance.steps = reader.index().steps_completed;
  provenance.eval_loss = reader.index().eval_loss;  // the training loss is not in checkpoints
  if (arch.trainable.has_value()) {
    KELVIN_RETURN_IF_ERROR(ConvertOverTheBase(job, arch, directory, options, format, provenance));
    return reader.index().steps_completed;
  }
  std::vector<io::HfTensorSource> tensors;  // the whole model's, in Hugging Face order
  for (const models::LlamaParameterSpec& spec :
       models::StageParameterSpecs(arch, models::StageLayoutOf(arch, 0, 1, 1))) {
    // Every tensor is checked (held whole, exactly once) before any file is written.
    KELVIN_RETURN_IF_ERROR(reader.Check(spec.name, io::TensorRegion::Whole(spec.full_shape)));
    const DType dtype = options.dtype;
    tensors.push_back(
        {spec.name, spec.full_shape, dtype, [&reader, spec, dtype]() -> absl::StatusOr<Tensor> {
           KELVIN_ASSIGN_OR_RETURN(
               const Tensor master,
               reader.Read(spec.name, io::TensorRegion::Whole(spec.full_shape)));
           if (master.dtype() == dtype) return master.View(spec.full_shape);
           Tensor converted = Tensor::Empty(spec.full_shape, dtype);
           ops::Cast(Context::Cpu(), master.View(spec.full_shape), converted);
           return converted;
         }});
  }
  KELVIN_RETURN_IF_ERROR(models::WriteHfModelDirectory(directory, arch, tensors, provenance));
  return reader.index().steps_completed;
}

namespace {

struct ConvertArguments {
  JobArguments job;
  std::string out;
  ConvertOptions options;
};

int Convert(const ConvertArguments& a) {
  if (const std::optional<int> error = CheckCheckpointChoice("convert", a.options.checkpoint)) {
    return *error;
  }
  const absl::StatusOr<config::JobConfig> job =
      LoadJobConfig(a.job.path, a.job.overrides, JobUse::kForwardOnly);
  if (!job.ok()) return Fail(job.status());
  const absl::StatusOr<int64_t> step = ConvertCheckpointToHf(*job, a.out, a.options);
  if (!step.ok()) return Fail(WithWorkingDirectory(step.status(), *job));
  KLOG(INFO) << "converted the checkpoint of step " << *step << " in " << job->checkpoint().dir()
             << " to " << a.out << " (Hugging Face format)";
  return 0;
}

}  // namespace

void AddConvertCommand(CommandLine& line) {
  auto a = std::make_shared<ConvertArguments>();
  CLI::App* command = line.AddCommand(
      "convert", "a checkpoint as a Hugging Face model directory",
      "The latest checkpoint of checkpoint.dir (or --step N, --best): one process, no GPU,\n"
      "whatever layout wrote it. The job needs only its model fields and checkpoint.dir. A\n"
      "LoRA job's checkpoint goes over its base and is written merged or as a peft adapter\n"
      "(--format). A merged export carries model.hf_dir's tokenizer files, or --tokenizer\n"
      "DIR's (tokenizer.json, tokenizer_config.json, special_tokens_map.json,\n"
      "chat_template.jinja) with its bos and eos ids in config.json and\n"
      "generation_config.json.",
      [a] { return RunOnRankZero([a] { return Convert(*a); }); });
  AddJobArguments(line, command, a->job);
  line.AddText(command, "--out", "DIR", "the directory to write the Hugging Face model to",
               "the Hugging Face directory to write", a->out)
      ->required();
  AddCheckpointChoice(line, command, a->options.checkpoint);
  AddTokenizerOption(line, command, a->options.tokenizer);
  line.AddValue(command, "--dtype", "f32|bf16", "f32 or bf16",
                "of the written weights (default f32: the exact masters)",
                [a](const std::string& text) {
                  if (text != "f32" && text != "bf16") return std::string("use f32 or bf16");
                  a->options.dtype = text == "bf16" ? DType::kBF16 : DType::kF32;
                  return std::string();
                });
  line.AddValue(command, "--format", "merged|peft_adapter", "merged or peft_adapter",
                "what to write (default: training.export_format; AUTO there is peft_adapter for a "
                "job with model.lora, else merged)",
                [a](const std::string& text) {
                  const std::string upper = absl::AsciiStrToUpper(text);
                  if (upper != "MERGED" && upper != "PEFT_ADAPTER") {
                    return std::string(
                        "use merged (the whole model, LoRA merged in) or "
                        "peft_adapter (the adapters for peft)");
                  }
                  config::ExportFormat::Format_Parse(upper, &a->options.format);
                  return std::string();
                });
}

}  // namespace kelvin::launcher
