// Fuzzing the checkpoint reader: 1500 deterministic mutations of a small checkpoint (digit changes
// and byte flips in checkpoint.json and in the part's header, where the regions live, and
// truncations). Opening and reading never crash or hang: each either fails with a message naming
// the checkpoint or one of its files, or reads tensors of the size asked for.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>

#include "parallel/comm/self_communicator.h"
#include "tests/testing/files.h"
#include "training/checkpoint/checkpoint.h"

namespace kelvin::training {
namespace {

namespace fs = std::filesystem;

void WriteBytes(const fs::path& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary) << bytes;
}

// One mutation of `bytes`, kept in [begin, end) (the JSON text, or a part's header).
std::string Mutate(std::string bytes, size_t begin, size_t end, std::mt19937_64& rng) {
  const auto pick = [&rng](size_t lo, size_t hi) {
    return std::uniform_int_distribution<size_t>(lo, hi)(rng);
  };
  switch (pick(0, 3)) {
    case 0:  // a digit becomes another: counts, shapes, regions change but stay well-formed
      for (int tries = 0; tries < 64; ++tries) {
        const size_t at = pick(begin, end - 1);
        if (bytes[at] >= '0' && bytes[at] <= '9') {
          bytes[at] = static_cast<char>('0' + pick(0, 9));
          break;
        }
      }
      break;
    case 1:  // flip a bit
      bytes[pick(begin, end - 1)] ^= static_cast<char>(1 << pick(0, 7));
      break;
    case 2:  // a separator of the region text becomes another
      for (int tries = 0; tries < 64; ++tries) {
        const size_t at = pick(begin, end - 1);
        if (bytes[at] == '/' || bytes[at] == '+' || bytes[at] == 'x') {
          bytes[at] = "/+x-"[pick(0, 3)];
          break;
        }
      }
      break;
    default:  // truncate
      bytes.resize(pick(0, bytes.size() - 1));
      break;
  }
  return bytes;
}

TEST(CheckpointFuzz, DamagedCheckpointsFailCleanly) {
  const fs::path dir = fs::path(::testing::TempDir()) / "kelvin_checkpoint_fuzz";
  fs::remove_all(dir);
  // A weight [4, 6] whole and a moment holding a stretch of its column slice [1, 4).
  Tensor weight = Tensor::Empty({4, 6}, DType::kF32);
  Tensor moment = Tensor::Empty({7}, DType::kF32);
  for (int64_t i = 0; i < 24; ++i) weight.data<float>()[i] = static_cast<float>(i);
  for (int64_t i = 0; i < 7; ++i) moment.data<float>()[i] = static_cast<float>(-i);
  TrainingState state;
  state.tensors = {{"w", io::TensorRegion::Whole({4, 6}), weight},
                   {"adamw.m:w", io::TensorRegion::Slice({4, 6}, 1, 1, 3).Elements(2, 7), moment}};
  parallel::SelfCommunicator world("world", 0, Context::Cpu());
  absl::StatusOr<std::string> saved =
      SaveCheckpoint(dir.string(), 5, "fuzz", state, Context::Cpu(), world);
  ASSERT_TRUE(saved.ok()) << saved.status();
  const fs::path checkpoint = *saved;
  const fs::path index = checkpoint / "checkpoint.json",
                 part = checkpoint / "part_0_of_1.safetensors";
  const std::string index_bytes = testing::FileBytes(index), part_bytes = testing::FileBytes(part);
  uint64_t header_length = 0;
  std::memcpy(&header_length, part_bytes.data(), 8);

  std::mt19937_64 rng(20261130);
  int opened = 0;
  for (int round = 0; round < 1500; ++round) {
    const bool mutate_index = round % 3 == 0;
    WriteBytes(index, mutate_index ? Mutate(index_bytes, 0, index_bytes.size(), rng) : index_bytes);
    WriteBytes(part, mutate_index ? part_bytes : Mutate(part_bytes, 8, 8 + header_length, rng));
    absl::StatusOr<CheckpointReader> reader = CheckpointReader::Open(checkpoint.string());
    if (!reader.ok()) {
      EXPECT_NE(std::string(reader.status().message()).find(checkpoint.string()), std::string::npos)
          << "round " << round << ": " << reader.status();
      continue;
    }
    ++opened;
    for (const CheckpointTensor& t : state.tensors) {
      const absl::StatusOr<Tensor> read = reader->Read(t.name, t.region, DType::kF32);
      if (read.ok()) {
        EXPECT_EQ(read->numel(), t.region.numel()) << "round " << round;
      } else {
        EXPECT_NE(std::string(read.status().message()).find(checkpoint.string()), std::string::npos)
            << "round " << round << ": " << read.status();
      }
    }
  }
  EXPECT_GT(opened, 100);  // many mutations keep the files readable: the reads were exercised
  fs::remove_all(dir);
}

}  // namespace
}  // namespace kelvin::training
