// `kelvin eval`: the job's model on its held-out sets, under any valid layout of the job
// (checkpoints reshard on load; training/checkpoint/checkpoint.h), every rank calling it.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "configs/kelvin.pb.h"
#include "launcher/commands/command_line.h"
#include "training/checkpoint/checkpoint.h"
#include "training/trainer.h"

namespace kelvin::launcher {

// The model as the job would continue it (restored from checkpoint.dir when that holds a
// checkpoint and checkpoint.resume allows it, else model.hf_dir or the seed's initialisation) on
// training.eval_steps held-out global batches (or the whole set); its step is the checkpoint's.
absl::StatusOr<inference::EvalStats> EvaluateJob(const config::JobConfig& job);

// The same evaluation, and each data.also_eval set's, as `kelvin eval` prints them; with a
// `checkpoint` choice other than the newest (--step N, --best), of that checkpoint of
// checkpoint.dir (an error naming the field when there is none).
struct JobEvaluation {
  inference::EvalStats main;
  std::vector<std::pair<std::string, inference::EvalStats>>
      also;  // (name, statistics), in config order
};
absl::StatusOr<JobEvaluation> EvaluateJobOnEverySet(
    const config::JobConfig& job, const training::CheckpointChoice& checkpoint = {});

// Every complete checkpoint of checkpoint.dir, oldest first, evaluated as above (`kelvin eval
// --all`; the model is built once and each checkpoint restored in turn); an error naming the
// field when there is none.
absl::StatusOr<std::vector<JobEvaluation>> EvaluateEveryCheckpoint(const config::JobConfig& job);

// One set's result as `kelvin eval` prints it, at full precision: "loss 2.254109614 | perplexity
// 9.52687 | token accuracy 61.23% (6123 of 10000 tokens)" (and passkey retrieval).
std::string FormatEvaluation(const inference::EvalStats& stats);

// The evaluations as JSON (`kelvin eval --json FILE`): {"job": ..., "evaluations": [{"step": N,
// "sets": [{"name": "main" or the data.also_eval name, "loss", "perplexity", "token_accuracy",
// "labelled_tokens", "correct_tokens", "passkey_retrieval" (passkey only)}, ...]}, ...]}, losses
// in full double precision.
std::string EvaluationsJson(const config::JobConfig& job,
                            const std::vector<JobEvaluation>& evaluations);

void AddEvalCommand(CommandLine& line);

}  // namespace kelvin::launcher
