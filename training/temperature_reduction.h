// The model's per-layer SSA temperature statistics as the logs report them: merged over the
// tensor- and context-parallel groups (their heads and tokens together), then gathered over the
// pipeline stages (each holds some of the layers).
#pragma once

#include <cstdint>
#include <vector>

#include "models/llama/llama_pipeline_stage.h"
#include "parallel/comm/communicator.h"
#include "ssa/temperature.h"

namespace kelvin::training {

// The statistics of every member of `group` merged, the same on each member; with `gather_heads`
// sigma(alpha) lists the members' heads in rank order (tensor parallelism shards the heads in
// blocks), else it is each member's own (they hold the same).
std::vector<ssa::TemperatureStatistics> MergeOver(
    parallel::Communicator& group, const std::vector<ssa::TemperatureStatistics>& local,
    bool gather_heads);

// The whole model's `layers` statistics from this stage's (`local`, its chunks' layers in
// order), summed over the pipeline group `pp` (each layer is one stage's).
std::vector<ssa::TemperatureStatistics> GatherOverStages(
    parallel::Communicator& pp, const models::LlamaStageLayout& stage, int64_t layers,
    const std::vector<ssa::TemperatureStatistics>& local);

}  // namespace kelvin::training
