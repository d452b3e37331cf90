// MappedFile: contents, empty files, moves, and the errors for missing files and directories,
// with and without a description of the file's role.
#include "core/io/mapped_file.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <utility>

#include "tests/core/io/test_files.h"

namespace kelvin::io {
namespace {

using ::testing::HasSubstr;

TEST(MappedFileTest, MapsTheWholeFile) {
  testing::ScratchDir dir;
  const std::string path = dir.Path("bytes.bin");
  const std::string bytes("hello\0world", 11);
  testing::WriteFile(path, bytes);
  absl::StatusOr<MappedFile> file = MappedFile::Open(path);
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_EQ(file->path(), path);
  ASSERT_EQ(file->size(), bytes.size());
  EXPECT_EQ(std::string(file->data(), file->size()), bytes);
}

TEST(MappedFileTest, EmptyFileHasNoData) {
  testing::ScratchDir dir;
  const std::string path = dir.Path("empty.bin");
  testing::WriteFile(path, "");
  absl::StatusOr<MappedFile> file = MappedFile::Open(path);
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_EQ(file->size(), 0u);
  EXPECT_EQ(file->data(), nullptr);
}

TEST(MappedFileTest, MoveTransfersTheMapping) {
  testing::ScratchDir dir;
  const std::string path = dir.Path("bytes.bin");
  testing::WriteFile(path, "abc");
  absl::StatusOr<MappedFile> file = MappedFile::Open(path);
  ASSERT_TRUE(file.ok()) << file.status();
  MappedFile moved = std::move(*file);
  EXPECT_EQ(file->data(), nullptr);  // NOLINT(bugprone-use-after-move): moved-from is empty
  EXPECT_EQ(file->size(), 0u);
  EXPECT_EQ(std::string(moved.data(), moved.size()), "abc");
  absl::StatusOr<MappedFile> other = MappedFile::Open(path);
  ASSERT_TRUE(other.ok()) << other.status();
  moved = std::move(*other);  // unmaps the first mapping
  EXPECT_EQ(std::string(moved.data(), moved.size()), "abc");
}

TEST(MappedFileTest, MissingFileIsNotFound) {
  testing::ScratchDir dir;
  const std::string path = dir.Path("missing.safetensors");
  const absl::StatusOr<MappedFile> file = MappedFile::Open(path);
  EXPECT_EQ(file.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(file.status().message()), HasSubstr(path));
  EXPECT_THAT(std::string(file.status().message()), HasSubstr("no such file"));
  EXPECT_THAT(std::string(file.status().message()), HasSubstr("check the path"));
}

TEST(MappedFileTest, DirectoryIsRejected) {
  testing::ScratchDir dir;
  const absl::StatusOr<MappedFile> file = MappedFile::Open(dir.path());
  EXPECT_EQ(file.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(file.status().message()), HasSubstr(dir.path() + ": is a directory"));
}

TEST(MappedFileTest, DescriptionNamesTheFilesRole) {
  testing::ScratchDir dir;
  const std::string path = dir.Path("corpus.idx");
  const absl::StatusOr<MappedFile> missing = MappedFile::Open(path, "Megatron index file");
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(missing.status().message()),
              HasSubstr("Megatron index file " + path + ": no such file"));
  const absl::StatusOr<MappedFile> directory = MappedFile::Open(dir.path(), "token file");
  EXPECT_EQ(directory.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(directory.status().message()),
              HasSubstr("token file " + dir.path() + ": is a directory"));
}

}  // namespace
}  // namespace kelvin::io
