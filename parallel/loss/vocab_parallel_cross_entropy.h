// Megatron-style vocab-parallel softmax cross-entropy: each tensor-parallel rank holds the logits
// of its vocabulary slice [vocab_begin, vocab_begin + V) of every token and the full logits are
// never gathered. Per token only three numbers cross the group: the row max, the sum of exp and
// the target's logit (one rank holds it). N tokens, V local vocabulary. CPU: f32, f64.
#pragma once

#include <cstdint>

#include "core/tensor.h"
#include "parallel/comm/communicator.h"

namespace kelvin::parallel {

// logits [N, V] (this rank's vocab slice), targets [N] i32 global ids (ops::kIgnoreIndex = no
// loss) -> loss [N] (AccumDType: -log softmax over the WHOLE vocabulary at the target, 0 where
// ignored; identical on every rank) and, in place, logits <- grad_scale * (softmax - onehot) for
// this slice (0 in ignored rows). A one-rank `tp` holds the whole vocabulary.
void VocabParallelSoftmaxCrossEntropy(Communicator& tp, Tensor& logits, const Tensor& targets,
                                      int64_t vocab_begin, double grad_scale, Tensor& loss);

// Forward only (evaluation): loss [N] as above; logits unchanged.
void VocabParallelCrossEntropyLoss(Communicator& tp, const Tensor& logits, const Tensor& targets,
                                   int64_t vocab_begin, Tensor& loss);

// predictions [N] i32 = the global argmax of every row (the lowest id among ties, as a single
// rank's std::max_element gives).
void VocabParallelArgmax(Communicator& tp, const Tensor& logits, int64_t vocab_begin,
                         Tensor& predictions);

}  // namespace kelvin::parallel
