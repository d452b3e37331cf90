// The model's weights and tokenizer found from the job, then each prompt through Generate.
#include "launcher/commands/generate_command.h"

#include <algorithm>
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "core/io/regular_file.h"
#include "core/logging.h"
#include "data/tokenizer/utf8.h"
#include "launcher/commands/generate_chat.h"
#include "launcher/commands/inference_options.h"
#include "launcher/commands/process_launch.h"
#include "launcher/config/job_config.h"
#include "models/generation/generate.h"

namespace kelvin::launcher {

absl::Status CheckGenerateOptions(const GenerateOptions& options) {
  KELVIN_RETURN_IF_ERROR(models::ValidateSamplingOptions(options.sampling));
  if (options.max_new_tokens < 1 || options.max_new_tokens > models::kMaxNewTokens) {
    return absl::InvalidArgumentError(absl::StrCat("--max-new-tokens ", options.max_new_tokens,
                                                   ": must be in [1, ", models::kMaxNewTokens,
                                                   "] (no model has more positions)"));
  }
  if (const std::optional<size_t> bad = data::FirstInvalidUtf8(options.stop)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--stop: the text is not valid UTF-8 at byte ", *bad, " (of ", options.stop.size(),
        "); give the stop text in UTF-8, as the generated text is"));
  }
  return absl::OkStatus();
}

models::GenerationRequest BaseRequest(const GenerateOptions& options,
                                      const models::LlamaConfig& arch,
                                      const std::optional<data::Tokenizer>& tokenizer) {
  models::GenerationRequest request;
  request.max_new_tokens = options.max_new_tokens;
  request.sampling = options.sampling;
  request.stop_ids.assign(arch.special_tokens.eos.begin(), arch.special_tokens.eos.end());
  if (tokenizer.has_value() && !options.allow_unspellable) {
    // A model whose vocab_size exceeds the tokenizer's ids (embeddings padded to a round size, as
    // Qwen2.5's are) can sample an id with no text: 1 where the tokenizer has a token of the id.
    std::vector<uint8_t> spellable(static_cast<size_t>(arch.vocab_size), 0);
    for (int64_t id = 0; id < arch.vocab_size; ++id) {
      spellable[id] = tokenizer->HasToken(static_cast<int32_t>(id)) ? 1 : 0;
    }
    const int64_t unspellable = std::count(spellable.begin(), spellable.end(), uint8_t{0});
    if (unspellable > 0) {
      KLOG_RANK0(INFO) << unspellable << " of the model's " << arch.vocab_size
                       << " token ids have no text in the tokenizer: sampling leaves them out "
                          "(--allow-unspellable draws them too)";
      request.allowed = std::make_shared<const std::vector<uint8_t>>(std::move(spellable));
    }
  }
  if (tokenizer.has_value() && tokenizer->eos_id().has_value()) {
    request.stop_ids.push_back(*tokenizer->eos_id());
  }
  if (!options.stop.empty()) {
    // Every token spells at least one byte: the stop text can only end within the last
    // stop.size() tokens, so only those are decoded at each step.
    request.stop_after = [&options, &tokenizer](const std::vector<int32_t>& tokens) {
      const size_t tail = std::min(tokens.size(), options.stop.size());
      const absl::StatusOr<std::string> text = tokenizer->Decode(
          {tokens.end() - static_cast<std::ptrdiff_t>(tail), tokens.end()}, false);
      return text.ok() && text->ends_with(options.stop);
    };
  }
  return request;
}

absl::StatusOr<std::vector<models::GenerationResult>> GeneratePrompts(
    const models::LlamaModel& model, const std::vector<std::vector<int32_t>>& prompts,
    const models::GenerationRequest& base, int64_t batch_size, models::GenerationTiming* timing) {
  // The cache for `batch` sequences of the longest prompt and its new tokens (GenerateBatch names
  // the model's limit when they exceed it), not the model's position limit: 128K positions of an 8B
  // model are 34 GB a sequence.
  size_t longest = 0;
  for (const std::vector<int32_t>& prompt : prompts) longest = std::max(longest, prompt.size());
  const int64_t batch = std::min<int64_t>(batch_size, static_cast<int64_t>(prompts.size()));
  KELVIN_ASSIGN_OR_RETURN(
      models::LlamaDecoder decoder,
      models::LlamaDecoder::Create(model,
                                   std::min(static_cast<int64_t>(longest) + base.max_new_tokens - 1,
                                            model.config().PositionLimit()),
                                   batch));
  std::vector<models::GenerationResult> results;
  for (size_t first = 0; first < prompts.size(); first += batch) {  // batch prompts at a time
    std::vector<models::GenerationRequest> requests;
    for (size_t p = first; p < std::min(prompts.size(), first + batch); ++p) {
      requests.push_back(base);
      requests.back().prompt = prompts[p];
    }
    KELVIN_ASSIGN_OR_RETURN(std::vector<models::GenerationResult> batch_results,
                            models::GenerateBatch(decoder, requests, timing));
    for (models::GenerationResult& result : batch_results) results.push_back(std::move(result));
  }
  return results;
}

