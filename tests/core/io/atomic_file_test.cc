// Durable writes: a file appears whole or not at all, a failure (here a file size limit, as a
// full disk would fail) leaves neither the target nor a temporary, files that belong together
// are committed all or none, and an HF export that fails leaves no directory behind.
#include "core/io/atomic_file.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/resource.h>

#include <csignal>
#include <filesystem>

#include "core/io/hf_checkpoint.h"
#include "tests/core/io/test_files.h"
#include "tests/testing/tensors.h"

namespace kelvin::io {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

std::vector<std::string> Entries(const std::string& dir) {
  std::vector<std::string> names;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    names.push_back(entry.path().filename().string());
  }
  std::sort(names.begin(), names.end());
  return names;
}

// RLIMIT_FSIZE lowered to `bytes` while alive (SIGXFSZ ignored: writes fail with EFBIG).
class FileSizeLimit {
 public:
  explicit FileSizeLimit(rlim_t bytes) {
    getrlimit(RLIMIT_FSIZE, &saved_);
    std::signal(SIGXFSZ, SIG_IGN);
    const rlimit limit{bytes, saved_.rlim_max};
    setrlimit(RLIMIT_FSIZE, &limit);
  }
  ~FileSizeLimit() { setrlimit(RLIMIT_FSIZE, &saved_); }

 private:
  rlimit saved_{};
};

TEST(AtomicFile, AppearsOnlyWhenCommittedAndAnAbandonedOneLeavesNothing) {
  testing::ScratchDir dir;
  {
    absl::StatusOr<AtomicFile> file = AtomicFile::Create(dir.Path("a.bin"));
    ASSERT_TRUE(file.ok()) << file.status();
    ASSERT_TRUE(file->Write("hello ").ok());
    ASSERT_TRUE(file->Write("world").ok());
    EXPECT_THAT(Entries(dir.path()), ElementsAre(::testing::StartsWith("a.bin.tmp.")));
  }  // destroyed uncommitted
  EXPECT_THAT(Entries(dir.path()), IsEmpty());
  ASSERT_TRUE(WriteFileAtomically(dir.Path("a.bin"), {"hello ", "world"}).ok());
  EXPECT_EQ(testing::ReadFile(dir.Path("a.bin")), "hello world");
  EXPECT_THAT(Entries(dir.path()), ElementsAre("a.bin"));
}

TEST(AtomicFile, AFailedWriteKeepsTheOldFileAndLeavesNoTemporary) {
  testing::ScratchDir dir;
  ASSERT_TRUE(WriteFileAtomically(dir.Path("state.json"), {"old"}).ok());
  absl::Status failed;
  {
    const FileSizeLimit limit(1000);
    failed = WriteFileAtomically(dir.Path("state.json"), {std::string(5000, 'x')});
  }
  EXPECT_EQ(failed.code(), absl::StatusCode::kResourceExhausted) << failed;
  EXPECT_THAT(std::string(failed.message()), HasSubstr("cannot write " + dir.Path("state.json")));
  EXPECT_THAT(std::string(failed.message()), HasSubstr("file size limit"));
  EXPECT_EQ(testing::ReadFile(dir.Path("state.json")), "old");
  EXPECT_THAT(Entries(dir.path()), ElementsAre("state.json"));
}

// A file where the path needs a directory is named as such, not "create its directory first".
TEST(AtomicFile, AFileInThePathIsNamed) {
  testing::ScratchDir dir;
  testing::WriteFile(dir.Path("f"), "x");
  const absl::Status failed = WriteFileAtomically(dir.Path("f/d/out.bin"), {"data"});
  EXPECT_EQ(failed.code(), absl::StatusCode::kNotFound) << failed;
  EXPECT_THAT(std::string(failed.message()),
              HasSubstr("; " + dir.Path("f") + " is a file, not a directory: choose another path"));
  EXPECT_THAT(Entries(dir.path()), ElementsAre("f"));
}

