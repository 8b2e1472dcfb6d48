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
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "capture/executable.h"
#include "capture/held.h"
#include "capture/trace.h"
#include "encore/capture.h"
#include "src/core/step_observer.h"

namespace encore {
namespace capture_internal {

// A persistent storage the captured step touches: kept alive by the graph
// and checked at each replay (held by graphs only: the tensor was freed or
// replaced since capture; NOTE [ Counting the graphs' own references ] in
// capture/held.h).
struct Guard {
  Held<Storage> storage;
  const char* first_op;   // the first launch that touched it, for messages
  uint32_t grad_flags = 0;   // storage->grad_flag_version() after the capture run
};

// NOTE [ Host state as a precondition ]: host state that decides which
// kernels a step issues (autograd's lazy zero_grad flag of each parameter:
// overwrite or accumulate the gradient; a module's training mode, NOTE
// [ Host flags ] in src/core/step_observer.h) cannot live in the graph, so
// the graph checks it. What the capture run read before writing is a
// precondition of replay() (refused, naming the state and what to do, when
// it does not hold); what it wrote last is set after each replay, as the
// eager step would leave it. The graph keeps the owner alive and refuses a
// replay once only graphs hold it (the parameter or module was dropped or
// replaced).
struct HostCondition {
  Held<TensorImpl> owner;            // the leaf whose zero_grad flag it is, or null for a HostFlag
  Held<HostFlag> flag;               // the HostFlag it is, or null for a zero_grad flag
  bool has_pre = false, pre = false; // the value the step read before writing it
  bool has_post = false, post = false;   // the value the step left
  bool before = false;               // the value before the capture run (which leaves it so)
  int64_t kernel = 0;                // launches before the first use, for messages
  Phase phase = Phase::kForward;     // the phase of the first use
};

// NOTE [ A leaf's gradient state ] (src/core/step_observer.h): what of a
// leaf decides which kernels a step issues.
struct LeafState {
  bool has_grad = false;
  uint64_t grad_storage = 0;   // Storage::id() of its gradient (0: none), which the graph reads and writes
  int64_t grad_offset = 0;     // elements
  bool requires_grad = false;
  uint64_t hooks_key = 0;      // AutogradMeta::hooks_key
  bool operator==(const LeafState&) const = default;
};
LeafState leaf_state(const TensorImpl& leaf);
// "[5, 16] f32 parameter", for messages.
std::string owner_str(const TensorImpl& owner);

// A leaf whose gradient, requires_grad or hooks the captured step decided on
// or changed, as it was before the capture run (its first report comes
// before any change); a precondition of replay(), which refuses when it
// differs (an optimizer that skipped a parameter without a gradient would
// now update it; backward would run other hooks). capture() refuses a step
// that leaves a leaf's state changed (a replay runs no host code), and
// leaves out those only the step held (made inside it: each run makes its
// own).
struct LeafCondition {
  Held<TensorImpl> leaf;
  LeafState before;
  bool accumulates = false;          // the step's backward accumulates into it (runs its hooks)
  int64_t kernel = 0;                // launches before the first use, for messages
  Phase phase = Phase::kForward;     // the phase of the first use
};

// The condition's flag now, and setting it without telling an observer.
bool condition_value(const HostCondition& c);
void set_condition(const HostCondition& c, bool value);

// FailedPrecondition when this thread runs a step that capture() is
// recording or capturing, which is then refused too: a replay's kernels
// bypass the stream, so the enclosing capture would leave them out (NOTE
// [ Nested captures ] in capture/capture.cpp). OK otherwise.
absl::Status refuse_replay_inside_capture();

// A new handle on `storage` at element `offset`, with `like`'s shape,
// strides and dtype (an output moved into an arena or a region).
Tensor view_at(const Ref<Storage>& storage, int64_t offset, const Tensor& like);

}  // namespace capture_internal

// Members in destruction order, last first: the executable and the outputs
// (views into the arena, which they keep alive: NOTE [ Outputs keep the
// arena ] in capture/capture.cpp) go before the arena.
struct Graph::Impl {
  Device device;                                         // where the step runs
  Ref<Storage> arena;                                    // owns the arena memory (from the caching allocator),
                                                         // or shares it with other graphs (GraphedStep)
  Ref<Storage> output_arena;                             // the outputs' own region when they live apart, or null
  std::unique_ptr<capture_internal::Executable> executable;
  std::vector<capture_internal::Guard> guards;           // every persistent storage the step touches, once
  std::vector<capture_internal::HostCondition> conditions;   // NOTE [ Host state as a precondition ]
  std::vector<capture_internal::LeafCondition> leaves;       // NOTE [ A leaf's gradient state ]
  bool runs_backward = false;                                // a kernel of the backward phase (NOTE [ Grad mode ])
  std::vector<capture_internal::HeldTensor> outputs;     // what the step returned: views into the arena or
                                                         // persistent tensors (counted: capture/held.h)
  std::vector<planner::Buffer> buffers;                  // the recorded temporaries, lifetimes in launches
  std::vector<int64_t> offsets;                          // bytes into the arena of each of buffers (into
                                                         // output_arena where in_output_region[i])
  std::vector<bool> in_output_region;
  capture_internal::Trace trace;                         // the recorded warm-up
  CaptureStats stats;
  bool replayed = false;                                 // a replay ran (also over bad data): the outputs
                                                         // hold its values
  // CaptureOptions::inputs: the variables, and the tensors they held at capture.
  std::vector<Tensor*> input_vars;
  std::vector<Tensor> inputs;
  // CaptureOptions::names, by Storage::id(): for messages.
  struct Named {
    std::string name;
    DType dtype;
    int64_t offset;   // elements from the storage's start
  };
  absl::flat_hash_map<uint64_t, Named> names;
  // Shadow verification (CaptureOptions::verify_every): the step, and
  // replays so far (those whose kernels ran, bad data included).
  std::function<std::vector<Tensor>()> step;
  int verify_every = 0;
  int64_t replays = 0;

