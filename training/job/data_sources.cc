// Data sources from the job config: passkey generators, corpus samplers over the training and
// held-out parts, and blends of them.
#include "training/job/data_sources.h"

#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/io/regular_file.h"
#include "core/logging.h"
#include "core/status.h"
#include "data/corpus/mmap_indexed_dataset.h"
#include "data/corpus/token_file.h"
#include "data/sampling/blended_sampler.h"
#include "data/sampling/packed_sampler.h"
#include "data/sampling/random.h"
#include "data/sampling/sampler.h"
#include "data/tasks/passkey_task.h"

namespace kelvin::training {
namespace {

// Evaluation samples come from another seed, so they are never trained on.
constexpr uint64_t kEvalSeedOffset = 0x5eed5eed5eedULL;

absl::StatusOr<DataSources> PasskeySources(const config::JobConfig& job,
                                           const models::LlamaConfig& arch) {
  const config::DataConfig& data = job.data();
  const config::TrainingConfig& training = job.training();
  if (arch.vocab_size < data::kByteVocabSize) {
    return absl::InvalidArgumentError(
        absl::StrCat("data.passkey uses a byte vocabulary of ", data::kByteVocabSize,
                     " tokens, but the model's vocab_size is ", arch.vocab_size,
                     ": use model.preset=\"tiny\" or set model.architecture.vocab_size >= ",
                     data::kByteVocabSize));
  }
  data::PasskeyOptions options{training.seq_length(),
                               training.micro_batch_size(),
                               training.seed(),
                               {data.passkey().min_depth(), data.passkey().max_depth()},
                               data.passkey().distractors(),
                               data.passkey().min_length()};
  DataSources sources;
  KELVIN_ASSIGN_OR_RETURN(sources.train, data::PasskeyTask::Create(options));
  if (training.eval_interval() > 0) {
    options.seed += kEvalSeedOffset;
    KELVIN_ASSIGN_OR_RETURN(sources.eval, data::PasskeyTask::Create(options));
  }
  sources.passkey = true;
  return sources;
}

// `status` with the config field at fault in front ("data.blend.corpora[1].token_file: ...").
absl::Status InField(absl::string_view field, const absl::Status& status) {
  return absl::Status(status.code(), absl::StrCat(field, ": ", status.message()));
}

// The Megatron dataset with its loss mask when it names one; `field` names the dataset in errors.
absl::StatusOr<data::TokenCorpus> OpenMegatron(const config::MegatronDataset& dataset,
                                               const std::string& field) {
  absl::StatusOr<data::TokenCorpus> corpus = data::OpenMegatronDataset(dataset.path_prefix());
  if (!corpus.ok()) return InField(field, corpus.status());
  if (dataset.loss_mask_path_prefix().empty()) return corpus;
  absl::StatusOr<data::TokenCorpus> mask =
      data::OpenMegatronDataset(dataset.loss_mask_path_prefix());
  const absl::Status attached =
      mask.ok() ? corpus->AttachLossMask(std::move(mask).value()) : mask.status();
  if (!attached.ok()) return InField(field + ".loss_mask_path_prefix", attached);
  return corpus;
}

// The corpus a DataConfig, BlendedCorpus or HeldOutCorpus names (each has megatron and
// token_file) for a model of `vocab_size` tokens; `field` is the source's path in the config
// ("data", "data.blend.corpora[1]").
template <typename Source>
absl::StatusOr<data::TokenCorpus> OpenCorpus(const Source& source, int64_t vocab_size,
                                             const std::string& field) {
  if (source.has_megatron()) return OpenMegatron(source.megatron(), field + ".megatron");
  const config::TokenFile& file = source.token_file();
  if (file.has_document_separator_token() && file.document_separator_token() >= vocab_size) {
    return absl::InvalidArgumentError(absl::StrCat(
        field, ".token_file.document_separator_token=", file.document_separator_token(),
        " is outside the model's vocabulary [0, ", vocab_size,
        "): no token of the corpus can be it, so no document would end; give the id that ends "
        "each document (e.g. the tokenizer's eos)"));
  }
  absl::StatusOr<data::TokenCorpus> corpus = data::OpenTokenFile(
      file.path(),
      file.dtype() == config::TokenFile::UINT16 ? data::TokenType::kUInt16
                                                : data::TokenType::kInt32,
      file.has_document_separator_token() ? std::optional<int64_t>(file.document_separator_token())
                                          : std::nullopt);
  if (!corpus.ok()) return InField(field + ".token_file", corpus.status());
  return corpus;
}

// How many epochs of `sampler`'s rows the run reads when `share` of its samples come from it
// (`corpus` names it in a blend, ending in ", "; empty for the only corpus): fine-tuning is
// planned in epochs.
void LogEpochs(const config::JobConfig& job, const data::RowSampler& sampler, double share,
               const std::string& corpus) {
  const double rows_read = share * static_cast<double>(job.training().steps()) *
                           static_cast<double>(job.training().global_batch_size());
  KLOG_RANK0(INFO) << absl::StrFormat(
      "data: %sthe run's %d steps x %d rows read %.2f epochs of %s %d training rows", corpus,
      job.training().steps(), job.training().global_batch_size(),
      rows_read / static_cast<double>(sampler.num_rows()), corpus.empty() ? "the" : "its",
      sampler.num_rows());
}

// One corpus's samplers: its training part and, with data.eval_fraction, its held-out part.
struct CorpusSamplers {
  std::unique_ptr<data::RowSampler> train, eval;
  std::string fingerprint;  // CorpusFingerprint of the corpus
};

// What identifies a corpus's contents for a resume: its file, token and document counts, and
// whether it has a loss mask ("/d/c.bin: 21074 tokens in 1500 documents, loss mask").
std::string CorpusFingerprint(const data::TokenCorpus& corpus) {
  return absl::StrCat(corpus.path(), ": ", corpus.num_tokens(), " tokens in ",
                      corpus.num_documents(), " documents",
                      corpus.has_loss_mask() ? ", loss mask" : "");
}

// The rows every corpus sampler of the job makes: T, B, the vocabulary, document masking; `seed`
// shuffles them.
data::SamplerOptions SamplerOptionsOf(const config::JobConfig& job, const models::LlamaConfig& arch,
                                      uint64_t seed) {
  return {job.training().seq_length(), job.training().micro_batch_size(), arch.vocab_size, seed,
          job.data().document_masking()};
}

// The sampler of data.packing over (part of) `corpus`; `part` names it in the log.
absl::StatusOr<std::unique_ptr<data::RowSampler>> RowSamplerOf(
    std::shared_ptr<const data::TokenCorpus> corpus, const data::SamplerOptions& options,
    config::DataConfig::Packing packing, std::string_view part) {
  if (packing == config::DataConfig::STREAM) {
    KELVIN_ASSIGN_OR_RETURN(std::unique_ptr<data::CorpusSampler> sampler,
                            data::CorpusSampler::Create(std::move(corpus), options));
    return sampler;
  }
  const std::string path = corpus->path();
  KELVIN_ASSIGN_OR_RETURN(std::unique_ptr<data::PackedSampler> sampler,
                          data::PackedSampler::Create(std::move(corpus), options));
  const double fill = static_cast<double>(sampler->packed_tokens()) /
                      static_cast<double>(sampler->num_rows() * options.sequence_length);
  KLOG_RANK0(INFO) << "data: " << path << " (" << part << "): " << sampler->num_documents()
                   << " documents packed into " << sampler->num_rows() << " rows of "
                   << options.sequence_length << " tokens, " << absl::StrFormat("%.1f", 100 * fill)
                   << "% of them document tokens (the rest padding)";
  if (sampler->truncated_documents() > 0) {
    KLOG_RANK0(WARNING) << "data: " << path << " (" << part
                        << "): " << sampler->truncated_documents()
                        << " documents are longer than training.seq_length="
                        << options.sequence_length << " and keep only their first "
                        << options.sequence_length << " tokens"
                        << (sampler->truncated_without_targets() > 0
                                ? absl::StrCat("; ", sampler->truncated_without_targets(),
                                               " of them lose every training target (their answers "
                                               "lie beyond the cut): raise training.seq_length or "
                                               "shorten those samples")
                                : "");
  }
  return sampler;
}

absl::StatusOr<CorpusSamplers> SamplersOf(data::TokenCorpus opened, const config::JobConfig& job,
                                          const models::LlamaConfig& arch, uint64_t seed) {
  const config::DataConfig& data = job.data();
  const config::TrainingConfig& training = job.training();
  auto corpus = std::make_shared<const data::TokenCorpus>(std::move(opened));
  data::SamplerOptions options = SamplerOptionsOf(job, arch, seed);
  CorpusSamplers samplers;
  samplers.fingerprint = CorpusFingerprint(*corpus);
  if (data.eval_fraction() == 0) {
    KELVIN_ASSIGN_OR_RETURN(samplers.train,
                            RowSamplerOf(corpus, options, data.packing(), "training"));
    return samplers;
  }
  // The last eval_fraction of the corpus is held out: training never sees it, each evaluation
  // scores the same training.eval_steps global batches of it (or all of it).
  const int64_t held_out_start = data::HeldOutStart(
      *corpus, data.eval_fraction(), data.packing() == config::DataConfig::DOCUMENTS);
  const int64_t row_tokens = training.seq_length() + 1;
  const bool stream_rows = data.packing() == config::DataConfig::STREAM;  // packed: any document
  if (stream_rows &&
      (held_out_start < row_tokens || corpus->num_tokens() - held_out_start < row_tokens)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "data.eval_fraction=", data.eval_fraction(), " splits the ", corpus->num_tokens(),
        "-token corpus ", corpus->path(), " at token ", held_out_start,
        ", leaving a part shorter than one row of training.seq_length + 1 = ", row_tokens,
        " tokens: choose a fraction that leaves both parts at least that long"));
  }
  options.stream_end = held_out_start;
  KELVIN_ASSIGN_OR_RETURN(samplers.train,
                          RowSamplerOf(corpus, options, data.packing(), "training part"));
  options.stream_begin = held_out_start;
  options.stream_end = corpus->num_tokens();
  KELVIN_ASSIGN_OR_RETURN(samplers.eval,
                          RowSamplerOf(corpus, options, data.packing(), "held-out part"));
  return samplers;
}

