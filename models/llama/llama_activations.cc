// The decoder layer's activation fields.
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

bool ActivationNeeded(const LlamaActivationField& field, const ssa::SsaOptions& attention,
                      bool context_parallel) {
  // The temperatures read W_tmp x of their own only without weight sharing (and token-aware).
  const bool own_sources = !attention.weight_sharing && attention.token_aware;
  switch (field.need) {
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
      return context_parallel;
    case ActivationNeed::kContextValueSource:
      return context_parallel && own_sources && attention.value_temperature;
  }
  return false;
}

bool Recomputed(const LlamaActivationField& field, const LlamaRecompute& recompute) {
  return (field.recomputed_by == RecomputedBy::kAttention && recompute.attention) ||
         (field.recomputed_by == RecomputedBy::kMlp && recompute.mlp);
}

}  // namespace kelvin::models
