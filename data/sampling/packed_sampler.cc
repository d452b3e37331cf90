// PackedSampler: whole documents packed into rows by best-fit decreasing (see packed_sampler.h).
#include "data/sampling/packed_sampler.h"

#include <algorithm>
#include <map>
#include <numeric>
#include <string>
#include <tuple>
#include <utility>

#include "absl/strings/str_format.h"
#include "core/check.h"
#include "core/ops/cross_entropy.h"

namespace kelvin::data {

absl::StatusOr<std::unique_ptr<PackedSampler>> PackedSampler::Create(
    std::shared_ptr<const TokenCorpus> corpus, const SamplerOptions& options) {
  KELVIN_CHECK(corpus != nullptr);
  KELVIN_ASSIGN_OR_RETURN(const SamplerOptions resolved, ResolveSamplerOptions(*corpus, options));
  const int64_t t_len = resolved.sequence_length;

  // The documents of the stretch (clipped to it), cut to T tokens.
  std::vector<Piece> pieces;  // [P]
  if (resolved.stream_end > resolved.stream_begin) {
    for (int64_t d = corpus->DocumentAt(resolved.stream_begin);
         d < corpus->num_documents() && corpus->document_start(d) < resolved.stream_end; ++d) {
      const int64_t begin = std::max(corpus->document_start(d), resolved.stream_begin);
      const int64_t end = std::min(corpus->document_start(d + 1), resolved.stream_end);
      if (end - begin < 2) continue;  // no label to train on
      const int64_t kept_end = std::min(end, begin + t_len);
      pieces.push_back({d, begin, kept_end, std::min(end, kept_end + 1)});
    }
  }
  if (pieces.empty()) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "token corpus '%s' (tokens [%d, %d)) has no document of 2 or more tokens to pack into "
        "rows",
        corpus->path(), resolved.stream_begin, resolved.stream_end));
  }

  // Best-fit decreasing: longest first (ties in stream order), each into the row with the least
  // room that still fits it, else a new row.
  std::vector<int64_t> order(pieces.size());  // [P]: piece indices, longest first
  std::iota(order.begin(), order.end(), 0);
  const auto length = [&](int64_t i) { return pieces[i].end - pieces[i].begin; };
  std::stable_sort(order.begin(), order.end(),
                   [&](int64_t a, int64_t b) { return length(a) > length(b); });
  std::vector<std::vector<int64_t>> rows;  // [R][pieces of the row]
  std::multimap<int64_t, int64_t> room;    // tokens left -> row, for rows with any left
  for (const int64_t i : order) {
    const auto fits = room.lower_bound(length(i));
    int64_t left = t_len, row = static_cast<int64_t>(rows.size());  // a new row, unless one fits
    if (fits == room.end()) {
      rows.emplace_back();
    } else {
      std::tie(left, row) = *fits;
      room.erase(fits);
    }
    rows[row].push_back(i);
    if (left - length(i) > 0) room.emplace(left - length(i), row);
  }

  std::vector<Piece> packed;              // [P], row by row, each in stream order
  std::vector<int64_t> row_starts = {0};  // [R + 1]
  for (std::vector<int64_t>& row : rows) {
    std::sort(row.begin(), row.end());
    for (const int64_t i : row) packed.push_back(pieces[i]);
    row_starts.push_back(static_cast<int64_t>(packed.size()));
  }
  auto sampler = std::unique_ptr<PackedSampler>(
      new PackedSampler(std::move(corpus), resolved, std::move(packed), std::move(row_starts)));
  KELVIN_RETURN_IF_ERROR(sampler->CountTruncated());
  return sampler;
}

absl::Status PackedSampler::CountTruncated() {
  for (const Piece& piece : pieces_) {
    if (piece.label_end == piece.end) continue;  // the whole document
    ++truncated_documents_;
    if (!corpus_->has_loss_mask()) continue;
    std::vector<uint8_t> targets(piece.label_end - piece.begin - 1);  // what its labels predict
    KELVIN_RETURN_IF_ERROR(corpus_->ReadLossMask(piece.begin + 1, targets));
    if (std::find(targets.begin(), targets.end(), 1) == targets.end()) {
      ++truncated_without_targets_;
    }
  }
  return absl::OkStatus();
}

PackedSampler::PackedSampler(std::shared_ptr<const TokenCorpus> corpus,
                             const SamplerOptions& options, std::vector<Piece> pieces,
                             std::vector<int64_t> row_starts)
    : RowSampler(options, static_cast<int64_t>(row_starts.size()) - 1),
      corpus_(std::move(corpus)),
      pieces_(std::move(pieces)),
      row_starts_(std::move(row_starts)) {
  for (const Piece& piece : pieces_) packed_tokens_ += piece.end - piece.begin;
}

absl::Status PackedSampler::ReadRow(int64_t row, Batch& batch, int64_t b) const {
  KELVIN_CHECK(row >= 0 && row < num_rows()) << "row " << row << " of " << num_rows();
  const int64_t t_len = options().sequence_length;
  int32_t* tokens = batch.tokens.data<int32_t>() + b * t_len;        // [T]
  int32_t* labels = batch.labels.data<int32_t>() + b * t_len;        // [T]
  int32_t* positions = batch.positions.data<int32_t>() + b * t_len;  // [T]
  std::vector<DocumentSpan>& spans = batch.documents[b];
  batch.sources[b] = row;
  int64_t used = 0;  // row tokens filled so far
  for (int64_t p = row_starts_[row]; p < row_starts_[row + 1]; ++p) {
    const Piece& piece = pieces_[p];
    const int64_t count = piece.end - piece.begin;
    const int64_t labelled = piece.label_end - piece.begin - 1;  // count - 1, or count when cut
    std::vector<int64_t> stored(piece.label_end - piece.begin);  // [labelled + 1]
    corpus_->Read(piece.begin, stored);
    KELVIN_RETURN_IF_ERROR(corpus_->CheckVocab(piece.begin, stored, options().vocab_size));
    for (int64_t t = 0; t < count; ++t) {
      tokens[used + t] = static_cast<int32_t>(stored[t]);
      labels[used + t] = t < labelled ? static_cast<int32_t>(stored[t + 1]) : ops::kIgnoreIndex;
    }
    KELVIN_RETURN_IF_ERROR(IgnoreNonTargets(*corpus_, piece.begin + 1,
                                            {labels + used, static_cast<size_t>(labelled)}));
    spans.push_back({piece.document, used, used + count});
    used += count;
  }
  if (used < t_len) spans.push_back({kPaddingDocument, used, t_len});
  for (const DocumentSpan& span : spans) {
    for (int64_t t = span.begin; t < span.end; ++t) {
      if (span.document == kPaddingDocument) {
        tokens[t] = 0;
        labels[t] = ops::kIgnoreIndex;
      }
      positions[t] = static_cast<int32_t>(options().document_masking ? t - span.begin : t);
    }
  }
  return absl::OkStatus();
}

}  // namespace kelvin::data