absl::StatusOr<DataSources> BlendSources(const config::JobConfig& job,
                                         const models::LlamaConfig& arch) {
  const config::DataBlend& blend = job.data().blend();
  std::vector<std::unique_ptr<data::RowSampler>> train, eval;
  std::vector<double> weights;
  std::vector<std::string> fingerprints;
  for (int j = 0; j < blend.corpora_size(); ++j) {
    const config::BlendedCorpus& corpus = blend.corpora(j);
    const std::string field = absl::StrCat("data.blend.corpora[", j, "]");
    KELVIN_ASSIGN_OR_RETURN(data::TokenCorpus opened, OpenCorpus(corpus, arch.vocab_size, field));
    // Each corpus shuffles its rows with its own seed.
    absl::StatusOr<CorpusSamplers> samplers =
        SamplersOf(std::move(opened), job, arch,
                   data::MixSeed(job.training().seed(), static_cast<uint64_t>(j) + 1));
    if (!samplers.ok()) return InField(field, samplers.status());
    train.push_back(std::move(samplers->train));
    if (samplers->eval != nullptr) eval.push_back(std::move(samplers->eval));
    weights.push_back(corpus.weight());
    fingerprints.push_back(std::move(samplers->fingerprint));
  }
  double total_weight = 0;
  for (const double weight : weights) total_weight += weight;
  for (size_t j = 0; j < train.size(); ++j) {
    LogEpochs(job, *train[j], weights[j] / total_weight,
              absl::StrFormat("data.blend.corpora[%d] (%.1f%% of the samples), ", j,
                              100 * weights[j] / total_weight));
  }
  DataSources sources;
  sources.corpora = std::move(fingerprints);
  KELVIN_ASSIGN_OR_RETURN(sources.train, data::BlendedSampler::Create(std::move(train), weights));
  if (!eval.empty()) {
    KELVIN_ASSIGN_OR_RETURN(sources.eval, data::BlendedSampler::Create(std::move(eval), weights));
  }
  return sources;
}

