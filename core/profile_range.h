// ProfileRange: a named range on the timeline of NVIDIA's profilers (an NVTX range: Nsight Systems
// shows a run's steps, micro-batches, layers and optimizer phases above the kernels they launch).
// A no-op in a CPU-only build, and a few nanoseconds when no profiler is attached. The capture
// window of `nsys profile --capture-range=cudaProfilerApi` opens and closes with
// StartProfilerCapture / StopProfilerCapture (no-ops without CUDA).
#pragma once

#include <string>

namespace kelvin {

class ProfileRange {
 public:
  explicit ProfileRange(const std::string& name);  // pushed on this thread
  ~ProfileRange();                                 // popped
  ProfileRange(const ProfileRange&) = delete;
  ProfileRange& operator=(const ProfileRange&) = delete;
};

void StartProfilerCapture();
void StopProfilerCapture();

}  // namespace kelvin
