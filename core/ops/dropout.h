// Dropout with counter-based masks: element (n, f) of x [N, F] is dropped when a hash of its
// token's key, the call's site and its feature's index falls below p, else scaled by 1 / (1 - p).
// The mask depends on what an element is, not on where or in which order it is computed: every
// layout draws the same one, and a recompute or the backward draws it again. CPU: f32, f64. CUDA:
// f32, bf16 (the product in f32, rounded once).
#pragma once

#include <cstdint>

#include "core/bf16.h"  // KELVIN_HOST_DEVICE
#include "core/context.h"
#include "core/tensor.h"

namespace kelvin::ops {

// SplitMix64's finaliser (Steele, Lea and Flood, 2014): a bijective mix of 64 bits.
KELVIN_HOST_DEVICE inline uint64_t Mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

// A token's key: the seed, the token's sample (its row's index in the training data) and its
// position in the row.
KELVIN_HOST_DEVICE inline uint64_t DropoutTokenKey(uint64_t seed, int64_t sample,
                                                   int64_t position) {
  return Mix64(Mix64(Mix64(seed) ^ static_cast<uint64_t>(sample)) ^
               static_cast<uint64_t>(position));
}

// The drop threshold of probability p in [0, 1): an element whose hash's top 53 bits, u in
// [0, 2^53), are below it is dropped (u / 2^53 < p).
uint64_t DropoutThreshold(double p);

// Whether element (token key, site, feature) is kept under `threshold` (DropoutThreshold).
KELVIN_HOST_DEVICE inline bool DropoutKeeps(uint64_t token_key, uint64_t site, int64_t feature,
                                            uint64_t threshold) {
  const uint64_t hash = Mix64(token_key ^ Mix64(Mix64(site) ^ static_cast<uint64_t>(feature)));
  return (hash >> 11) >= threshold;
}

// y [N, F] = x [N, F] with element (n, f) kept as x / (1 - p) where DropoutKeeps(token_keys[n],
// site, feature_begin + f, DropoutThreshold(p)), else 0. token_keys [N] i64 (DropoutTokenKey), p
// in [0, 1). y may be x. The backward is the same call on the output's gradient.
void HashedDropout(const Context& ctx, const Tensor& x, const Tensor& token_keys, uint64_t site,
                   int64_t feature_begin, double p, Tensor& y);

// Backends behind the dispatcher above (arguments already checked; `scale` = 1 / (1 - p)).
namespace cpu {
void HashedDropout(const Tensor& x, const Tensor& token_keys, uint64_t site, int64_t feature_begin,
                   uint64_t threshold, double scale, Tensor& y);
}  // namespace cpu
namespace cuda {
void HashedDropout(const Context& ctx, const Tensor& x, const Tensor& token_keys, uint64_t site,
                   int64_t feature_begin, uint64_t threshold, double scale, Tensor& y);
}  // namespace cuda

}  // namespace kelvin::ops