  // FailedPrecondition naming the first guard whose tensor was freed or
  // replaced, or the first host condition that does not hold.
  [[nodiscard]] absl::Status check_guards() const;
  // Leaves the host state as the step would (after a replay ran).
  void apply_postconditions() const;
  // A leaf the step decided on (NOTE [ A leaf's gradient state ]) has, or no
  // longer has, a gradient, or another one, or other hooks or requires_grad
  // (also a tensor the step only reads, in a step that runs backward), since
  // capture: a capture now would record another step (GraphedStep records
  // again).
  bool gradient_state_changed() const;
  // check_guards(), then one replay (verified every verify_every-th), then,
  // when its kernels ran (also over bad data: NOTE [ A replay that ran ] in
  // capture/executable.h), the step's host-side effects: replays counted,
  // the outputs readable, the postconditions set.
  capture_internal::ReplayResult replay_once();
  // FailedPrecondition naming the first input variable rebound since capture.
  [[nodiscard]] absl::Status check_inputs() const;
  // One replay, then the same step run eagerly from the state before it, and
  // the two compared (NOTE [ Shadow verification ] in graph.cpp); a replay
  // that met bad data is returned as it is, not compared.
  capture_internal::ReplayResult replay_verified();
  // Executable::replay, then the host-side effects of a replay that ran.
  capture_internal::ReplayResult run_executable();
  // The host-side effects of a replay whose kernels ran: the outputs hold
  // its values, the postconditions are set.
  void finish_replay();
  // "parameter 'fc1.weight'" or "a 256-byte tensor first used by 'gemm'".
  std::string describe(const Storage& s, const char* first_op) const;
  // Executable::replay_timed after check_guards(), then finish_replay()
  // when it ran (not counted in replays: verify_every counts plain ones).
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
