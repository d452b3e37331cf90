// `kelvin eval JOB`'s evaluation: the job's model, forward-only on the job's layout (every rank
// calling it), with the weights of a checkpoint of checkpoint.dir (any layout wrote it) or, without
// one, model.hf_dir's or the seed's initialisation, scored on the job's held-out set and each
// data.also_eval set by the trainer's own held-out evaluation (HeldOutEvaluation).
#pragma once

#include <mpi.h>

#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "configs/kelvin.pb.h"
#include "inference/held_out_evaluation.h"
#include "training/checkpoint/checkpoint.h"

namespace kelvin::inference {

// The evaluation of one model: the main held-out set's, and each data.also_eval set's.
struct JobEvaluation {
  EvalStats main;
  std::vector<std::pair<std::string, EvalStats>> also;  // (name, statistics), in config order
};

// The model as the job would continue it (the newest checkpoint of checkpoint.dir unless
// checkpoint.resume is NEVER; REQUIRED without one is an error; else model.hf_dir or the seed's
// initialisation, with a warning that it is untrained) on every held-out set; with a `checkpoint`
// choice other than the newest (a step, the best), that checkpoint of checkpoint.dir (an error
// naming the field when there is none). Its step is the checkpoint's. Collective over `world`.
absl::StatusOr<JobEvaluation> EvaluateJobOnEverySet(
    const config::JobConfig& job, const training::CheckpointChoice& checkpoint = {},
    MPI_Comm world = MPI_COMM_WORLD);

// The main held-out set's evaluation alone (as above, of the newest checkpoint).
absl::StatusOr<EvalStats> EvaluateJob(const config::JobConfig& job,
                                      MPI_Comm world = MPI_COMM_WORLD);

// Every complete checkpoint of checkpoint.dir, oldest first, evaluated as above (the model is
// built once and each checkpoint's weights read in turn); an error naming the field when there is
// none. Collective over `world`.
absl::StatusOr<std::vector<JobEvaluation>> EvaluateEveryCheckpoint(const config::JobConfig& job,
                                                                   MPI_Comm world = MPI_COMM_WORLD);

}  // namespace kelvin::inference
