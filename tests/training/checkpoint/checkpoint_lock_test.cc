// checkpoint.dir's lock: one holder at a time (a second is refused, naming the first's pid and
// host), released and its file removed with its holder, and the directory made when missing.
#include "training/checkpoint/checkpoint_lock.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <string>

#include "absl/strings/str_cat.h"
#include "tests/core/io/test_files.h"

namespace kelvin::training {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

TEST(CheckpointDirectoryLock, ASecondHolderIsRefusedUntilTheFirstLetsGo) {
  testing::ScratchDir scratch;
  const std::string dir = scratch.path() + "/ckpt/new";  // made by the lock
  absl::StatusOr<CheckpointDirectoryLock> first = CheckpointDirectoryLock::Acquire(dir);
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_TRUE(first->held());
  EXPECT_TRUE(fs::is_regular_file(dir + "/kelvin.lock"));
  // flock conflicts between open file descriptions, in one process as in two.
  const absl::StatusOr<CheckpointDirectoryLock> second = CheckpointDirectoryLock::Acquire(dir);
  ASSERT_FALSE(second.ok());
  EXPECT_THAT(
      std::string(second.status().message()),
      HasSubstr(absl::StrCat("checkpoint.dir=\"", dir, "\" is in use by another training (pid ",
                             ::getpid(), " on host ")));
  EXPECT_THAT(std::string(second.status().message()),
              HasSubstr("give this run its own checkpoint.dir"));
  { CheckpointDirectoryLock released = *std::move(first); }  // moved out, then let go
  EXPECT_FALSE(fs::exists(dir + "/kelvin.lock"));            // nothing left behind
  const absl::StatusOr<CheckpointDirectoryLock> third = CheckpointDirectoryLock::Acquire(dir);
  EXPECT_TRUE(third.ok()) << third.status();
}

TEST(CheckpointDirectoryLock, AnUnwritableDirectoryIsAnErrorNamingIt) {
  const absl::StatusOr<CheckpointDirectoryLock> lock =
      CheckpointDirectoryLock::Acquire("/proc/kelvin_no_such_dir");
  ASSERT_FALSE(lock.ok());
  EXPECT_THAT(std::string(lock.status().message()),
              HasSubstr("checkpoint.dir=\"/proc/kelvin_no_such_dir\": cannot create it ("));
}

TEST(CheckpointDirectoryLock, ADanglingSymbolicLinkIsNamedWithItsTarget) {
  testing::ScratchDir scratch;
  const std::string link = scratch.Path("checkpoints");
  std::filesystem::create_directory_symlink(scratch.Path("gone"), link);
  const absl::StatusOr<CheckpointDirectoryLock> lock = CheckpointDirectoryLock::Acquire(link);
  ASSERT_FALSE(lock.ok());
  EXPECT_THAT(std::string(lock.status().message()),
              HasSubstr("it is a symbolic link to " + scratch.Path("gone") +
                        ", which does not exist; create that directory or point the link "
                        "elsewhere"));
  EXPECT_FALSE(std::filesystem::exists(scratch.Path("gone")));
}

}  // namespace
}  // namespace kelvin::training
