// What the pipeline runner drives on one rank: its model chunks' steps per micro-batch (each in an
// activation slot of its own) and the buffers the stages exchange.
#pragma once

#include "core/context.h"
#include "core/tensor.h"

namespace kelvin::parallel {

// A micro-batch's input: its tokens and position ids [B, T] i32 (host or device).
struct MicroBatchInput {
  Tensor tokens, positions;
};

class PipelineStage {
 public:
  virtual ~PipelineStage() = default;

  virtual int PipelineChunks() const = 0;         // the model chunks this rank holds
  virtual bool StartsModel(int chunk) const = 0;  // chunk is the model's first (virtual stage 0)
  virtual bool EndsModel(int chunk) const = 0;    // chunk is the model's last (it has the head)

  // Takes a free activation slot for `micro_batch` (any id >= 0 unique among those in flight).
  virtual void BeginMicroBatch(int micro_batch, const Tensor& tokens, const Tensor& positions) = 0;
  virtual bool HoldsMicroBatch(int micro_batch) const = 0;
  virtual void EndMicroBatch(int micro_batch) = 0;  // gives the slot back
  // The chunk's forward: its output to send on, or on the model's last chunk the logits (which the
  // loss may overwrite in place with dlogits for the backward).
  virtual Tensor& ForwardChunk(const Context& ctx, int micro_batch, int chunk) = 0;
  virtual void BackwardChunk(const Context& ctx, int micro_batch, int chunk) = 0;
  virtual Tensor& ChunkInput(int micro_batch, int chunk) = 0;     // where its input arrives
  virtual Tensor& ChunkOutput(int micro_batch, int chunk) = 0;    // what its forward sends on
  virtual Tensor& ChunkGradient(int micro_batch, int chunk) = 0;  // its output's, then input's
};

}  // namespace kelvin::parallel
