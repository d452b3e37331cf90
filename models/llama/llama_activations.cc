// The decoder layer's activation fields and the shared scratch's.
#include "models/llama/llama_activations.h"

namespace kelvin::models {

const std::vector<LlamaActivationField>& LlamaActivationFields() {
  using A = LlamaLayerActivations;
  using D = ActivationDim;
  using R = RecomputedBy;
  using Need = ActivationNeed;
  static const std::vector<LlamaActivationField> fields = {
      {&A::x, {D::kLocalTokens, D::kModel}, false, R::kKept, Need::kAlways},
      {&A::h_attn, {D::kTokens, D::kModel}, false, R::kKept, Need::kAlways},
      {&A::rstd_attn, {D::kLocalTokens}, true, R::kKept, Need::kAlways},
      {&A::u, {D::kTokens, D::kHeads, D::kHeadDim}, false, R::kAttention, Need::kAlways},
      {&A::k, {D::kTokens, D::kKvHeads, D::kHeadDim}, false, R::kAttention, Need::kAlways},
      {&A::v, {D::kTokens, D::kKvHeads, D::kHeadDim}, false, R::kAttention, Need::kAlways},
      {&A::attn, {D::kTokens, D::kHeads, D::kHeadDim}, false, R::kAttention, Need::kAlways},
      {&A::lse, {D::kTokens, D::kHeads}, true, R::kAttention, Need::kAlways},
      {&A::tau_q, {D::kTokens, D::kHeads}, true, R::kAttention, Need::kQueryTemperature},
      {&A::tau_v, {D::kKeyTokens, D::kKvHeads}, true, R::kAttention, Need::kValueTemperature},
      {&A::query_source,
       {D::kTokens, D::kHeads, D::kHeadDim},
       false,
       R::kAttention,
       Need::kQuerySource},
      {&A::value_source,
       {D::kTokens, D::kKvHeads, D::kHeadDim},
       false,
       R::kAttention,
       Need::kValueSource},
      {&A::k_all,
       {D::kKeyTokens, D::kKvHeads, D::kHeadDim},
       false,
       R::kAttention,
       Need::kContextParallel},
      {&A::v_all,
       {D::kKeyTokens, D::kKvHeads, D::kHeadDim},
       false,
       R::kAttention,
       Need::kContextParallel},
      {&A::value_source_all,
       {D::kKeyTokens, D::kKvHeads, D::kHeadDim},
       false,
       R::kAttention,
       Need::kContextValueSource},
      {&A::x_mid, {D::kLocalTokens, D::kModel}, false, R::kKept, Need::kAlways},
      {&A::h_mlp, {D::kTokens, D::kModel}, false, R::kKept, Need::kAlways},
      {&A::rstd_mlp, {D::kLocalTokens}, true, R::kKept, Need::kAlways},
      {&A::gate, {D::kTokens, D::kFfn}, false, R::kMlp, Need::kAlways},
      {&A::up, {D::kTokens, D::kFfn}, false, R::kMlp, Need::kAlways},
      {&A::act, {D::kTokens, D::kFfn}, false, R::kMlp, Need::kAlways},
  };
  return fields;
}

const std::vector<LlamaScratchField>& LlamaScratchFields() {
  using S = LlamaScratch;
  using D = ActivationDim;
  using Need = ActivationNeed;
  const std::vector<D> tokens_by_model = {D::kTokens, D::kModel};
  const std::vector<D> local_by_model = {D::kLocalTokens, D::kModel};
  const std::vector<D> query_heads = {D::kTokens, D::kHeads, D::kHeadDim};
  const std::vector<D> key_heads = {D::kKeyTokens, D::kKvHeads, D::kHeadDim};
  const std::vector<D> local_key_heads = {D::kTokens, D::kKvHeads, D::kHeadDim};
  const std::vector<D> tokens_by_ffn = {D::kTokens, D::kFfn};
  static const std::vector<LlamaScratchField> fields = {
      {.member = &S::proj, .dims = tokens_by_model},
      {.member = &S::local_tokens, .dims = local_by_model, .need = Need::kSequenceParallel},
      {.member = &S::gathered_grad, .dims = tokens_by_model, .need = Need::kSequenceParallel},
      {.member = &S::d_proj, .dims = local_by_model, .need = Need::kSequenceParallel},
      {.member = &S::dh, .dims = tokens_by_model},
      {.member = &S::du, .dims = query_heads},
      {.member = &S::dattn, .dims = query_heads},
      {.member = &S::dk, .dims = key_heads},
      {.member = &S::dv, .dims = key_heads},
      {.member = &S::dquery_source, .dims = query_heads, .need = Need::kQuerySource},
      {.member = &S::dvalue_source, .dims = key_heads, .need = Need::kValueSource},
      {.member = &S::dk_local, .dims = local_key_heads, .need = Need::kContextParallel},
      {.member = &S::dv_local, .dims = local_key_heads, .need = Need::kContextParallel},
      {.member = &S::dvalue_source_local,
       .dims = local_key_heads,
       .need = Need::kContextValueSource},
      {.member = &S::cp_reorder, .dims = key_heads, .need = Need::kContextParallel, .flat = true},
      {.member = &S::dgate, .dims = tokens_by_ffn},
      {.member = &S::dup, .dims = tokens_by_ffn},
      {.member = &S::dact, .dims = tokens_by_ffn},
  };
  return fields;
}

bool ActivationNeeded(ActivationNeed need, const ssa::SsaOptions& attention,
                      const TokenSplits& splits) {
  // The temperatures read W_tmp x of their own only without weight sharing (and token-aware).
  const bool own_sources = !attention.weight_sharing && attention.token_aware;
  switch (need) {
    case ActivationNeed::kAlways:
      return true;
    case ActivationNeed::kQueryTemperature:
      return attention.query_temperature;
    case ActivationNeed::kValueTemperature:
      return attention.value_temperature;
    case ActivationNeed::kQuerySource:
      return own_sources && attention.query_temperature;
    case ActivationNeed::kValueSource:
      return own_sources && attention.value_temperature;
    case ActivationNeed::kContextParallel:
      return splits.context_parallel;
    case ActivationNeed::kContextValueSource:
      return splits.context_parallel && own_sources && attention.value_temperature;
    case ActivationNeed::kSequenceParallel:
      return splits.sequence_parallel;
  }
  return false;
}

bool Recomputed(const LlamaActivationField& field, const LlamaRecompute& recompute) {
  return (field.recomputed_by == RecomputedBy::kAttention && recompute.attention) ||
         (field.recomputed_by == RecomputedBy::kMlp && recompute.mlp);
}

}  // namespace kelvin::models
