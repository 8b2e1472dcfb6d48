// CUDA timing behind encore/profile.h: per-node times of CUDA graph replays
// from CUPTI activity records, and per-launch times of eager CUDA steps from
// events. No CUDA or CUPTI types here, so profile.cpp includes it in every
// build; without CUDA the functions return Unimplemented.
//
//   absl::StatusOr<CudaReplayTimes> t = time_cuda_replays(cuda_graph, /*runs=*/20);
//   for (const NodeActivity& a : t->runs[0]) use(t->nodes[a.node].launch, a.end_ns - a.start_ns);
//
// NOTE [ Profiling a CUDA graph with CUPTI ]: kernel, memset and memcpy
// activity records of a graph launch carry the id of the graph node that ran
// them, but of the node in the INSTANTIATED graph, a clone of the captured
// node with an id of its own. CUPTI reports each clone (the resource callback
// GRAPHNODE_CLONED, with the original node) only while a subscriber listens
// during cudaGraphInstantiate. So time_cuda_replays() enables the activity
// kinds, subscribes, instantiates a profiling copy of the captured graph
// (same nodes and parameters: it computes exactly what the graph computes),
// and replays that copy; the clone map turns record ids into captured nodes,
// and CudaGraph::launch_nodes() turns those into encore launches. Records
// that carry the captured node's own id are accepted too.
//
// CUPTI is one per process: this takes the activity buffer callbacks and, for
// the duration of the instantiate, the single callback subscriber. When
// another tool holds CUPTI (Nsight, another profiler), enabling fails and
// the replays are timed by wall clock only (CudaReplayTimes::unavailable
// says why); nothing crashes.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "capture/cuda_graph.h"
#include "encore/device.h"

namespace encore::profile_internal {

using capture_internal::CudaGraph;
using capture_internal::CudaGraphNode;

// One kernel, memset or memcpy of one replay.
struct NodeActivity {
  int64_t node = 0;       // index into CudaReplayTimes::nodes
  int64_t start_ns = 0;   // CUPTI timestamps: ns on one clock for the whole call
  int64_t end_ns = 0;
};

struct CudaReplayTimes {
  std::vector<CudaGraphNode> nodes;              // graph.launch_nodes() (empty if that failed)
  std::vector<std::vector<NodeActivity>> runs;   // per timed run, sorted by start; empty when unavailable
  std::vector<int64_t> wall_ns;                  // per timed run: launch to end of synchronize (steady clock)
  std::string unavailable;                       // why there are no per-node times; empty when there are
  std::string note;                              // a caveat on the per-node times (empty: none)
};

// Replays `graph` `runs` times (>= 1), each launch followed by a
// synchronize, and collects every node's activity per run (NOTE [ Profiling
// a CUDA graph with CUPTI ]). Errors are CUDA errors of the replays
// themselves; CUPTI being unavailable is not an error (see `unavailable`).
// Not thread-safe with other CUPTI users; one call at a time per process.
[[nodiscard]] absl::StatusOr<CudaReplayTimes> time_cuda_replays(const CudaGraph& graph, int runs);

// Times eager launches on a CUDA device's encore stream with a pair of
// events around each. Events are created as needed and reused after reset().
//
//   CudaLaunchTimer timer(Device::cuda(0));
//   timer.before_launch(); launch(); timer.after_launch();   // per launch
//   std::vector<std::pair<int64_t, int64_t>> t;
//   absl::Status s = timer.read(t);   // waits; [start, end) ns of each launch from the first start
class CudaLaunchTimer {
 public:
  explicit CudaLaunchTimer(Device device) : device_(device) {}
  ~CudaLaunchTimer();
  CudaLaunchTimer(const CudaLaunchTimer&) = delete;
  CudaLaunchTimer& operator=(const CudaLaunchTimer&) = delete;

  // Record the events around one launch; throw encore::Error on CUDA errors.
  void before_launch();
  void after_launch();
  // Waits for the stream and returns each timed launch's [start, end) in ns
  // from the first launch's start (event resolution: about 0.5 us).
  [[nodiscard]] absl::Status read(std::vector<std::pair<int64_t, int64_t>>& times) const;
  // Forgets the launches timed so far; keeps the events.
  void reset() { used_ = 0; }
  size_t launches() const { return used_ / 2; }

 private:
  void record();
  Device device_;
  std::vector<void*> events_;   // cudaEvent_t, owned
  size_t used_ = 0;             // events recorded since reset()
};

}  // namespace encore::profile_internal