// A held-out corpus of its own (data.eval, or data.also_eval[i].corpus at `path`): its rows,
// made as the training rows are.
absl::StatusOr<std::unique_ptr<data::RowSampler>> HeldOutCorpusSampler(
    const config::JobConfig& job, const models::LlamaConfig& arch,
    const config::HeldOutCorpus& corpus, const std::string& path, std::string& fingerprint) {
  KELVIN_ASSIGN_OR_RETURN(data::TokenCorpus opened, OpenCorpus(corpus, arch.vocab_size, path));
  fingerprint = CorpusFingerprint(opened);
  absl::StatusOr<std::unique_ptr<data::RowSampler>> sampler =
      RowSamplerOf(std::make_shared<const data::TokenCorpus>(std::move(opened)),
                   SamplerOptionsOf(job, arch, job.training().seed() + kEvalSeedOffset),
                   job.data().packing(), "held-out corpus " + path);
  if (!sampler.ok()) return InField(path, sampler.status());
  return sampler;
}

// data.also_eval's sets.
absl::Status AddFurtherHeldOutSets(const config::JobConfig& job, const models::LlamaConfig& arch,
                                   DataSources& sources) {
  for (int i = 0; i < job.data().also_eval_size(); ++i) {
    const config::NamedHeldOutCorpus& also = job.data().also_eval(i);
    NamedEvalSource named{also.name(), nullptr, ""};
    KELVIN_ASSIGN_OR_RETURN(
        named.source,
        HeldOutCorpusSampler(job, arch, also.corpus(),
                             absl::StrCat("data.also_eval[", i, "].corpus"), named.corpus));
    sources.also_eval.push_back(std::move(named));
  }
  return absl::OkStatus();
}

