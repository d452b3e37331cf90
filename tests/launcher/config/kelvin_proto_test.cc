// The job schema's documentation rules, checked on configs/kelvin.proto itself: every field has a
// comment that states its default (or that it is required), and every message's "Next free field
// number" note matches its fields.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <regex>
#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "configs/kelvin.pb.h"

namespace kelvin::launcher {
namespace {

std::vector<std::string> SchemaLines() {
  const std::filesystem::path path =
      std::filesystem::path(KELVIN_FIXTURES_DIR).parent_path().parent_path() / "configs" /
      "kelvin.proto";
  std::ifstream file(path);
  EXPECT_TRUE(file.is_open()) << path;
  std::vector<std::string> lines;
  for (std::string line; std::getline(file, line);) lines.push_back(line);
  return lines;
}

// The comment lines directly above line `index`, joined.
std::string CommentAbove(const std::vector<std::string>& lines, size_t index) {
  std::string comment;
  while (index > 0 && absl::StartsWith(absl::StripLeadingAsciiWhitespace(lines[index - 1]), "//")) {
    --index;
    comment = lines[index] + "\n" + comment;
  }
  return comment;
}

TEST(KelvinProto, EveryFieldHasACommentWithItsDefault) {
  const std::vector<std::string> lines = SchemaLines();
  const std::regex field_line(
      R"(^\s*((optional|repeated)\s+)?[\w.]+\s+(\w+)\s*=\s*\d+\s*(\[.*\])?;)");
  int documented_fields = 0;
  for (size_t i = 0; i < lines.size(); ++i) {
    std::smatch match;
    if (!std::regex_search(lines[i], match, field_line)) continue;
    const std::string comment = absl::AsciiStrToLower(CommentAbove(lines, i));
    EXPECT_TRUE(absl::StrContains(comment, "default") || absl::StrContains(comment, "required"))
        << "kelvin.proto:" << i + 1 << ": field " << match[3]
        << " needs a comment stating its default (or that it is required)";
    ++documented_fields;
  }
  const google::protobuf::FileDescriptor& file = *config::JobConfig::descriptor()->file();
  int fields = file.extension_count();  // the field options
  for (int m = 0; m < file.message_type_count(); ++m) fields += file.message_type(m)->field_count();
  EXPECT_EQ(documented_fields, fields);
}

TEST(KelvinProto, NextFreeFieldNumberNotesAreRight) {
  const std::vector<std::string> lines = SchemaLines();
  const std::regex message_line(R"(^message (\w+) \{)");
  const std::regex note(R"(Next free field number: (\d+)\.)");
  const google::protobuf::FileDescriptor& file = *config::JobConfig::descriptor()->file();
  int messages = 0;
  for (size_t i = 0; i < lines.size(); ++i) {
    std::smatch match;
    if (!std::regex_search(lines[i], match, message_line)) continue;
    ++messages;
    const google::protobuf::Descriptor* message = file.FindMessageTypeByName(match[1]);
    ASSERT_NE(message, nullptr) << match[1];
    int largest = 0;
    for (int f = 0; f < message->field_count(); ++f) {
      largest = std::max(largest, message->field(f)->number());
    }
    const std::string comment = CommentAbove(lines, i);
    std::smatch number;
    ASSERT_TRUE(std::regex_search(comment, number, note))
        << "kelvin.proto:" << i + 1 << ": message " << match[1]
        << " needs a \"Next free field number: N.\" note";
    EXPECT_EQ(std::stoi(number[1]), largest + 1) << "message " << match[1];
  }
  EXPECT_EQ(messages, file.message_type_count());
}

}  // namespace
}  // namespace kelvin::launcher
