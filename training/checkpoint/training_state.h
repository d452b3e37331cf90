// The training state one rank of a layout holds, as checkpoints name it (format: README, Formats):
// every parameter's master weights under its Hugging Face name and its AdamW moments
// "adamw.m:<name>" and "adamw.v:<name>", each a region of the full model's tensor, as the
// optimizer's state spans hold them.
#pragma once

#include <set>
#include <string>
#include <vector>

#include "core/optim/adamw_optimizer.h"
#include "models/llama/llama_model.h"
#include "training/checkpoint/checkpoint.h"

namespace kelvin::training {

// How this rank's model and optimizer state relate to the other replicas'.
struct ReplicaPlace {
  int replica = 0;                 // its rank among the ranks holding the same model slice
  bool sharded_optimizer = false;  // ZeRO-1: its state spans are its own shard
};

// The logical tensors of the whole model of `config` in a checkpoint: every parameter and its
// two moments.
std::set<std::string> CheckpointTensorNames(const models::LlamaConfig& config);

// This rank's training state, its tensors sharing the optimizer's storage (`spans`: its
// StateSpans). The one canonical copy of each element is written: by the first replica (data- and
// context-parallel rank 0), or by every replica for its ZeRO-1 shard; among the tensor and pipeline
// ranks by LlamaModel::IsCanonicalCopy. Every rank restores all it holds (with ZeRO-1 its shard,
// which the optimizer then shares with the model).
TrainingState TrainingStateOf(const models::LlamaModel& model,
                              const std::vector<OptimizerSpan>& spans, int64_t optimizer_steps,
                              const ReplicaPlace& place, const std::string& layout);

}  // namespace kelvin::training
