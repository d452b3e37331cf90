// Fuzzing ReadCheckpointIndex: 3000 deterministic mutations of a valid checkpoint.json in
// step_00000007/ (byte flips, digit changes, numbers beyond an int64 or a double, truncation,
// deleted, duplicated and retyped keys, nesting, bad UTF-8, other formats): each an error naming
// the file, or an index of step 7 that writes back and reads back the same; nothing left behind.
// Also a FIFO or a directory in place of checkpoint.json: an error, at once.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "tests/core/io/test_files.h"
#include "tests/testing/deadline.h"
#include "tests/testing/files.h"
#include "tests/testing/json_text_mutations.h"
#include "training/checkpoint/checkpoint_format.h"

namespace kelvin::training {
namespace {

namespace fs = std::filesystem;
using Json = nlohmann::ordered_json;
using ::testing::HasSubstr;
using ::testing::UnorderedElementsAre;

using testing::ScratchDir;

CheckpointIndex ValidIndex() {
  CheckpointIndex index;
  index.job = "fuzz_job";
  index.layout = "tp2 sp pp2 vp1 dp2 zero1";
  index.steps_completed = 7;
  index.optimizer_steps = 7;
  index.parts = 8;
  index.data_order = {{"seed", "1234"}, {"source", "megatron /data/web"}, {"packing", "STREAM"}};
  index.eval_loss = 2.375;
  index.kelvin_version = "0.1.0";
  index.run_id = "0123456789abcdef0123456789abcdef";
  index.libraries = "OpenBLAS 0.3.21 DYNAMIC_ARCH Zen; built without CUDA";
  index.loss_spike = LossSpikeRecord{{2.5, 2.4375, 0.1, 1e-300}, 3, 1};
  index.base = FrozenBaseRecord{"/models/Meta-Llama-3.1-8B", 0x0a1b2c3d};
  return index;
}

std::vector<std::string> Entries(const fs::path& dir) {
  std::vector<std::string> names;
  for (const fs::directory_entry& entry : fs::directory_iterator(dir)) {
    names.push_back(entry.path().filename().string());
  }
  return names;
}

bool SameIndex(const CheckpointIndex& a, const CheckpointIndex& b) {
  return a.job == b.job && a.layout == b.layout && a.steps_completed == b.steps_completed &&
         a.optimizer_steps == b.optimizer_steps && a.parts == b.parts &&
         a.data_order == b.data_order && a.eval_loss == b.eval_loss &&
         a.kelvin_version == b.kelvin_version && a.run_id == b.run_id &&
         a.libraries == b.libraries && a.loss_spike == b.loss_spike && a.base == b.base;
}

Json SpecialValue(std::mt19937_64& rng) {
  const std::vector<Json> values = {7,
                                    6,
                                    8,
                                    0,
                                    -1,
                                    -7,
                                    1,
                                    7.0,
                                    "7",
                                    int64_t{1} << 31,
                                    (int64_t{1} << 31) + 7,
                                    int64_t{1} << 62,
                                    std::numeric_limits<int64_t>::max(),
                                    std::numeric_limits<int64_t>::min(),
                                    std::numeric_limits<uint64_t>::max(),
                                    uint64_t{1} << 63,
                                    1e308,
                                    -1e308,
                                    4.9e-324,
                                    0.5,
                                    "",
                                    "kelvin-checkpoint-3",
                                    "kelvin-checkpoint-4",
                                    "kelvin-checkpoint-5",
                                    "kelvin-checkpoint-",
                                    "KELVIN-CHECKPOINT-4",
                                    "kelvin-checkpoint-4 ",
                                    true,
                                    false,
                                    nullptr,
                                    Json::array(),
                                    Json::object(),
                                    Json::array({7}),
                                    Json::object({{"seed", 1}}),
                                    Json::object({{"seed", Json::array({"1234"})}}),
                                    std::string(5000, 'x')};
  return values[rng() % values.size()];
}

const std::vector<std::string>& Keys() {
  static const std::vector<std::string> keys = {
      "format",    "job",    "step", "optimizer_steps", "layout", "parts", "data_order",
      "eval_loss", "kelvin", "run",  "libraries",       "base",   "other"};
  return keys;
}

// Beside MutateJsonText's own: malformed and neighbouring forms of the step, 7.
const std::vector<std::string>& SpecialNumbers() {
  static const std::vector<std::string> numbers = {"0x7", "07",  "7.",  ".7", "+7",        "7e",
                                                   "--7", "7.0", "7e0", "-1", "2147483648"};
  return numbers;
}

struct Mutation {
  std::string text;
  std::vector<std::string> edits;
};

Mutation Mutate(const Json& base, std::mt19937_64& rng) {
  const auto pick = [&rng](size_t lo, size_t hi) {
    return std::uniform_int_distribution<size_t>(lo, hi)(rng);
  };
  Mutation m;
  Json json = base;
  for (size_t n = pick(0, 2); n > 0; --n) {
    const std::string& key = Keys()[pick(0, Keys().size() - 1)];
    if (pick(0, 2) == 0) {
      json.erase(key);
      m.edits.push_back(absl::StrCat("delete \"", key, "\""));
    } else {
      const Json value = SpecialValue(rng);
      json[key] = value;
      m.edits.push_back(absl::StrCat("\"", key, "\" = ", value.dump().substr(0, 80)));
    }
  }
  std::string text = json.dump(pick(0, 1) ? 2 : -1);
  for (size_t n = m.edits.empty() ? pick(1, 3) : pick(0, 2); n > 0; --n) {
    const std::string& key = Keys()[pick(0, Keys().size() - 1)];
    testing::MutateJsonText(text, m.edits, rng, SpecialNumbers(),
                            absl::StrCat("\"", key, "\": ", SpecialValue(rng).dump(), ","),
                            "index");
  }
  m.text = std::move(text);
  return m;
}

TEST(CheckpointIndexFuzz, MutatedIndexesAreErrorsNamingTheFileOrTheDirectorysStep) {
  ScratchDir scratch;
  ASSERT_FALSE(scratch.path().empty());
  const fs::path valid_dir = fs::path(scratch.path()) / "valid" / StepDirectoryName(7);
  ASSERT_EQ(valid_dir.filename(), "step_00000007");
  fs::create_directories(valid_dir);
  ASSERT_TRUE(WriteCheckpointIndex(valid_dir, ValidIndex()).ok());
  const absl::StatusOr<CheckpointIndex> valid = ReadCheckpointIndex(valid_dir);
  ASSERT_TRUE(valid.ok()) << valid.status();
  ASSERT_TRUE(SameIndex(*valid, ValidIndex()));
  const Json base = Json::parse(testing::FileBytes(valid_dir / "checkpoint.json"));

  const fs::path checkpoint = fs::path(scratch.path()) / "fuzz" / StepDirectoryName(7),
                 file = checkpoint / "checkpoint.json",
                 again = fs::path(scratch.path()) / "again" / StepDirectoryName(7);
  fs::create_directories(checkpoint);
  fs::create_directories(again);
  testing::Deadline deadline(std::chrono::seconds(120), "CheckpointIndexFuzz");
  std::mt19937_64 rng(20241107);
  int rejected = 0, accepted = 0, rewritten = 0;
  constexpr int kCases = 3000;
  for (int iteration = 0; iteration < kCases; ++iteration) {
    const Mutation m = Mutate(base, rng);
    // A new file each time (ext4 flushes a file truncated and rewritten: slow), in one directory
    // (a directory made and removed per case costs more than the case).
    fs::remove(file);
    std::ofstream(file, std::ios::binary) << m.text;
    const std::string context = absl::StrCat("case ", iteration, ": ", absl::StrJoin(m.edits, "; "),
                                             "\n", m.text.substr(0, 1500));
    deadline.Set(context);
    const auto started = std::chrono::steady_clock::now();
    const absl::StatusOr<CheckpointIndex> index = ReadCheckpointIndex(checkpoint);
    EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count(),
              1.0)
        << context;
    EXPECT_THAT(Entries(checkpoint), UnorderedElementsAre("checkpoint.json")) << context;
    if (!index.ok()) {
      ++rejected;
      EXPECT_THAT(std::string(index.status().message()), HasSubstr(file.string())) << context;
    } else {
      ++accepted;
      EXPECT_EQ(index->steps_completed, 7) << context;
      EXPECT_GE(index->optimizer_steps, 0) << context;
      EXPECT_GE(index->parts, 1) << context;
      if (accepted % 8 == 1) {  // written back (fsynced: not every one), it reads back the same
        ++rewritten;
        const absl::Status written = WriteCheckpointIndex(again, *index);
        ASSERT_TRUE(written.ok()) << written << "\n" << context;
        EXPECT_THAT(Entries(again), UnorderedElementsAre("checkpoint.json")) << context;
        const absl::StatusOr<CheckpointIndex> reread = ReadCheckpointIndex(again);
        ASSERT_TRUE(reread.ok()) << reread.status() << "\n" << context;
        // A format-3 index has no run id and reads back as format 4 with an empty one.
        EXPECT_TRUE(SameIndex(*reread, *index)) << context;
      }
    }
  }
  RecordProperty("rejected", rejected);
  RecordProperty("accepted", accepted);
  EXPECT_GT(rejected, kCases / 2);
  EXPECT_GT(accepted, kCases / 20);
  EXPECT_GT(rewritten, 10);
}

TEST(CheckpointIndexFuzz, TheIndexOfAnotherStepOrNotAFileIsAPromptError) {
  ScratchDir scratch;
  ASSERT_FALSE(scratch.path().empty());
  testing::Deadline deadline(std::chrono::seconds(20), "CheckpointIndexFuzz special files");
  const auto expect_error = [&](const fs::path& checkpoint, const std::string& what) {
    deadline.Set(what);
    const auto started = std::chrono::steady_clock::now();
    const absl::StatusOr<CheckpointIndex> index = ReadCheckpointIndex(checkpoint);
    ASSERT_FALSE(index.ok()) << what;
    EXPECT_THAT(std::string(index.status().message()),
                HasSubstr((checkpoint / "checkpoint.json").string()))
        << what;
    EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count(),
              2.0)
        << what;
  };
  const fs::path other_step = fs::path(scratch.path()) / StepDirectoryName(8);
  fs::create_directories(other_step);
  ASSERT_TRUE(WriteCheckpointIndex(other_step, ValidIndex()).ok());
  expect_error(other_step, "the index of step 7 in step_00000008");

  const fs::path fifo = fs::path(scratch.path()) / "fifo" / StepDirectoryName(7);
  fs::create_directories(fifo);
  ASSERT_EQ(::mkfifo((fifo / "checkpoint.json").c_str(), 0600), 0);
  expect_error(fifo, "a FIFO");

  const fs::path directory = fs::path(scratch.path()) / "directory" / StepDirectoryName(7);
  fs::create_directories(directory / "checkpoint.json");
  expect_error(directory, "a directory");

  const fs::path missing = fs::path(scratch.path()) / "missing" / StepDirectoryName(7);
  fs::create_directories(missing);
  expect_error(missing, "no checkpoint.json");
}

}  // namespace
}  // namespace kelvin::training
