// The model's weights and tokenizer found from the job, then each prompt through Generate.
#include "launcher/commands/generate_command.h"

#include <algorithm>
#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "launcher/commands/inference_model.h"
#include "models/generation/generate.h"

namespace kelvin::launcher {
absl::StatusOr<std::vector<std::string>> GenerateFromJob(const config::JobConfig& job,
                                                         const GenerateOptions& options) {
  KELVIN_RETURN_IF_ERROR(models::ValidateSamplingOptions(options.sampling));
  KELVIN_ASSIGN_OR_RETURN(const std::optional<data::Tokenizer> tokenizer,
                          LoadModelTokenizer(job,
                                             options.prompts.empty() && options.stop.empty()
                                                 ? std::string()
                                                 : std::string("text prompts and --stop"),
                                             "give token ids with --tokens instead"));
  std::vector<std::vector<int32_t>> prompts = options.token_prompts;
  for (const std::string& text : options.prompts) {
    std::vector<int32_t> ids;
    KELVIN_RETURN_IF_ERROR(tokenizer->Encode(text, /*add_special_tokens=*/true, ids));
    prompts.push_back(std::move(ids));
  }
  if (prompts.empty()) {
    return absl::InvalidArgumentError("no prompt: give --prompt, --prompt-file or --tokens");
  }

  KELVIN_ASSIGN_OR_RETURN(const std::unique_ptr<models::LlamaModel> model,
                          LoadInferenceModel(job, options.checkpoint));
  const models::LlamaConfig& arch = model->config();
  // The cache for `batch` sequences of the longest prompt and its new tokens (GenerateBatch names
  // the model's limit when they exceed it), not max_position_embeddings: 128K positions of an 8B
  // model are 34 GB a sequence.
  size_t longest = 0;
  for (const std::vector<int32_t>& prompt : prompts) longest = std::max(longest, prompt.size());
  const int64_t batch = std::min<int64_t>(options.batch_size, static_cast<int64_t>(prompts.size()));
  KELVIN_ASSIGN_OR_RETURN(models::LlamaDecoder decoder,
                          models::LlamaDecoder::Create(
                              *model,
                              std::min(static_cast<int64_t>(longest) + options.max_new_tokens - 1,
                                       arch.max_position_embeddings),
                              batch));
  models::GenerationRequest request;
  request.max_new_tokens = options.max_new_tokens;
  request.sampling = options.sampling;
  request.stop_ids.assign(arch.special_tokens.eos.begin(), arch.special_tokens.eos.end());
  if (tokenizer.has_value() && tokenizer->eos_id().has_value()) {
    request.stop_ids.push_back(*tokenizer->eos_id());
  }
  if (!options.stop.empty()) {
    // Every token spells at least one byte: the stop text can only end within the last
    // stop.size() tokens, so only those are decoded at each step.
    request.stop_after = [&](const std::vector<int32_t>& tokens) {
      const size_t tail = std::min(tokens.size(), options.stop.size());
      const absl::StatusOr<std::string> text = tokenizer->Decode(
          {tokens.end() - static_cast<std::ptrdiff_t>(tail), tokens.end()}, false);
      return text.ok() && text->ends_with(options.stop);
    };
  }
  std::vector<std::string> lines;
  for (size_t first = 0; first < prompts.size(); first += batch) {  // batch prompts at a time
    std::vector<models::GenerationRequest> requests;
    for (size_t p = first; p < std::min(prompts.size(), first + batch); ++p) {
      requests.push_back(request);
      requests.back().prompt = prompts[p];
    }
    KELVIN_ASSIGN_OR_RETURN(const std::vector<models::GenerationResult> results,
                            models::GenerateBatch(decoder, requests));
    for (size_t r = 0; r < results.size(); ++r) {
      const models::GenerationResult& result = results[r];
      nlohmann::ordered_json line = {{"prompt_tokens", requests[r].prompt},
                                     {"tokens", result.tokens}};
      if (tokenizer.has_value()) {
        KELVIN_ASSIGN_OR_RETURN(const std::string text,
                                tokenizer->Decode(result.tokens, /*skip_special_tokens=*/true));
        // Bytes that are not UTF-8 (a token cut inside a character) are replaced, not refused.
        line["text"] = text;
      }
      line["finish_reason"] = result.finish_reason;
      if (options.logprobs) line["logprobs"] = result.logprobs;
      lines.push_back(line.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
    }
  }
  return lines;
}

}  // namespace kelvin::launcher
