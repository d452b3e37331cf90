// `kelvin convert` and `kelvin eval`. Convert runs in one process (under mpirun or srun, rank 0
// alone) whatever layout wrote the checkpoint: it reads each tensor whole from the checkpoint's
// pieces and writes the Hugging Face files a shard at a time, with no model or optimizer in
// memory and no GPU. Eval runs under any valid layout of the job (checkpoints reshard on load;
// training/checkpoint/checkpoint.h), every rank calling it.
#pragma once

#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "configs/kelvin.pb.h"
#include "training/checkpoint/checkpoint.h"
#include "training/trainer.h"

namespace kelvin::launcher {

struct ConvertOptions {
  training::CheckpointChoice checkpoint;  // the newest, a step's or the best
  DType dtype = DType::kF32;  // of the written weights: f32 (the masters, exact) or bf16 (RNE)
};

// Writes the weights of the chosen complete checkpoint of checkpoint.dir (an error naming the
// field when there is none; the checkpoint must be this job's and of its model) to `directory` as
// a Hugging Face model (config.json + safetensors). Returns the checkpoint's step.
absl::StatusOr<int64_t> ConvertCheckpointToHf(const config::JobConfig& job,
                                              const std::string& directory,
                                              const ConvertOptions& options = {});

// The model as the job would continue it (restored from checkpoint.dir when that holds a
// checkpoint and checkpoint.resume allows it, else model.hf_dir or the seed's initialisation) on
// training.eval_steps held-out global batches (or the whole set); its step is the checkpoint's.
absl::StatusOr<training::EvalStats> EvaluateJob(const config::JobConfig& job);

// The same evaluation, and each data.also_eval set's, as `kelvin eval` prints them; with a
// `checkpoint` choice other than the newest (--step N, --best), of that checkpoint of
// checkpoint.dir (an error naming the field when there is none).
struct JobEvaluation {
  training::EvalStats main;
  std::vector<std::pair<std::string, training::EvalStats>>
      also;  // (name, statistics), in config order
};
absl::StatusOr<JobEvaluation> EvaluateJobOnEverySet(
    const config::JobConfig& job, const training::CheckpointChoice& checkpoint = {});

// Every complete checkpoint of checkpoint.dir, oldest first, evaluated as above (`kelvin eval
// --all`; the model is built once and each checkpoint restored in turn); an error naming the
// field when there is none.
absl::StatusOr<std::vector<JobEvaluation>> EvaluateEveryCheckpoint(const config::JobConfig& job);

}  // namespace kelvin::launcher
