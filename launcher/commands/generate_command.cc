// The command line of `kelvin generate`: its options parsed into inference::GenerateOptions (or a
// chat's), then the prompts or conversations generated (inference/text_generation.h,
// inference/chat_generation.h) and printed on world rank 0.
#include "launcher/commands/generate_command.h"

#include <cstdio>
#include <memory>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "core/logging.h"
#include "inference/chat_generation.h"
#include "inference/text_generation.h"
#include "launcher/commands/inference_options.h"
#include "launcher/commands/process_launch.h"
#include "launcher/config/job_config.h"

namespace kelvin::launcher {

using inference::ChatModeOptions;
using inference::GenerateOptions;

namespace {

struct GenerateArguments {
  JobArguments job;
  GenerateOptions options;
  std::string prompt_file;
  std::string chat;  // --chat FILE, or "-" for standard input ("" none)
  ChatModeOptions chat_mode;
  InferenceDevice device = InferenceDevice::kJob;
};

// The prompts (with --prompt-file's lines) or the --chat conversations, then on world rank 0 one
// JSON line per prompt on stdout (a conversation on standard input: a reply per line, as it
// comes). The model runs where `placement` says; `tp`: the group the model is split over (one
// rank: this process holds it whole).
int Generate(GenerateArguments a, const config::JobConfig& job,
             const training::TrainingPlacement& placement, parallel::Communicator& tp) {
  inference::GenerationTiming timing;
  int64_t failed = 0;
  absl::StatusOr<std::vector<std::string>> lines;
  if (a.chat == "-") {
    const absl::Status chatted = inference::ChatInteractively(
        job, a.options, a.chat_mode, inference::StandardInputLines(tp),
        [&tp](const std::string& reply) {
          if (tp.rank() != 0) return;
          std::printf("%s\n", reply.c_str());
          std::fflush(stdout);
        },
        placement, &timing, &tp);
    if (!chatted.ok()) return Fail(WithWorkingDirectory(chatted, job));
    lines = std::vector<std::string>();  // printed turn by turn
  } else if (!a.chat.empty()) {
    const absl::StatusOr<std::vector<inference::Conversation>> conversations =
        inference::ReadConversations(a.chat);
    if (!conversations.ok()) return Fail(WithWorkingDirectory(conversations.status(), {a.chat}));
    lines = inference::GenerateChatsFromJob(job, *conversations, a.options, a.chat_mode, placement,
                                            &timing, &tp, &failed);
  } else {
    if (!a.prompt_file.empty()) {
      const absl::Status read = inference::AddPromptFile(a.prompt_file, a.options);
      if (!read.ok()) return Fail(WithWorkingDirectory(read, {a.prompt_file}));
    }
    lines = inference::GenerateFromJob(job, a.options, placement, &timing, &tp, &failed);
  }
  if (!lines.ok()) return Fail(WithWorkingDirectory(lines.status(), job));
  // Every rank generated the same tokens, and fails alike when a prompt has no text.
  const absl::Status complete =
      failed == 0 ? absl::OkStatus()
                  : absl::DataLossError(absl::StrCat(
                        failed, " of ", lines->size(),
                        " prompts have no text: their lines say why in \"error\" (the others are "
                        "complete)"));
  if (tp.rank() != 0) return complete.ok() ? 0 : Fail(complete);
  for (const std::string& line : *lines) std::printf("%s\n", line.c_str());
  std::fflush(stdout);  // the lines, then the log's summary
  KLOG(INFO) << absl::StrFormat(
      "generated: prefill %d tokens in %.3f s, decode %d tokens in %.3f s (%.1f tokens/s)",
      timing.prompt_tokens, timing.prefill_seconds, timing.decoded_tokens, timing.decode_seconds,
      timing.decode_seconds > 0 ? static_cast<double>(timing.decoded_tokens) / timing.decode_seconds
                                : 0.0);
  return complete.ok() ? 0 : Fail(complete);
}

int RunGenerate(const GenerateArguments& a) {
  const GenerateOptions& o = a.options;
  // The options' own rules (sampling, budget, stop text) are the command line's: exit 2.
  if (const absl::Status checked = inference::CheckGenerateOptions(o); !checked.ok()) {
    return UsageError(std::string(checked.message()));
  }
  if (a.chat.empty() && o.prompts.empty() && o.token_prompts.empty() && a.prompt_file.empty()) {
    return UsageError("no prompt: give --prompt, --prompt-file, --tokens or --chat");
  }
  if (!a.chat.empty() &&
      (!o.prompts.empty() || !o.token_prompts.empty() || !a.prompt_file.empty())) {
    return UsageError("generate takes --chat or --prompt/--prompt-file/--tokens, not both");
  }
  if (a.chat.empty() && (!a.chat_mode.system.empty() || a.chat_mode.json)) {
    return UsageError(
        "--system and --json shape the conversations of --chat: add --chat FILE or "
        "--chat -");
  }
  if (a.chat_mode.json && a.chat != "-") {
    return UsageError(
        "--json prints the replies of --chat - as JSON lines; --chat FILE prints "
        "JSON lines already");
  }
  if (const std::optional<int> error = CheckCheckpointChoice("generate", a.options.checkpoint)) {
    return *error;
  }
  if (const std::optional<int> error = CheckNoSetOnModelDirectory(a.job)) return *error;
  return RunSplitOverProcesses(
      "generate", a.device, [&a] { return LoadForwardOnlyJob("generate", a.job); },
      [&a](const config::JobConfig& job, const training::TrainingPlacement& placement,
           parallel::Communicator& tp) { return Generate(a, job, placement, tp); });
}

}  // namespace

void AddGenerateCommand(CommandLine& line) {
  auto a = std::make_shared<GenerateArguments>();
  GenerateOptions& o = a->options;
  CLI::App* command = line.AddCommand(
      "generate", "text from a model directory or a job's model, one JSON line per prompt",
      "JOB is a Hugging Face model directory or a job file (only its model fields are needed).\n"
      "The weights: the job's checkpoint, else model.hf_dir's; with a KV cache on --device (f32\n"
      "on the CPU, bf16 on CUDA), one process or, under mpirun / srun, the model split over the\n"
      "processes (tensor parallelism, a GPU each). Text prompts and --stop need the model's\n"
      "tokenizer: model.hf_dir's tokenizer.json, or --tokenizer DIR; --chat also its chat\n"
      "template.",
      [a] { return RunGenerate(*a); });
  AddJobArguments(line, command, a->job);
  line.AddValue(command, "--prompt", "TEXT", "a text", "a prompt (repeatable)",
                [&o](const std::string& text) {
                  o.prompts.push_back(text);
                  o.prompt_sources.push_back(absl::StrCat("--prompt ", o.prompts.size()));
                  return std::string();
                },
                {.repeatable = true, .allow_empty = true});
  line.AddText(command, "--prompt-file", "FILE", "a file of one prompt per line",
               "a file of prompts, one per line (LF or CRLF line ends; the CR is not part of the "
               "prompt; blank lines are skipped)",
               a->prompt_file);
  line.AddValue(command, "--tokens", "1,2,3", "token ids separated by commas",
                "a prompt of token ids (repeatable)",
                [&o](const std::string& text) {
                  std::vector<int32_t> ids;
                  for (const absl::string_view part : absl::StrSplit(text, ',')) {
                    int32_t id = 0;
                    if (!absl::SimpleAtoi(part, &id) || id < 0) {
                      return std::string("give token ids >= 0 separated by commas");
                    }
                    ids.push_back(id);
                  }
                  o.token_prompts.push_back(std::move(ids));
                  return std::string();
                },
                {.repeatable = true});
  line.AddValue(command, "--max-new-tokens", "N", "a token count >= 1",
                "the most tokens generated per prompt (default 64)", [&o](const std::string& text) {
                  return ParseInteger(text, 1, "a token count >= 1", o.max_new_tokens,
                                      inference::kMaxNewTokens);
                });
  line.AddValue(command, "--temperature", "T", "a number >= 0",
                "the sampling temperature (default 0: greedy)", [&o](const std::string& text) {
                  return ParseNumber(text, "a number", o.sampling.temperature);
                });
  line.AddValue(command, "--top-k", "K", "a count >= 0",
                "sample among the K likeliest tokens (default 0: every token)",
                [&o](const std::string& text) {
                  return ParseInteger(text, 0, "a count >= 0 (0: every token)", o.sampling.top_k);
                });
  line.AddValue(
      command, "--top-p", "P", "a number in (0, 1]",
      "sample among the likeliest tokens of this probability mass (default 1)",
      [&o](const std::string& text) { return ParseNumber(text, "a number", o.sampling.top_p); });
  line.AddValue(command, "--seed", "S", "an integer >= 0", "the sampling seed (default 0)",
                [&o](const std::string& text) {
                  int64_t seed = 0;
                  const std::string problem = ParseInteger(text, 0, "an integer >= 0", seed);
                  o.sampling.seed = static_cast<uint64_t>(seed);
                  return problem;
                });
  line.AddText(command, "--stop", "TEXT", "a text",
               "stop a prompt once its generated text ends with TEXT", o.stop);
  line.AddFlag(command, "--logprobs", "each token's log-probability in the output", o.logprobs);
  line.AddFlag(command, "--allow-unspellable",
               "let sampling draw ids the tokenizer cannot spell (a vocabulary padded beyond the "
               "tokenizer's ids; they have no text)",
               o.allow_unspellable);
  line.AddValue(command, "--batch-size", "N", "a prompt count >= 1",
                "prompts decoded together (default 8)", [&o](const std::string& text) {
                  return ParseInteger(text, 1, "a prompt count >= 1", o.batch_size);
                });
  line.AddText(command, "--chat", "FILE|-", "a JSON Lines file, or - for standard input",
               "conversations continued through the model's chat template: a JSON Lines file of "
               "{\"messages\": [...]} lines (a JSON line each), or - for one typed on standard "
               "input (a reply per line)",
               a->chat);
  line.AddText(command, "--system", "TEXT", "a text",
               "--chat: a system message put first in each conversation", a->chat_mode.system);
  line.AddFlag(command, "--json",
               "--chat -: each reply as a JSON line (the conversation, ids and text), not text",
               a->chat_mode.json);
  AddTokenizerOption(line, command, o.tokenizer);
  AddCheckpointChoice(line, command, o.checkpoint);
  AddDeviceOption(line, command, a->device);
}

}  // namespace kelvin::launcher
