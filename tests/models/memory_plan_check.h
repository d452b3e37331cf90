// The memory plan (models/llama/memory_plan.h) of a model's rank against what the model
// allocated, category by category, byte for byte.
#pragma once

#include <gtest/gtest.h>

#include "models/llama/llama_model.h"
#include "models/llama/memory_plan.h"

namespace kelvin::testing {

inline void ExpectPlanMatchesAllocations(const models::LlamaConfig& config,
                                         const models::MemoryPlanOptions& options,
                                         const models::LlamaModel& model) {
  const models::MemoryPlan plan = models::PlanLlamaMemory(config, options);
  const models::LlamaModel::BufferBytes allocated = model.AllocatedBufferBytes();
  EXPECT_EQ(plan.activations, allocated.activations);
  EXPECT_EQ(plan.logits, allocated.logits);
  EXPECT_EQ(plan.backward_scratch, allocated.backward_scratch);
  EXPECT_EQ(plan.parameters, model.parameters().NumElements() *
                                 static_cast<int64_t>(DTypeSize(options.parameter_dtype)));
}

}  // namespace kelvin::testing