nlohmann::ordered_json GenerationJson(const std::vector<int32_t>& prompt,
                                      const models::GenerationResult& result,
                                      const std::optional<data::Tokenizer>& tokenizer,
                                      bool text_without_stop_id, bool logprobs,
                                      int64_t* failed_prompts) {
  nlohmann::ordered_json line = {{"prompt_tokens", prompt}, {"tokens", result.tokens}};
  if (tokenizer.has_value()) {
    const bool drop = text_without_stop_id && result.finish_reason == "eos";
    const absl::StatusOr<std::string> text =
        tokenizer->Decode({result.tokens.begin(), result.tokens.end() - (drop ? 1 : 0)},
                          /*skip_special_tokens=*/true);
    // Bytes that are not UTF-8 (a token cut inside a character) are replaced, not refused. A
    // token without text fails this prompt's text alone.
    if (text.ok()) {
      line["text"] = *text;
    } else {
      line["error"] = std::string(text.status().message());
      if (failed_prompts != nullptr) ++*failed_prompts;
    }
  }
  line["finish_reason"] = result.finish_reason;
  if (logprobs) line["logprobs"] = result.logprobs;
  return line;
}

std::string JsonLine(const nlohmann::ordered_json& line) {
  return line.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

absl::StatusOr<std::vector<std::string>> GenerateFromJob(
    const config::JobConfig& job, const GenerateOptions& options,
    const training::TrainingPlacement& placement, models::GenerationTiming* timing,
    parallel::Communicator* tp, int64_t* failed_prompts) {
  KELVIN_RETURN_IF_ERROR(CheckGenerateOptions(options));
  KELVIN_ASSIGN_OR_RETURN(
      const std::optional<data::Tokenizer> tokenizer,
      inference::LoadModelTokenizer(job, options.tokenizer,
                                    options.prompts.empty() && options.stop.empty()
                                        ? std::string()
                                        : std::string("text prompts and --stop"),
                                    "token ids with --tokens"));
  std::vector<std::vector<int32_t>> prompts = options.token_prompts;
  for (size_t p = 0; p < options.prompts.size(); ++p) {
    std::vector<int32_t> ids;
    if (const absl::Status encoded =
            tokenizer->Encode(options.prompts[p], /*add_special_tokens=*/true, ids);
        !encoded.ok()) {
      const std::string source = p < options.prompt_sources.size()
                                     ? options.prompt_sources[p]
                                     : absl::StrCat("text prompt ", p + 1);
      return absl::Status(encoded.code(), absl::StrCat(source, ": ", encoded.message()));
    }
    prompts.push_back(std::move(ids));
  }
  if (prompts.empty()) {
    return absl::InvalidArgumentError("no prompt: give --prompt, --prompt-file or --tokens");
  }

  KELVIN_ASSIGN_OR_RETURN(const std::unique_ptr<models::LlamaModel> model,
                          inference::LoadInferenceModel(job, options.checkpoint, placement, tp));
  const models::GenerationRequest base = BaseRequest(options, model->config(), tokenizer);
  KELVIN_ASSIGN_OR_RETURN(const std::vector<models::GenerationResult> results,
                          GeneratePrompts(*model, prompts, base, options.batch_size, timing));
  std::vector<std::string> lines;
  for (size_t p = 0; p < results.size(); ++p) {
    lines.push_back(
        JsonLine(GenerationJson(prompts[p], results[p], tokenizer,
                                /*text_without_stop_id=*/false, options.logprobs, failed_prompts)));
  }
  return lines;
}

absl::Status AddPromptFile(const std::string& path, GenerateOptions& options) {
  KELVIN_ASSIGN_OR_RETURN(const std::string text,
                          io::ReadRegularFile(path, "prompt file", uint64_t{1} << 30));
  const size_t prompts_before = options.prompts.size();
  int64_t number = 0;  // of the line, from 1
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    ++number;
    absl::ConsumeSuffix(&line, "\r");  // a CRLF line end (a file written on Windows)
    if (absl::StripAsciiWhitespace(line).empty()) continue;
    options.prompts.emplace_back(line);
    options.prompt_sources.push_back(absl::StrCat(path, " line ", number));
  }
  if (options.prompts.size() == prompts_before) {
    return absl::InvalidArgumentError(
        absl::StrCat("prompt file ", path,
                     " holds no prompt: every line is blank (a prompt is a line with "
                     "text)"));
  }
  return absl::OkStatus();
}

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
  models::GenerationTiming timing;
  int64_t failed = 0;
  absl::StatusOr<std::vector<std::string>> lines;
  if (a.chat == "-") {
    const absl::Status chatted = ChatInteractively(
        job, a.options, a.chat_mode, StandardInputLines(tp),
        [&tp](const std::string& reply) {
          if (tp.rank() != 0) return;
          std::printf("%s\n", reply.c_str());
          std::fflush(stdout);
        },
        placement, &timing, &tp);
    if (!chatted.ok()) return Fail(WithWorkingDirectory(chatted, job));
    lines = std::vector<std::string>();  // printed turn by turn
  } else if (!a.chat.empty()) {
    const absl::StatusOr<std::vector<Conversation>> conversations = ReadConversations(a.chat);
    if (!conversations.ok()) return Fail(WithWorkingDirectory(conversations.status(), {a.chat}));
    lines = GenerateChatsFromJob(job, *conversations, a.options, a.chat_mode, placement, &timing,
                                 &tp, &failed);
  } else {
    if (!a.prompt_file.empty()) {
      const absl::Status read = AddPromptFile(a.prompt_file, a.options);
      if (!read.ok()) return Fail(WithWorkingDirectory(read, {a.prompt_file}));
    }
    lines = GenerateFromJob(job, a.options, placement, &timing, &tp, &failed);
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
  if (const absl::Status checked = CheckGenerateOptions(o); !checked.ok()) {
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
                                      models::kMaxNewTokens);
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
