// The model's weights and tokenizer found from the job, then each prompt through the generation
// loop.
#include "inference/text_generation.h"

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
#include "inference/forward_model.h"
#include "inference/generation_loop.h"

namespace kelvin::inference {

absl::Status CheckGenerateOptions(const GenerateOptions& options) {
  KELVIN_RETURN_IF_ERROR(ValidateSamplingOptions(options.sampling));
  if (options.max_new_tokens < 1 || options.max_new_tokens > kMaxNewTokens) {
    return absl::InvalidArgumentError(absl::StrCat("--max-new-tokens ", options.max_new_tokens,
                                                   ": must be in [1, ", kMaxNewTokens,
                                                   "] (no model has more positions)"));
  }
  if (const std::optional<size_t> bad = data::FirstInvalidUtf8(options.stop)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--stop: the text is not valid UTF-8 at byte ", *bad, " (of ", options.stop.size(),
        "); give the stop text in UTF-8, as the generated text is"));
  }
  return absl::OkStatus();
}

GenerationRequest BaseRequest(const GenerateOptions& options, const models::LlamaConfig& arch,
                              const std::optional<data::Tokenizer>& tokenizer) {
  GenerationRequest request;
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

absl::StatusOr<std::vector<GenerationResult>> GeneratePrompts(
    const models::LlamaModel& model, const std::vector<std::vector<int32_t>>& prompts,
    const GenerationRequest& base, int64_t batch_size, GenerationTiming* timing) {
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
  std::vector<GenerationResult> results;
  for (size_t first = 0; first < prompts.size(); first += batch) {  // batch prompts at a time
    std::vector<GenerationRequest> requests;
    for (size_t p = first; p < std::min(prompts.size(), first + batch); ++p) {
      requests.push_back(base);
      requests.back().prompt = prompts[p];
    }
    KELVIN_ASSIGN_OR_RETURN(std::vector<GenerationResult> batch_results,
                            GenerateBatch(decoder, requests, timing));
    for (GenerationResult& result : batch_results) results.push_back(std::move(result));
  }
  return results;
}

nlohmann::ordered_json GenerationJson(const std::vector<int32_t>& prompt,
                                      const GenerationResult& result,
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
    const training::TrainingPlacement& placement, GenerationTiming* timing,
    parallel::Communicator* tp, int64_t* failed_prompts) {
  KELVIN_RETURN_IF_ERROR(CheckGenerateOptions(options));
  KELVIN_ASSIGN_OR_RETURN(const std::optional<data::Tokenizer> tokenizer,
                          LoadModelTokenizer(job, options.tokenizer,
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
                          LoadInferenceModel(job, options.checkpoint, placement, tp));
  const GenerationRequest base = BaseRequest(options, model->config(), tokenizer);
  KELVIN_ASSIGN_OR_RETURN(const std::vector<GenerationResult> results,
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

}  // namespace kelvin::inference
