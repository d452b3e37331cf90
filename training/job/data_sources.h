// The training and evaluation batches of a job, from its data section: the passkey task, one
// corpus (Megatron indexed dataset or flat token file) or a weighted blend of corpora, each corpus
// split into a training and a held-out part by data.eval_fraction, or evaluated on a held-out
// corpus of its own (data.eval), plus any further held-out sets (data.also_eval); rows by
// data.packing. Every error names the config field at fault.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "configs/kelvin.pb.h"
#include "data/sampling/batch.h"
#include "models/llama/llama_config.h"

namespace kelvin::training {

// One data.also_eval set: its rows, made as the training rows are.
struct NamedEvalSource {
  std::string name;
  std::unique_ptr<data::BatchSource> source;
  std::string corpus;  // what identifies its corpus (file, token and document counts, loss mask)
};

struct DataSources {
  std::unique_ptr<data::BatchSource> train;
  std::unique_ptr<data::BatchSource> eval;  // null when the job does not evaluate
  std::vector<NamedEvalSource> also_eval;   // data.also_eval, in order
  bool passkey = false;                     // batches are passkey samples (retrieval is scored)
  // What identifies each training corpus (file, token and document counts, loss mask), and the
  // data.eval corpus, for a resume to tell when the files under the same paths changed; empty for
  // the passkey task (and without data.eval).
  std::vector<std::string> corpora;
  std::string eval_corpus;
};
absl::StatusOr<DataSources> BuildDataSources(const config::JobConfig& job,
                                             const models::LlamaConfig& arch);

// Every data file the job names (Megatron .bin/.idx pairs and loss masks, token files) exists
// here as a readable regular file, checked without reading them (`kelvin launch`, before the job
// queues); the error names the field.
absl::Status CheckDataFilesExist(const config::JobConfig& job);

}  // namespace kelvin::training
