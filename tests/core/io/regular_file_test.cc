// Inputs open only as regular files: a FIFO, a directory or a device in place of one is a clear
// error at once (a FIFO blocked the open for ever), through every reader built on the check.
#include "core/io/regular_file.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>

#include "core/io/mapped_file.h"
#include "core/io/safetensors.h"
#include "tests/core/io/test_files.h"

namespace kelvin::io {
namespace {

using ::testing::HasSubstr;

TEST(RegularFile, FifoDirectoryAndDeviceAreClearErrorsWithoutBlocking) {
  testing::ScratchDir dir;
  const std::string fifo = dir.Path("model.safetensors");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);  // no writer: a blocking open would never return
  EXPECT_THAT(std::string(OpenRegularFile(fifo, "model file").status().message()),
              HasSubstr("model file " + fifo + ": is a FIFO (named pipe), not a regular file"));
  EXPECT_THAT(std::string(MappedFile::Open(fifo).status().message()), HasSubstr("is a FIFO"));
  EXPECT_THAT(std::string(SafetensorsFile::Open(fifo).status().message()), HasSubstr("is a FIFO"));
  EXPECT_THAT(std::string(ReadRegularFile(dir.path(), "config", 100).status().message()),
              HasSubstr("is a directory"));
  EXPECT_THAT(std::string(ReadRegularFile("/dev/zero", "config", 100).status().message()),
              HasSubstr("/dev/zero: is a character device, not a regular file"));
  EXPECT_TRUE(absl::IsNotFound(ReadRegularFile(dir.Path("missing"), "", 100).status()));
}

TEST(RegularFile, ReadsAWholeFileAndRefusesOneBeyondItsLimit) {
  testing::ScratchDir dir;
  testing::WriteFile(dir.Path("job.textproto"), "name: \"x\"\n");
  const absl::StatusOr<std::string> text = ReadRegularFile(dir.Path("job.textproto"), "job", 100);
  ASSERT_TRUE(text.ok()) << text.status();
  EXPECT_EQ(*text, "name: \"x\"\n");
  EXPECT_THAT(std::string(ReadRegularFile(dir.Path("job.textproto"), "job", 4).status().message()),
              HasSubstr("is 10 bytes, more than the 4 such a file can be"));
}

}  // namespace
}  // namespace kelvin::io
