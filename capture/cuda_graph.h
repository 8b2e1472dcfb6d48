// The CUDA side of capture: stream capture on encore's stream, instantiate,
// upload, and replay as one cudaGraphLaunch. No CUDA types in this header, so
// capture.cpp includes it in every build; without CUDA, begin() refuses.
//
//   ENCORE_RETURN_IF_ERROR(CudaGraph::begin(dev));            // cudaStreamBeginCapture (thread-local mode)
//   absl::Status run = status_of([&] { step(); });              // kernels go into the graph, not to the GPU
//       // ... and the capture observer calls CudaGraph::mark_launch() before each encore launch
//   absl::StatusOr<std::unique_ptr<CudaGraph>> g = CudaGraph::end(dev, run);   // always ends capture
//   ENCORE_RETURN_IF_ERROR((*g)->replay());                     // one cudaGraphLaunch, asynchronous
//
// NOTE [ CUDA graph nodes and encore launches ]: one encore launch can add
// several graph nodes (cuBLAS may launch more than one kernel, or a memset).
// To map each node back to its launch (op and phase, for profilers),
// mark_launch() records the capturing stream's current leaf nodes
// (cudaStreamGetCaptureInfo: O(1), typically one handle) before every launch,
// and end() once more after the last. A node belongs to launch k when it is
// an ancestor of (or one of) the leaves marked after launch k but not of
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
  int64_t launch = -1;      // index of the encore launch (Graph::node_op(launch)); -1 if unknown
  Kind kind = Kind::kOther;
};

class CudaGraph {
 public:
  // Begins capturing encore's stream of `device` after waiting for the work
  // already queued on it (the warm-up's). With `programmatic_launch` (and a
  // GPU of compute capability >= 9.0) encore's kernels are captured with
  // programmatic edges (NOTE [ Programmatic dependent launch ] in
  // src/backends/cuda/launch.h) until end().
  [[nodiscard]] static absl::Status begin(Device device, bool programmatic_launch = false);
  // Records where the previous encore launch ended in the graph being
  // captured on this thread (NOTE [ CUDA graph nodes and encore launches ]).
  // Call before each launch of the captured step; a no-op when this thread
  // is not capturing. Never throws: if the query fails, launch_nodes() says so.
  static void mark_launch();
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
