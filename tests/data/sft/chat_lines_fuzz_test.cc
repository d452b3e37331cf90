// Fuzzing the reader of generate --chat's conversation lines (data::ParseChatLine): 2000
// deterministic edits of valid lines (bits flipped, digits and numbers changed, truncations,
// duplicate keys, bad UTF-8, deep nesting, bytes inserted or deleted). Each line either reads as a
// conversation whose last message is not the assistant's, or fails with an error naming the file
// and line; none crashes.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "data/sft/chat_messages.h"
#include "tests/testing/json_text_mutations.h"

namespace kelvin::data {
namespace {

TEST(ChatLinesFuzz, EditedLinesReadOrFailNamingTheLine) {
  const std::vector<std::string> lines = {
      R"({"messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": )"
      R"("Hi 😀 \"there\""}], "id": 7})",
      R"({"messages": [{"role": "user", "content": "Weather?"}, {"role": "assistant", )"
      R"("tool_calls": [{"function": {"name": "w", "arguments": {"city": "Paris", "n": 2}}}]}, )"
      R"({"role": "tool", "content": "12 C"}], "tools": [{"type": "function", "function": )"
      R"({"name": "w", "parameters": {"type": "object"}}}]})",
  };
  std::mt19937_64 rng(20261207);
  int read = 0, refused = 0;
  for (int trial = 0; trial < 2000; ++trial) {
    std::string line = lines[static_cast<size_t>(trial) % lines.size()];
    std::vector<std::string> edits;
    testing::MutateJsonText(line, edits, rng, {"2", "7"}, R"("messages": [],)", "messages");
    SCOPED_TRACE(line);
    std::vector<std::string> ignored;
    const absl::StatusOr<ChatMessages> chat = ParseChatLine(line, "chats.jsonl", 2, ignored);
    if (chat.ok()) {
      ++read;
      ASSERT_TRUE(chat->messages.is_list());
      ASSERT_FALSE(chat->messages.list().empty());
      const chat_template::Value* role = chat->messages.list().back().dict().Find("role");
      ASSERT_NE(role, nullptr);
      EXPECT_NE(role->str(), "assistant");
    } else {
      ++refused;
      EXPECT_THAT(std::string(chat.status().message()), ::testing::StartsWith("chats.jsonl:2: "));
    }
  }
  // Both outcomes are exercised.
  EXPECT_GT(read, 100);
  EXPECT_GT(refused, 500);
}

}  // namespace
}  // namespace kelvin::data
