// The CUDA side of capture: the CUDA Capturer and Executable
// (capture/executable.h) and the CudaGraph they share. The capturer runs the
// capture run under stream capture on encore's stream, then instantiates and
// uploads the graph; replay is one cudaGraphLaunch. No CUDA types in this
// header, so every build compiles it; without CUDA the capturer refuses.
//
//   std::unique_ptr<Capturer> c = make_cuda_capturer(dev, /*programmatic_launch=*/false);
//   absl::StatusOr<std::unique_ptr<Executable>> exe = c->capture([&] { step(); });
//       // cudaStreamBeginCapture (thread-local mode), the step's kernels go into the
//       // graph, not to the GPU; c->take(launch) marks each encore launch; end capture
//   ReplayResult r = (*exe)->replay();                   // one cudaGraphLaunch, asynchronous
//   const CudaGraph* g = (*exe)->cuda_graph();            // for profilers and tools
//
// NOTE [ CUDA graph nodes and encore launches ]: one encore launch can add
// several graph nodes (cuBLAS may launch more than one kernel, or a memset).
// To map each node back to its launch (op and phase, for profilers), the
// capturer records the capturing stream's current leaf nodes
// (cudaStreamGetCaptureInfo: O(1), typically one handle) before every launch
// (take()), and once more after the last. A node belongs to launch k when it
// is an ancestor of (or one of) the leaves marked after launch k but not of
// those marked before it. launch_nodes() walks the graph once, back from each
// mark, stopping at nodes already assigned: O(nodes + edges), and only when a
// profiler asks, so capture pays only for the marks.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "encore/device.h"

namespace encore::capture_internal {

// A node of a captured CUDA graph and the encore launch that added it.
struct CudaGraphNode {
  enum class Kind { kKernel, kMemset, kMemcpy, kOther };   // kOther: empty, event, host, ... nodes
  void* handle = nullptr;   // cudaGraphNode_t in the captured graph (owned by it)
  int64_t launch = -1;      // index of the encore launch (Graph::Impl::node_op(launch)); -1 if unknown
  Kind kind = Kind::kOther;
};

// A captured, instantiated and uploaded CUDA graph; made only by the CUDA
// capturer (capture/cuda_graph.cpp).
class CudaGraph {
 public:
  ~CudaGraph();
  CudaGraph(const CudaGraph&) = delete;
  CudaGraph& operator=(const CudaGraph&) = delete;

  // Enqueues one replay on encore's stream and returns (asynchronous).
  [[nodiscard]] absl::Status replay() const;
  // cudaGraphDebugDotPrint of the captured graph (kernel names and params).
  [[nodiscard]] absl::Status dump_dot(const std::string& path) const;
  int64_t num_nodes() const { return nodes_; }
  Device device() const { return device_; }
  // The captured graph (cudaGraph_t, owned by this object), e.g. to
  // instantiate a profiling copy of it.
  void* graph_handle() const { return graph_; }

  // Every node of the graph with the launch that added it, in launch order
  // (each launch's nodes in dependency order); nodes no mark reaches come
  // last with launch -1. Walks the graph on each call (O(nodes + edges)).
  // FailedPrecondition when the launch marks were lost during capture.
  [[nodiscard]] absl::StatusOr<std::vector<CudaGraphNode>> launch_nodes() const;
  // Marks taken: the captured step's launches + 1 (0 without CUDA).
  int64_t num_marks() const { return static_cast<int64_t>(mark_ends_.size()); }

  // The cost of retargeting one kernel node of the instantiated graph at
  // another buffer: finds the first kernel node with a parameter equal to
  // `from` (a device pointer the step reads or writes) and times
  // cudaGraphExecKernelNodeSetParams switching that parameter to `to` and
  // back, `reps` times each way. Returns the median ns of one call; the
  // instantiated graph ends with its original parameters. Synchronizes the
  // stream first. NotFound when no kernel parameter holds `from`.
  [[nodiscard]] absl::StatusOr<int64_t> update_pointer_ns(const void* from, const void* to, int reps) const;

 private:
  friend class CudaCapturer;
  CudaGraph() = default;
  Device device_;
  void* graph_ = nullptr;   // cudaGraph_t, owned
  void* exec_ = nullptr;    // cudaGraphExec_t, owned
  int64_t nodes_ = 0;
  // Leaf nodes marked before each launch and after the last, back to back:
  // mark m is marks_[mark_ends_[m - 1] .. mark_ends_[m]) (mark_ends_[-1] = 0).
  std::vector<void*> marks_;
  std::vector<int64_t> mark_ends_;
  bool marks_lost_ = false;
};

}  // namespace encore::capture_internal