// The files of the corpus `source` (a DataConfig, BlendedCorpus or HeldOutCorpus) at `field`.
template <typename Source>
absl::Status CheckCorpusFiles(const Source& source, const std::string& field) {
  std::vector<std::pair<std::string, std::string>> files;  // (field, path)
  if (source.has_megatron()) {
    for (const auto& [what, prefix] :
         {std::pair{".megatron.path_prefix", source.megatron().path_prefix()},
          std::pair{".megatron.loss_mask_path_prefix",
                    source.megatron().loss_mask_path_prefix()}}) {
      if (prefix.empty()) continue;
      files.emplace_back(field + what, prefix + ".bin");
      files.emplace_back(field + what, prefix + ".idx");
    }
  } else if (source.has_token_file()) {
    files.emplace_back(field + ".token_file.path", source.token_file().path());
  }
  for (const auto& [where, path] : files) {
    const absl::StatusOr<io::RegularFile> opened = io::OpenRegularFile(path);
    if (!opened.ok()) return InField(where, opened.status());
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status CheckDataFilesExist(const config::JobConfig& job) {
  const config::DataConfig& data = job.data();
  KELVIN_RETURN_IF_ERROR(CheckCorpusFiles(data, "data"));
  for (int i = 0; i < data.blend().corpora_size(); ++i) {
    KELVIN_RETURN_IF_ERROR(
        CheckCorpusFiles(data.blend().corpora(i), absl::StrCat("data.blend.corpora[", i, "]")));
  }
  if (data.has_eval()) KELVIN_RETURN_IF_ERROR(CheckCorpusFiles(data.eval(), "data.eval"));
  for (int i = 0; i < data.also_eval_size(); ++i) {
    KELVIN_RETURN_IF_ERROR(CheckCorpusFiles(data.also_eval(i).corpus(),
                                            absl::StrCat("data.also_eval[", i, "].corpus")));
  }
  return absl::OkStatus();
}

absl::StatusOr<DataSources> BuildDataSources(const config::JobConfig& job,
                                             const models::LlamaConfig& arch) {
  const config::DataConfig& data = job.data();
  if (data.has_passkey()) {
    KELVIN_ASSIGN_OR_RETURN(DataSources sources, PasskeySources(job, arch));
    KELVIN_RETURN_IF_ERROR(AddFurtherHeldOutSets(job, arch, sources));
    return sources;
  }
  if (data.packing() == config::DataConfig::DOCUMENTS && !data.document_masking()) {
    KLOG_RANK0(WARNING) << "data.packing=DOCUMENTS without data.document_masking: the samples "
                           "packed in a row attend to the ones before them; set "
                           "data.document_masking=true unless that is meant";
  }
  DataSources sources;
  if (data.has_blend()) {
    KELVIN_ASSIGN_OR_RETURN(sources, BlendSources(job, arch));
  } else {
    KELVIN_ASSIGN_OR_RETURN(data::TokenCorpus corpus, OpenCorpus(data, arch.vocab_size, "data"));
    KELVIN_ASSIGN_OR_RETURN(CorpusSamplers samplers,
                            SamplersOf(std::move(corpus), job, arch, job.training().seed()));
    LogEpochs(job, *samplers.train, 1.0, "");
    sources.train = std::move(samplers.train);
    sources.eval = std::move(samplers.eval);
    sources.corpora.push_back(std::move(samplers.fingerprint));
  }
  if (data.has_eval()) {
    KELVIN_ASSIGN_OR_RETURN(sources.eval, HeldOutCorpusSampler(job, arch, data.eval(), "data.eval",
                                                               sources.eval_corpus));
  }
  KELVIN_RETURN_IF_ERROR(AddFurtherHeldOutSets(job, arch, sources));
  return sources;
}

}  // namespace kelvin::training
