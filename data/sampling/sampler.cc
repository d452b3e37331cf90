// CorpusSampler: shuffled GPT-style rows of a TokenCorpus (see sampler.h).
#include "data/sampling/sampler.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <utility>

#include "absl/strings/str_format.h"
#include "core/check.h"
#include "core/ops/cross_entropy.h"

namespace kelvin::data {

absl::StatusOr<std::unique_ptr<CorpusSampler>> CorpusSampler::Create(
    std::shared_ptr<const TokenCorpus> corpus, const SamplerOptions& options) {
  KELVIN_CHECK(corpus != nullptr);
  KELVIN_ASSIGN_OR_RETURN(const SamplerOptions resolved, ResolveSamplerOptions(*corpus, options));
  const int64_t tokens = resolved.stream_end - resolved.stream_begin;
  if (tokens < options.sequence_length + 1) {
    const std::string part = tokens == corpus->num_tokens()
                                 ? std::string("")
                                 : absl::StrFormat(" (tokens [%d, %d) of it)",
                                                   resolved.stream_begin, resolved.stream_end);
    return absl::InvalidArgumentError(absl::StrFormat(
        "token corpus '%s'%s has %d tokens, too few for one row of sequence length %d (+1 for the "
        "last label): use a shorter sequence length or a larger corpus",
        corpus->path(), part, tokens, options.sequence_length));
  }
  return std::unique_ptr<CorpusSampler>(new CorpusSampler(std::move(corpus), resolved));
}

CorpusSampler::CorpusSampler(std::shared_ptr<const TokenCorpus> corpus,
                             const SamplerOptions& options)
    : RowSampler(options,
                 (options.stream_end - options.stream_begin - 1) / options.sequence_length),
      corpus_(std::move(corpus)) {}

int64_t HeldOutStart(const TokenCorpus& corpus, double eval_fraction, bool whole_documents) {
  const int64_t n = corpus.num_tokens();
  const auto held_out = static_cast<int64_t>(std::ceil(eval_fraction * static_cast<double>(n)));
  const int64_t target = n - std::min(held_out, n);
  if (target == n || target == 0) return target;
  const int64_t document = corpus.DocumentAt(target);
  if (corpus.document_start(document) == target) return target;
  const int64_t next = corpus.document_start(document + 1);
  if (n - next >= (n - target + 1) / 2) return next;
  return whole_documents ? corpus.document_start(document) : target;
}

absl::Status CorpusSampler::ReadRow(int64_t row, Batch& batch, int64_t b) const {
  KELVIN_CHECK(row >= 0 && row < num_rows()) << "row " << row << " of " << num_rows();
  const int64_t t_len = options().sequence_length;
  const int64_t begin = options().stream_begin + row * t_len;  // stream offset of input 0
  std::vector<int64_t> stored(t_len + 1);                      // [T + 1]
  corpus_->Read(begin, stored);
  KELVIN_RETURN_IF_ERROR(corpus_->CheckVocab(begin, stored, options().vocab_size));
  const std::vector<int32_t> row_tokens(stored.begin(), stored.end());  // [T + 1], all < 2^31
  FillRow(batch, b, row_tokens);
  batch.sources[b] = row;
  int32_t* labels = batch.labels.data<int32_t>() + b * t_len;  // [T]
  KELVIN_RETURN_IF_ERROR(
      IgnoreNonTargets(*corpus_, begin + 1, {labels, static_cast<size_t>(t_len)}));

  // Documents with tokens among the inputs [begin, begin + T).
  std::vector<DocumentSpan>& spans = batch.documents[b];
  for (int64_t d = corpus_->DocumentAt(begin);
       d < corpus_->num_documents() && corpus_->document_start(d) < begin + t_len; ++d) {
    const int64_t span_begin = std::max(corpus_->document_start(d), begin) - begin;
    const int64_t span_end = std::min(corpus_->document_start(d + 1), begin + t_len) - begin;
    if (span_end > span_begin) spans.push_back({d, span_begin, span_end});
  }
  if (!options().document_masking) return absl::OkStatus();

  int32_t* positions = batch.positions.data<int32_t>() + b * t_len;  // [T]
  for (const DocumentSpan& span : spans) {
    for (int64_t t = span.begin; t < span.end; ++t) {
      positions[t] = static_cast<int32_t>(t - span.begin);
    }
    // The label of the span's last input is the next document's first token, unless the
    // document goes on past the row.
    const bool document_ends = corpus_->document_start(span.document + 1) <= begin + span.end;
    if (document_ends) labels[span.end - 1] = ops::kIgnoreIndex;
  }
  return absl::OkStatus();
}

}  // namespace kelvin::data
