// The model, its text (tokenizer or bytes) and the grid's defaults, then RunNeedleGrid.
#include "launcher/commands/needle_command.h"

#include <algorithm>
#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/copy.h"
#include "core/logging.h"
#include "launcher/commands/inference_options.h"
#include "models/llama/llama_pipeline_stage.h"
#include "ssa/temperature.h"

namespace kelvin::launcher {
namespace {

// Needle samples come from seeds of their own, never a training or evaluation seed's samples.
constexpr uint64_t kNeedleSeedOffset = 0x6e656564ULL;  // "need"
constexpr int64_t kShortestDefaultLength = 1024;

std::vector<int64_t> DefaultLengths(int64_t max_positions) {
  std::vector<int64_t> lengths;
  for (int64_t length = kShortestDefaultLength; length <= max_positions; length *= 2) {
    lengths.push_back(length);
  }
  if (lengths.empty()) lengths.push_back(max_positions);
  return lengths;
}

std::vector<double> DefaultDepths() {
  std::vector<double> depths;
  for (int tenth = 0; tenth <= 10; ++tenth) depths.push_back(tenth / 10.0);
  return depths;
}

// Fills report.temperatures from every layer's temperatures of each call on `decoder` (on a
// device, each call's temperatures and positions are copied to the host, where the bins are).
void CollectTemperatureHistograms(const models::LlamaModel& model, NeedleReport& report,
                                  models::LlamaDecoder& decoder) {
  const models::LlamaConfig& arch = model.config();
  const Context& ctx = model.context();
  report.temperatures.resize(arch.num_layers);
  for (int64_t l = 0; l < arch.num_layers; ++l) {
    // alpha exists with the query temperature; it shapes tau^q only with the position term.
    const Tensor alpha = arch.ssa->position_aware ? model.layer_weights(l).ssa.alpha : Tensor();
    report.temperatures[l].sigma_alpha =
        ssa::ComputeTemperatureStatistics(ctx, Tensor(), Tensor(), alpha).sigma_alpha;
  }
  decoder.ObserveTemperatures([&report, &ctx, options = *arch.ssa](
                                  int64_t layer, const Tensor& positions, const Tensor& tau_q,
                                  const Tensor& tau_v) {
    const auto on_host = [&ctx](const Tensor& t) {
      return t.is_cpu() ? t : CopyToDevice(ctx, t, Device::Cpu());
    };
    LayerTemperatureHistograms& histograms = report.temperatures[layer];
    const Tensor host_positions = on_host(positions);
    if (tau_q.defined()) {
      ssa::AddToTemperatureHistogram(options, on_host(tau_q), host_positions,
                                     histograms.sigma_alpha, histograms.query);
    }
    if (tau_v.defined()) {
      ssa::AddToTemperatureHistogram(options, on_host(tau_v), host_positions, {}, histograms.value);
    }
  });
}

// The histograms of a model split over `tp` (each rank's of its own heads) made the whole
// model's on every rank: bins and counts summed, sigma(alpha) per head gathered in head order
// (rank r holds the r-th contiguous block of heads).
void MergeTemperatureHistograms(parallel::Communicator& tp, NeedleReport& report) {
  constexpr int64_t kFields = ssa::TemperatureHistogram::kBins + 5;  // bins, 4 counts, the sum
  for (LayerTemperatureHistograms& layer : report.temperatures) {
    for (ssa::TemperatureHistogram* h : {&layer.query, &layer.value}) {
      Tensor fields = Tensor::Empty({kFields}, DType::kF64);  // [kBins + 5] on the host
      double* f = fields.data<double>();
      std::copy(h->counts.begin(), h->counts.end(), f);
      double* tail = f + ssa::TemperatureHistogram::kBins;
      tail[0] = static_cast<double>(h->count);
      tail[1] = static_cast<double>(h->near_lower);
      tail[2] = static_cast<double>(h->near_upper);
      tail[3] = static_cast<double>(h->at_clamp);
      tail[4] = h->sum;
      tp.AllReduce(fields, parallel::ReduceOp::kSum);
      for (int b = 0; b < ssa::TemperatureHistogram::kBins; ++b) {
        h->counts[static_cast<size_t>(b)] = static_cast<int64_t>(f[b]);
      }
      h->count = static_cast<int64_t>(tail[0]);
      h->near_lower = static_cast<int64_t>(tail[1]);
      h->near_upper = static_cast<int64_t>(tail[2]);
      h->at_clamp = static_cast<int64_t>(tail[3]);
      h->sum = tail[4];
    }
    if (layer.sigma_alpha.empty()) continue;
    const auto heads = static_cast<int64_t>(layer.sigma_alpha.size());  // this rank's
    Tensor mine = Tensor::Empty({heads}, DType::kF64);
    std::copy(layer.sigma_alpha.begin(), layer.sigma_alpha.end(), mine.data<double>());
    Tensor all = Tensor::Empty({heads * tp.size()}, DType::kF64);  // [H] in rank order
    tp.AllGather(mine, all);
    layer.sigma_alpha.assign(all.data<double>(), all.data<double>() + all.numel());
  }
}

nlohmann::ordered_json HistogramJson(const ssa::TemperatureHistogram& h) {
  return {{"count", h.count},
          {"mean", h.mean()},
          {"near_lower", h.near_lower},
          {"near_upper", h.near_upper},
          {"at_clamp", h.at_clamp},
          {"bin_low", ssa::TemperatureHistogram::kLow},
          {"bin_width", ssa::TemperatureHistogram::kBinWidth},
          {"counts", h.counts}};
}

// The grid's size: samples per cell and prompts in all within their limits (the product checked
// for overflow).
absl::Status CheckNeedleGridSize(const inference::NeedleGridSpec& spec) {
  if (spec.samples < 1 || spec.samples > kMaxNeedleSamples) {
    return absl::InvalidArgumentError(
        absl::StrCat("--samples ", spec.samples, ": must be in [1, ", kMaxNeedleSamples, "]"));
  }
  const auto lengths = static_cast<int64_t>(spec.lengths.size());
  const auto depths = static_cast<int64_t>(spec.depths.size());
  int64_t cells = 0, prompts = 0;
  if (__builtin_mul_overflow(lengths, depths, &cells) ||
      __builtin_mul_overflow(cells, spec.samples, &prompts) || prompts > kMaxNeedlePrompts) {
    return absl::InvalidArgumentError(
        absl::StrCat("the needle grid of ", lengths, " lengths x ", depths, " depths x ",
                     spec.samples, " samples is more than the ", kMaxNeedlePrompts,
                     " prompts one run takes: give fewer --lengths, --depths or --samples"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<NeedleReport> RunNeedle(const config::JobConfig& job, const NeedleOptions& options,
                                       const training::TrainingPlacement& placement,
                                       parallel::Communicator* tp) {
  KELVIN_ASSIGN_OR_RETURN(const std::optional<data::Tokenizer> tokenizer,
                          inference::LoadModelTokenizer(job, options.tokenizer, "", ""));
  KELVIN_ASSIGN_OR_RETURN(const std::unique_ptr<models::LlamaModel> model,
                          inference::LoadInferenceModel(job, options.checkpoint, placement, tp));
  const models::LlamaConfig& arch = model->config();
  NeedleReport report;
  inference::NeedleText text;
  if (tokenizer.has_value()) {
    KELVIN_ASSIGN_OR_RETURN(text, inference::TokenizerNeedleText(*tokenizer));
    report.text = "tokenizer";
  } else if (arch.vocab_size == data::kByteVocabSize) {
    text = inference::ByteNeedleText();
    report.text = "bytes";
  } else {
    return absl::FailedPreconditionError(
        absl::StrCat("the needle grid needs the model's tokenizer (model.hf_dir's tokenizer.json, "
                     "or --tokenizer "
                     "DIR), or a model "
                     "of the passkey task's ",
                     data::kByteVocabSize, "-token byte vocabulary; this one has ", arch.vocab_size,
                     " tokens and ",
                     job.model().has_hf_dir() ? absl::StrCat("model.hf_dir=", job.model().hf_dir())
                                              : std::string("no model.hf_dir")));
  }
  inference::NeedleGridSpec& spec = report.spec;
  spec.lengths =
      options.lengths.empty() ? DefaultLengths(arch.max_position_embeddings) : options.lengths;
  spec.depths = options.depths.empty() ? DefaultDepths() : options.depths;
  spec.samples = options.samples;
  spec.seed = kNeedleSeedOffset + options.seed;
  spec.task = options.task;
  spec.distractors = job.data().has_passkey() && spec.task == data::RetrievalTask::kPasskey
                         ? job.data().passkey().distractors()
                         : 0;
  KELVIN_RETURN_IF_ERROR(CheckNeedleGridSize(spec));
  const int64_t longest = *std::max_element(spec.lengths.begin(), spec.lengths.end());
  if (longest > arch.PositionLimit()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--lengths: ", longest, " tokens exceed the model's max_position_embeddings ",
                     arch.max_position_embeddings));
  }
  KELVIN_ASSIGN_OR_RETURN(models::LlamaDecoder decoder,
                          models::LlamaDecoder::Create(*model, longest));
  if (options.temperatures) {
    if (!arch.ssa.has_value()) {
      return absl::FailedPreconditionError(
          "--temperatures: the model has no SSA temperatures (model.ssa.enabled is false)");
    }
    CollectTemperatureHistograms(*model, report, decoder);
  }
  KELVIN_ASSIGN_OR_RETURN(
      report.cells,
      inference::RunNeedleGrid(decoder, text, spec, [&](const inference::NeedleCell& cell) {
        // The histograms hold the first length's prompts only.
        if (cell.length == spec.lengths.front() && cell.depth == spec.depths.back()) {
          decoder.ObserveTemperatures(nullptr);
        }
        KLOG(INFO) << absl::StrFormat("needle length %d depth %.0f%%: %d of %d retrieved",
                                      cell.length, 100 * cell.depth, cell.retrieved, cell.samples);
      }));
  if (tp != nullptr && tp->size() > 1) MergeTemperatureHistograms(*tp, report);
  return report;
}

std::string FormatNeedle(const config::JobConfig& job, const NeedleReport& report) {
  const inference::NeedleGridSpec& spec = report.spec;
  std::string table = absl::StrFormat(
      "needle grid of %s, task %s: retrieval %% by greedy generation, %d samples per cell%s\n%8s",
      job.name(), data::RetrievalTaskName(spec.task), spec.samples,
      spec.distractors > 0 ? absl::StrFormat(", %d decoys each", spec.distractors) : "", "length");
  for (const double depth : spec.depths) absl::StrAppendFormat(&table, " %5.0f%%", 100 * depth);
  absl::StrAppend(&table, " |   mean\n");
  for (size_t l = 0; l < spec.lengths.size(); ++l) {
    absl::StrAppendFormat(&table, "%8d", spec.lengths[l]);
    double sum = 0;
    for (size_t d = 0; d < spec.depths.size(); ++d) {
      const double accuracy = report.cells[l * spec.depths.size() + d].accuracy();
      sum += accuracy;
      absl::StrAppendFormat(&table, " %6.1f", 100 * accuracy);
    }
    absl::StrAppendFormat(&table, " | %6.1f\n", 100 * sum / spec.depths.size());
  }
  return table;
}

std::string NeedleJson(const config::JobConfig& job, const NeedleReport& report) {
  const inference::NeedleGridSpec& spec = report.spec;
  nlohmann::ordered_json cells = nlohmann::ordered_json::array();
  nlohmann::ordered_json by_length = nlohmann::ordered_json::array();
  int64_t retrieved = 0, samples = 0;
  for (size_t l = 0; l < spec.lengths.size(); ++l) {
    int64_t length_retrieved = 0, length_samples = 0;
    for (size_t d = 0; d < spec.depths.size(); ++d) {
      const inference::NeedleCell& cell = report.cells[l * spec.depths.size() + d];
      cells.push_back({{"length", cell.length},
                       {"depth", cell.depth},
                       {"samples", cell.samples},
                       {"retrieved", cell.retrieved},
                       {"accuracy", cell.accuracy()},
                       {"mean_score", cell.mean_score},
                       {"mean_depth", cell.mean_depth},
                       {"mean_prompt_tokens", cell.mean_prompt_tokens}});
      length_retrieved += cell.retrieved;
      length_samples += cell.samples;
    }
    by_length.push_back({{"length", spec.lengths[l]},
                         {"accuracy", static_cast<double>(length_retrieved) / length_samples}});
    retrieved += length_retrieved;
    samples += length_samples;
  }
  nlohmann::ordered_json root = {{"model", job.name()},
                                 {"task", data::RetrievalTaskName(spec.task)},
                                 {"text", report.text},
                                 {"samples_per_cell", spec.samples},
                                 {"seed", spec.seed},
                                 {"distractors", spec.distractors},
                                 {"lengths", spec.lengths},
                                 {"depths", spec.depths},
                                 {"cells", cells},
                                 {"by_length", by_length},
                                 {"accuracy", static_cast<double>(retrieved) / samples}};
  if (!report.temperatures.empty()) {
    nlohmann::ordered_json layers = nlohmann::ordered_json::array();
    for (size_t l = 0; l < report.temperatures.size(); ++l) {
      const LayerTemperatureHistograms& t = report.temperatures[l];
      layers.push_back({{"layer", l},
                        {"sigma_alpha", t.sigma_alpha},
                        {"query", HistogramJson(t.query)},
                        {"value", HistogramJson(t.value)}});
    }
    root["temperatures"] = layers;
  }
  return root.dump(2) + "\n";
}

}  // namespace kelvin::launcher
