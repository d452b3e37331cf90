// prepare-data: the samples encoded (text with the model's tokenizer), written, and the job's data
// section for them printed.
#include "launcher/commands/prepare_data_command.h"

#include <csignal>
#include <cstdio>
#include <memory>
#include <optional>

#include "core/io/atomic_file.h"
#include "data/chat_template/template.h"
#include "data/sft/jsonl_samples.h"
#include "launcher/config/job_config.h"

namespace kelvin::launcher {
namespace {

struct PrepareDataArguments {
  std::string samples, out, tokenizer, chat_date;
};

int PrepareData(const PrepareDataArguments& a) {
  // A batch job's warning signals end it as they would, without its temporaries.
  for (const int signal : {SIGUSR1, SIGUSR2}) io::RemoveTemporariesOn(signal);
  std::optional<data::TextSampleEncoder> encoder;
  if (!a.tokenizer.empty()) {
    absl::StatusOr<data::TextSampleEncoder> loaded =
        data::TextSampleEncoder::FromDirectory(a.tokenizer, a.chat_date);
    if (!loaded.ok()) return Fail(WithWorkingDirectory(loaded.status(), {a.tokenizer}));
    encoder = *std::move(loaded);
  }
  const absl::StatusOr<data::PreparedSamples> prepared =
      data::PrepareJsonlSamples(a.samples, a.out, encoder ? &*encoder : nullptr);
  if (!prepared.ok()) return Fail(WithWorkingDirectory(prepared.status(), {a.samples, a.out}));
  std::printf("%s", data::DescribePreparedSamples(*prepared).c_str());
  return 0;
}

}  // namespace

void AddPrepareDataCommand(CommandLine& line) {
  auto a = std::make_shared<PrepareDataArguments>();
  CLI::App* command = line.AddCommand(
      "prepare-data", "fine-tuning samples into a Megatron dataset and its loss mask",
      "SAMPLES.jsonl holds one JSON object per line: \"input_ids\", optional \"labels\" with -100\n"
      "where there is no loss, or \"loss_mask\". With --tokenizer, lines may also be\n"
      "{\"text\": ...} (BOS + text + eos, loss on all), {\"prompt\": ..., \"completion\": ...}\n"
      "(loss on the completion) or {\"messages\": [{\"role\", \"content\"}, ...]} with optional\n"
      "\"tools\" (rendered by the model's own chat template; loss on the assistant's turns).\n"
      "Prints the job's data section for the written dataset.",
      [a] { return PrepareData(*a); });
  line.AddInput(command, a->samples, "SAMPLES.jsonl", "samples file");
  line.AddValue(command, "--out", "PREFIX", "a path prefix",
                "writes PREFIX.bin/.idx and PREFIX_loss_mask.bin/.idx",
                [a](const std::string& text) {
                  a->out = text;
                  return data::OutputPrefixProblem(text);
                })
      ->required();
  line.AddText(command, "--tokenizer", "DIR", "the model directory",
               "the model directory whose tokenizer.json encodes text", a->tokenizer);
  // Checked here, so that a date no sample uses (no --tokenizer, no chat line) is not accepted.
  line.AddValue(command, "--chat-date", "YYYY-MM-DD", "a date",
                "what the chat template's strftime_now() formats (e.g. Llama-3.1's \"Today "
                "Date\"), for reproducible data; default: today",
                [a](const std::string& text) {
                  if (!chat_template::ParseFixedDate(text, "--chat-date").ok()) {
                    return std::string(
                        "give a date of the calendar: YYYY-MM-DD or "
                        "YYYY-MM-DDTHH:MM:SS");
                  }
                  a->chat_date = text;
                  return std::string();
                });
}

}  // namespace kelvin::launcher
