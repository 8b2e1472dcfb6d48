// The CUDA side of capture: stream capture on encore's stream, instantiate,
// upload, and replay as one cudaGraphLaunch. No CUDA types in this header, so
// capture.cpp includes it in every build; without CUDA, begin() refuses.
//
//   ENCORE_RETURN_IF_ERROR(CudaGraph::begin(dev));            // cudaStreamBeginCapture (thread-local mode)
//   absl::Status run = status_of([&] { step(); });              // kernels go into the graph, not to the GPU
//   absl::StatusOr<std::unique_ptr<CudaGraph>> g = CudaGraph::end(dev, run);   // always ends capture
//   ENCORE_RETURN_IF_ERROR((*g)->replay());                     // one cudaGraphLaunch, asynchronous
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "encore/device.h"

namespace encore::capture_internal {

class CudaGraph {
 public:
  // Begins capturing encore's stream of `device` after waiting for the work
  // already queued on it (the warm-up's).
  [[nodiscard]] static absl::Status begin(Device device);
  // Ends the capture begun by begin(). When `run` (what the captured step
  // returned) failed, or capture broke (a synchronize, a legacy-stream call),
  // the partial graph is dropped, the stream is left usable, and the error is
  // returned. Otherwise the graph is instantiated and uploaded.
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<CudaGraph>> end(Device device, absl::Status run);

  ~CudaGraph();
  CudaGraph(const CudaGraph&) = delete;
  CudaGraph& operator=(const CudaGraph&) = delete;

  // Enqueues one replay on encore's stream and returns (asynchronous).
  [[nodiscard]] absl::Status replay() const;
  // cudaGraphDebugDotPrint of the captured graph (kernel names and params).
  [[nodiscard]] absl::Status dump_dot(const std::string& path) const;
  int64_t num_nodes() const { return nodes_; }

 private:
  CudaGraph() = default;
  Device device_;
  void* graph_ = nullptr;   // cudaGraph_t, owned
  void* exec_ = nullptr;    // cudaGraphExec_t, owned
  int64_t nodes_ = 0;
};

}  // namespace encore::capture_internal