TEST(AtomicFile, FilesCommittedTogetherAllLandOrNoneChanges) {
  testing::ScratchDir dir;
  ASSERT_TRUE(WriteFileAtomically(dir.Path("d.bin"), {"old bin"}).ok());
  ASSERT_TRUE(WriteFileAtomically(dir.Path("d.idx"), {"old idx"}).ok());
  const auto start = [&](const std::string& name, const std::string& text) {
    absl::StatusOr<AtomicFile> file = AtomicFile::Create(dir.Path(name));
    EXPECT_TRUE(file.ok() && file->Write(text).ok());
    return std::move(file).value();
  };
  {  // a directory where a file goes: refused before anything is renamed
    std::filesystem::create_directories(dir.Path("m.idx/inside"));
    AtomicFile bin = start("d.bin", "new bin"), idx = start("d.idx", "new idx");
    AtomicFile blocked = start("m.idx", "mask");
    const absl::Status committed = CommitTogether({&bin, &idx, &blocked});
    EXPECT_THAT(std::string(committed.message()),
                HasSubstr(dir.Path("m.idx") + ": a directory is in its place"));
  }
  EXPECT_EQ(testing::ReadFile(dir.Path("d.bin")), "old bin");
  EXPECT_EQ(testing::ReadFile(dir.Path("d.idx")), "old idx");
  EXPECT_THAT(Entries(dir.path()), ElementsAre("d.bin", "d.idx", "m.idx"));
  {  // the last rename fails after the first ones landed: they are undone, the old files back
    std::filesystem::create_directories(dir.Path("gone"));
    AtomicFile bin = start("d.bin", "new bin"), idx = start("d.idx", "new idx");
    AtomicFile lost = start("gone/x.idx", "x");
    ASSERT_TRUE(lost.Finish().ok());
    std::filesystem::rename(dir.Path("gone"), dir.Path("moved"));  // its temporary goes too
    const absl::Status committed = CommitTogether({&bin, &idx, &lost});
    EXPECT_THAT(std::string(committed.message()), HasSubstr(dir.Path("gone/x.idx")));
    std::filesystem::remove_all(dir.Path("moved"));
  }
  EXPECT_EQ(testing::ReadFile(dir.Path("d.bin")), "old bin");
  EXPECT_EQ(testing::ReadFile(dir.Path("d.idx")), "old idx");
  EXPECT_THAT(Entries(dir.path()), ElementsAre("d.bin", "d.idx", "m.idx"));
  std::filesystem::remove_all(dir.Path("m.idx"));
  AtomicFile bin = start("d.bin", "new bin"), idx = start("d.idx", "new idx");
  ASSERT_TRUE(CommitTogether({&bin, &idx}).ok());
  EXPECT_EQ(testing::ReadFile(dir.Path("d.bin")), "new bin");
  EXPECT_EQ(testing::ReadFile(dir.Path("d.idx")), "new idx");
  EXPECT_THAT(Entries(dir.path()), ElementsAre("d.bin", "d.idx"));
}

TEST(AtomicFile, AnHfExportThatFailsLeavesNoDirectory) {
  testing::ScratchDir dir;
  const std::string out = dir.Path("export");
  const std::vector<std::pair<std::string, Tensor>> tensors = {
      {"w", testing::Random({64, 64}, DType::kF32, 1)}};  // 16 KiB
  absl::Status failed;
  {
    const FileSizeLimit limit(4096);  // the shard does not fit, as on a full disk
    failed = WriteHfCheckpoint(out, HfTensorSourcesOf(tensors), size_t{5} << 30,
                               {{"config.json", "{}"}});
  }
  EXPECT_EQ(failed.code(), absl::StatusCode::kResourceExhausted) << failed;
  EXPECT_THAT(Entries(dir.path()), IsEmpty());  // neither export/ nor export.partial/
  ASSERT_TRUE(
      WriteHfCheckpoint(out, HfTensorSourcesOf(tensors), size_t{5} << 30, {{"config.json", "{}"}})
          .ok());
  EXPECT_THAT(Entries(out), ElementsAre("config.json", "model.safetensors"));
  EXPECT_THAT(Entries(dir.path()), ElementsAre("export"));
}

}  // namespace
}  // namespace kelvin::io
