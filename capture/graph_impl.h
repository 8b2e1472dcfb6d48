// What a Graph holds: the recorded warm-up, the arena plan, the executable
// that replays it, and the persistent storages it touches. encore's profiler
// (profile/), tools and tests read a graph through this header, by the one
// accessor Graph::internals(); user code needs only include/encore/capture.h.
//
//   const encore::Graph::Impl& g = graph.internals();
//   for (size_t i = 0; i < g.trace.kernels.size(); ++i) use(g.node_op(i), g.node_phase(i));
//   std::vector<int64_t> stamps;
//   absl::Status s = graph.internals().replay_timed(stamps);   // CPU: per-node wall times
//   const encore::capture_internal::CudaGraph* cuda = g.cuda_graph();   // nullptr on CPU
//
// Node i is the i-th launch of the captured step (the i-th kernel of the
// recorded warm-up: the capture run matched it launch by launch). On CUDA
// one launch may be several CUDA graph nodes (capture/cuda_graph.h).
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "capture/executable.h"
#include "capture/trace.h"
#include "encore/capture.h"

namespace encore {
namespace capture_internal {

// A persistent storage the captured step touches: kept alive by the graph
// and checked at each replay (a use count of 1 means only the graph holds it:
// the tensor was freed or replaced since capture).
struct Guard {
  Ref<Storage> storage;
  const char* first_op;   // the first launch that touched it, for messages
};

}  // namespace capture_internal

// Members in destruction order, last first: the executable and the outputs
// (views into the arena, which they keep alive: NOTE [ Outputs keep the
// arena ] in capture/capture.cpp) go before the arena.
struct Graph::Impl {
  Device device;                                         // where the step runs
  Ref<Storage> arena;                                    // owns the arena memory (from the caching allocator)
  std::unique_ptr<capture_internal::Executable> executable;
  std::vector<capture_internal::Guard> guards;           // every persistent storage the step touches, once
  std::vector<Tensor> outputs;                           // what the step returned: views into the arena or
                                                         // persistent tensors
  std::vector<planner::Buffer> buffers;                  // the recorded temporaries, lifetimes in launches
  std::vector<int64_t> offsets;                          // bytes into the arena of each of buffers
  capture_internal::Trace trace;                         // the recorded warm-up
  CaptureStats stats;
  bool replayed = false;                                 // a replay ran: the outputs hold its values

  // FailedPrecondition naming the first guard whose tensor was freed or replaced.
  [[nodiscard]] absl::Status check_guards() const;
  // Executable::replay_timed after check_guards().
  [[nodiscard]] absl::Status replay_timed(std::vector<int64_t>& stamps);
  // The CUDA graph of a step captured on a GPU (owned by the executable); nullptr on CPU.
  const capture_internal::CudaGraph* cuda_graph() const { return executable->cuda_graph(); }

  // ---- node i (0 <= i < stats.kernels) ----
  const char* node_op(size_t i) const;      // static string, e.g. "gemm"
  // "forward", "backward" (inside backward()) or "optimizer" (inside
  // Optimizer::step(), zero_grad(), clip_grad_norm()).
  const char* node_phase(size_t i) const;
  // Bytes of each storage node i reads / writes (whole storages, not views).
  const std::vector<int64_t>& node_read_bytes(size_t i) const;
  const std::vector<int64_t>& node_write_bytes(size_t i) const;
  // The temporaries (indices into buffers) node i reads or writes, sorted, once each.
  std::vector<int32_t> node_temporaries(size_t i) const;
};

}  // namespace encore
