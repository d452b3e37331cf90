// `kelvin eval`: the job's model on its held-out sets (inference/job_evaluation.h: forward-only,
// under any valid layout of the job), or any model on a corpus or the needle grid; how it prints
// and writes the results.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "configs/kelvin.pb.h"
#include "inference/job_evaluation.h"
#include "launcher/commands/command_line.h"

namespace kelvin::launcher {

// One set's result as `kelvin eval` prints it, at full precision: "loss 2.254109614 | perplexity
// 9.52687 | token accuracy 61.23% (6123 of 10000 tokens)" (and passkey retrieval).
std::string FormatEvaluation(const inference::EvalStats& stats);

// The evaluations as JSON (`kelvin eval --json FILE`): {"job": ..., "evaluations": [{"step": N,
// "sets": [{"name": "main" or the data.also_eval name, "loss", "perplexity", "token_accuracy",
// "labelled_tokens", "correct_tokens", "passkey_retrieval" (passkey only)}, ...]}, ...]}, losses
// in full double precision.
std::string EvaluationsJson(const config::JobConfig& job,
                            const std::vector<inference::JobEvaluation>& evaluations);

void AddEvalCommand(CommandLine& line);

}  // namespace kelvin::launcher
