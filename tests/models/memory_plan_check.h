// The memory plan (models/llama/memory_plan.h) of a model's rank against what the model
// allocated, category by category, byte for byte.
#pragma once

#include <gtest/gtest.h>

#include "core/optim/optimizer.h"
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

// The parameter side of the plan against what `model` and `optimizer` allocated (one rank, no
// distributed optimizer): master weights, gradients (the padded buffers) and optimizer state.
inline void ExpectPlanMatchesParameterMemory(const models::MemoryPlan& plan,
                                             models::LlamaModel& model,
                                             const Optimizer& optimizer) {
  ParameterSet& params = model.parameters();
  int64_t gradient_bytes = 0;
  for (int g = 0; g < kNumParamGroups; ++g) {
    const Tensor& padded = params.padded_grads(static_cast<ParamGroup>(g));
    if (padded.defined()) gradient_bytes += static_cast<int64_t>(padded.nbytes());
  }
  EXPECT_EQ(plan.master_weights, params.WholeMasterBytes());
  EXPECT_EQ(plan.gradients, gradient_bytes);
  EXPECT_EQ(plan.optimizer_state, optimizer.StateBytes());
}

}  // namespace kelvin::testing
