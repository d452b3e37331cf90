// Chat (`kelvin generate --chat`): conversations continued through the model's own chat template,
// from a JSON Lines file (one {"messages": [...]} per line, as prepare-data reads them) or typed on
// standard input turn by turn; each rendered with the generation prompt and generated until one of
// the template's end-of-turn ids, an eos id or the token budget.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "configs/kelvin.pb.h"
#include "core/status.h"
#include "data/sft/chat_messages.h"
#include "inference/text_generation.h"
#include "parallel/comm/communicator.h"

namespace kelvin::inference {

struct ChatModeOptions {
  // --system: a system message put first in each conversation ("" none: the template's default
  // system prompt, if it has one, applies). A conversation with a system message of its own is
  // then an error naming it.
  std::string system;
  bool json = false;  // --json: the conversation on standard input prints JSON lines, not text
};

struct Conversation {
  data::ChatMessages chat;
  std::string source;  // where it came from, for errors ("chats.jsonl:7")
};

// The conversations of a --chat FILE (at most 1 GiB): one per non-blank line (LF or CRLF line
// ends), each checked as prepare-data checks a chat line (data::ParseChatLine); a file without one
// is an error. Keys other than "messages" and "tools" are ignored with a warning naming them.
absl::StatusOr<std::vector<Conversation>> ReadConversations(const std::string& path);

// One JSON line per conversation, in order: {"messages": the conversation as the template saw it
// (--system's message first), then GenerateFromJob's fields: "prompt_tokens" (the rendering with
// the generation prompt, encoded as apply_chat_template encodes it: no special tokens added),
// "tokens" (the stop id included), "text" (the reply: without special tokens and without the id
// that ended the turn), "finish_reason", "logprobs" (asked for)}. The template and tokenizer:
// `generation`.tokenizer's directory, else model.hf_dir's; a directory without a chat template is
// an error that says to give --tokenizer DIR of a model that has one. Conversations are decoded
// generation.batch_size at a time; `placement`, `timing`, `tp` and `failed` as GenerateFromJob's.
absl::StatusOr<std::vector<std::string>> GenerateChatsFromJob(
    const config::JobConfig& job, const std::vector<Conversation>& conversations,
    const GenerateOptions& generation, const ChatModeOptions& chat,
    const training::TrainingPlacement& placement = {}, GenerationTiming* timing = nullptr,
    parallel::Communicator* tp = nullptr, int64_t* failed = nullptr);

// The user's next line (without its line end), nullopt at the end of the input.
using NextUserLine = std::function<absl::StatusOr<std::optional<std::string>>()>;

// A conversation typed turn by turn: each line `next_line` gives (blank ones skipped) becomes the
// user's message, the whole conversation so far is rendered and generated as GenerateChatsFromJob
// does, `print` gets the reply's text (with chat.json, its JSON line), and the reply becomes the
// assistant's message before the next line. Ends at the end of the input; a line that is not UTF-8,
// or a conversation grown beyond the model's positions, is an error naming the line.
absl::Status ChatInteractively(const config::JobConfig& job, const GenerateOptions& generation,
                               const ChatModeOptions& chat, const NextUserLine& next_line,
                               const std::function<void(const std::string&)>& print,
                               const training::TrainingPlacement& placement = {},
                               GenerationTiming* timing = nullptr,
                               parallel::Communicator* tp = nullptr);

// The lines of standard input, read on rank 0 of `tp` (the only rank a launcher gives the terminal
// or pipe) and sent to every other rank, so that all of them generate the same turn. A line longer
// than 16 MiB is an error on every rank. On a terminal, rank 0 shows "> " before each line.
NextUserLine StandardInputLines(parallel::Communicator& tp);

}  // namespace kelvin::inference
