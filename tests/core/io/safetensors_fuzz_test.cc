// Fuzzing the safetensors reader: 2000 deterministic mutations of a valid file (byte flips in the
// header and anywhere, digit changes that keep the JSON well-formed, truncations, new header
// lengths). Open must never crash: it either fails with a message naming the file, or succeeds and
// then every read succeeds or fails cleanly, also naming the file.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <random>
#include <string>

#include "core/io/safetensors.h"
#include "tests/core/io/test_files.h"
#include "tests/testing/tensors.h"

namespace kelvin::io {
namespace {

using ::testing::HasSubstr;

// One mutation of `bytes`, chosen and placed by `rng`.
std::string Mutate(std::string bytes, size_t header_end, std::mt19937_64& rng) {
  const auto pick = [&rng](size_t lo, size_t hi) {  // uniform in [lo, hi]
    return std::uniform_int_distribution<size_t>(lo, hi)(rng);
  };
  switch (pick(0, 5)) {
    case 0:  // flip bits of 1 to 4 header bytes
      for (size_t n = pick(1, 4); n > 0; --n) bytes[pick(8, header_end - 1)] ^= 1 << pick(0, 7);
      break;
    case 1:  // replace a digit of the header by another: offsets and shapes change
      for (size_t tries = 0; tries < 64; ++tries) {
        const size_t at = pick(8, header_end - 1);
        if (bytes[at] >= '0' && bytes[at] <= '9') {
          bytes[at] = static_cast<char>('0' + pick(0, 9));
          break;
        }
      }
      break;
    case 2:  // a random byte anywhere
      bytes[pick(0, bytes.size() - 1)] = static_cast<char>(pick(0, 255));
      break;
    case 3:  // truncation
      bytes.resize(pick(0, bytes.size() - 1));
      break;
    case 4: {  // a header length near the real one, or anything
      uint64_t length = 0;
      std::memcpy(&length, bytes.data(), 8);
      length = pick(0, 1) ? length + pick(0, 16) - 8 : rng();
      std::memcpy(bytes.data(), &length, 8);
      break;
    }
    default:  // insert or delete a header byte
      if (pick(0, 1)) {
        bytes.insert(pick(8, header_end), 1, static_cast<char>(pick(32, 126)));
      } else {
        bytes.erase(pick(8, header_end - 1), 1);
      }
      break;
  }
  return bytes;
}

struct FileRemover {
  ~FileRemover() { std::filesystem::remove(path); }
  std::string path;
};

TEST(SafetensorsFuzzTest, MutatedFilesNeverCrashAndAlwaysNameTheFile) {
  testing::ScratchDir dir;
  const std::string valid_path = dir.Path("valid.safetensors");
  ASSERT_TRUE(WriteSafetensors(valid_path,
                               {{"embed", testing::Random({6, 4}, DType::kBF16, 1)},
                                {"norm", testing::Random({4}, DType::kF32, 2)},
                                {"ids", testing::RandomInts({3}, DType::kI64, 3, -9, 9)},
                                {"step", testing::RandomInts({}, DType::kI32, 4, 0, 9)},
                                {"nothing", Tensor::Empty({0, 2}, DType::kF64)}},
                               {{"format", "pt"}})
                  .ok());
  const std::string valid = testing::ReadFile(valid_path);
  uint64_t header_bytes = 0;
  std::memcpy(&header_bytes, valid.data(), 8);
  const size_t header_end = 8 + static_cast<size_t>(header_bytes);

  std::mt19937_64 rng(20240601);
  int opened = 0, rejected = 0, reads = 0;
  for (int iteration = 0; iteration < 2000; ++iteration) {
    // A new file each time: ext4 flushes files that are truncated and rewritten, which is slow.
    const std::string path = dir.Path("mutated" + std::to_string(iteration) + ".safetensors");
    testing::WriteFile(path, Mutate(valid, header_end, rng));
    const FileRemover remove_afterwards{path};
    const absl::StatusOr<SafetensorsFile> file = SafetensorsFile::Open(path);
    if (!file.ok()) {
      ++rejected;
      ASSERT_THAT(std::string(file.status().message()), HasSubstr(path))
          << "iteration " << iteration;
      continue;
    }
    ++opened;
    for (const SafetensorsEntry& entry : file->entries()) {
      for (const std::optional<DType> as :
           {std::optional<DType>(), std::optional(DType::kF32), std::optional(DType::kI64)}) {
        const absl::StatusOr<Tensor> read = file->Read(entry.name, as);
        if (read.ok()) {
          ++reads;
          ASSERT_EQ(read->shape(), entry.shape);
        } else {
          ASSERT_THAT(std::string(read.status().message()), HasSubstr(path))
              << "iteration " << iteration;
        }
      }
      if (!entry.shape.empty()) {
        const absl::StatusOr<Tensor> slice = file->ReadSlice(entry.name, -1, 0, entry.shape.back());
        if (!slice.ok()) {
          ASSERT_THAT(std::string(slice.status().message()), HasSubstr(path))
              << "iteration " << iteration;
        }
      }
    }
  }
  RecordProperty("opened", opened);
  RecordProperty("rejected", rejected);
  RecordProperty("successful_reads", reads);
  // The mutations reach both outcomes (a fuzz test that only ever rejects tests nothing).
  EXPECT_GT(opened, 100);
  EXPECT_GT(rejected, 1000);
  EXPECT_GT(reads, 500);
}

}  // namespace
}  // namespace kelvin::io
