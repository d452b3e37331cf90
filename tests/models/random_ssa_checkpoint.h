// A Llama+SSA checkpoint with non-zero temperatures for the multi-process tests: world rank 0
// writes a random model (normal(0, 0.5) read-outs and alphas, so the temperatures differ from 1)
// to a fresh Hugging Face directory while the others wait; and loading it into a model of any
// layout, dtype and device.
#pragma once

#include <gtest/gtest.h>
#include <mpi.h>

#include <filesystem>
#include <memory>
#include <random>
#include <string>

#include "core/io/hf_checkpoint.h"
#include "models/llama/llama_model.h"

namespace kelvin::testing {

inline std::string WriteRandomSsaCheckpoint(const models::LlamaConfig& config,
                                            const std::string& dir, uint64_t seed) {
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  if (rank == 0) {
    std::filesystem::remove_all(dir);
    models::LlamaModel model(config, DType::kF64);
    model.InitRandom(seed);
    std::mt19937_64 rng(seed + 1);
    std::normal_distribution<double> normal(0.0, 0.5);
    for (const ParameterSet::Entry& e : model.parameters().entries()) {
      if (e.group != ParamGroup::kTemperature) continue;
      for (int64_t i = 0; i < e.value.numel(); ++i) e.value.data<double>()[i] = normal(rng);
    }
    EXPECT_TRUE(model.ExportHf(dir).ok());
  }
  MPI_Barrier(MPI_COMM_WORLD);
  return dir;
}

// This rank's part of the checkpoint in `dtype` on ctx's device (bf16 on CUDA, f32 or f64 on the
// CPU).
inline std::unique_ptr<models::LlamaModel> LoadPlaced(const models::LlamaConfig& config,
                                                      const std::string& dir,
                                                      const models::LlamaParallelism& parallelism,
                                                      DType dtype, const Context& ctx) {
  auto model = std::make_unique<models::LlamaModel>(
      config, dtype, parallelism, models::LlamaRecompute{}, models::LlamaPlacement{.ctx = ctx});
  absl::StatusOr<io::HfCheckpoint> checkpoint = io::HfCheckpoint::Open(dir);
  EXPECT_TRUE(checkpoint.ok()) << checkpoint.status();
  EXPECT_TRUE(model->LoadHfCheckpoint(*checkpoint).ok());
  return model;
}

// This rank's part of the checkpoint in f64 on the CPU.
inline std::unique_ptr<models::LlamaModel> LoadF64(const models::LlamaConfig& config,
                                                   const std::string& dir,
                                                   const models::LlamaParallelism& parallelism) {
  return LoadPlaced(config, dir, parallelism, DType::kF64, Context::Cpu());
}

}  // namespace kelvin::testing
