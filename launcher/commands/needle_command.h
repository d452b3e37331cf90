// `kelvin eval MODEL_OR_JOB --needle`: the needle-in-a-haystack grid by generation
// (inference/needle_grid.h) of a job's model or a Hugging Face directory, on the CPU or a GPU, the
// model whole or split over the processes of a launcher (tensor parallelism), with the model's
// tokenizer (model.hf_dir's tokenizer.json) or the passkey task's bytes.
#pragma once

#include <string>
#include <vector>

#include "configs/kelvin.pb.h"
#include "core/status.h"
#include "inference/needle_grid.h"
#include "parallel/comm/communicator.h"
#include "ssa/temperature_histogram.h"
#include "training/checkpoint/checkpoint.h"
#include "training/job/job_setup.h"

namespace kelvin::launcher {

// The most samples per cell, and prompts in all (lengths x depths x samples), one run takes: far
// beyond any useful grid, and the counts stay far inside int64.
inline constexpr int64_t kMaxNeedleSamples = int64_t{1} << 20;
inline constexpr int64_t kMaxNeedlePrompts = int64_t{1} << 24;

struct NeedleOptions {
  std::vector<int64_t> lengths;  // empty: 1024, 2048, ... up to max_position_embeddings
  std::vector<double> depths;    // empty: 0, 0.1, ..., 1
  data::RetrievalTask task = data::RetrievalTask::kPasskey;
  int64_t samples = 10;       // per cell, in [1, kMaxNeedleSamples]
  uint64_t seed = 0;          // the samples' seed (offset from the job's training seeds)
  bool temperatures = false;  // histograms of an SSA model's temperatures on the prompts
  std::string tokenizer;      // --tokenizer DIR: in place of model.hf_dir's ("" none)
  training::CheckpointChoice checkpoint;
};

// One layer's temperatures over the prompts of the grid's first length (with the study's jobs, the
// trained length): tau^q, tau^v (count 0 where off) and sigma(alpha) per head.
struct LayerTemperatureHistograms {
  ssa::TemperatureHistogram query, value;
  std::vector<double> sigma_alpha;  // [H]; empty without the position term
};

struct NeedleReport {
  inference::NeedleGridSpec spec;
  std::string text;  // "bytes" (the passkey task's vocabulary) or "tokenizer"
  std::vector<inference::NeedleCell> cells;
  std::vector<LayerTemperatureHistograms> temperatures;  // [L] with --temperatures and SSA
};

// The grid of the job's model, run where `placement` says (inference/forward_model.h),
// split over `tp` (nullptr: held whole; every rank decodes the same tokens and gets the whole
// report, its temperatures over every head); the decoys are data.passkey.distractors when the job
// has it.
absl::StatusOr<NeedleReport> RunNeedle(const config::JobConfig& job, const NeedleOptions& options,
                                       const training::TrainingPlacement& placement = {},
                                       parallel::Communicator* tp = nullptr);

// The grid as a table: a row per length, a column per depth, accuracies in percent, each row's
// mean at the end.
std::string FormatNeedle(const config::JobConfig& job, const NeedleReport& report);
// As JSON: {"model", "task", "text", "samples_per_cell", "seed", "distractors", "lengths",
// "depths", "cells": [{"length", "depth", "samples", "retrieved", "accuracy", "mean_score",
// "mean_depth", "mean_prompt_tokens"}, ...], "by_length": [{"length", "accuracy"}], "accuracy", and
// with the temperatures "temperatures": [{"layer", "sigma_alpha", "query" and "value": {"count",
// "mean", "near_lower", "near_upper", "at_clamp", "bin_low", "bin_width", "counts"}}, ...]}.
std::string NeedleJson(const config::JobConfig& job, const NeedleReport& report);

}  // namespace kelvin::launcher
