// Capture a whole training step once; replay it every step after.
//
//   auto step = [&] {
//     opt.zero_grad();
//     Tensor loss = cross_entropy(model.forward(x), y);
//     loss.backward();
//     opt.step();
//     return std::vector<Tensor>{loss};
//   };
//   absl::StatusOr<encore::Graph> graph = encore::capture(step);
//   if (!graph.ok()) { /* the message says what in the step cannot be captured */ }
//   for (...) {
//     x.copy_(next_x); y.copy_(next_y);              // static inputs, refilled in place
//     absl::Status s = graph->replay();
//     float loss = graph->output(0).item<float>();
//   }
//
// What capture() does (DESIGN.md, "The path of one captured step"):
//  1. Warm-up: runs `step` options.warmup times EAGERLY. These are real
//     training steps: parameters and optimizer state change, exactly as if
//     the loop had run them. The last warm-up is recorded: every kernel with
//     the buffers it reads and writes, every allocation with its size.
//  2. Lifetimes: a temporary lives from the first kernel that touches it to
//     the last one (kernel-level last use). Step outputs live to the end.
//     Everything that existed before the recorded step (parameters, grads,
//     optimizer state, static inputs) is persistent and stays where it is.
//  3. Plan: planner/ places the temporaries in one arena.
//  4. Capture: `step` runs once more with allocations served from the arena
//     and the stream in capture mode. On CPU the kernels are appended to a
//     list instead of running, exactly as CUDA stream capture behaves: this
//     run computes nothing. It must issue the same kernels and allocation
//     sizes as the recorded warm-up, else capture fails naming the first
//     differing op.
//  5. replay() runs the list: no allocation, no shape checks, no autograd.
//
// The contract (README "Capturing your own step"): a replay does exactly
// what the eager step would have done, bit for bit, or capture() / replay()
// refuses with a Status saying why and what to do.
//  - capture() compares the capture run with the recorded warm-up launch by
//    launch: the kernel and op, every non-pointer argument byte (scalars,
//    sizes, dtypes, modes: src/core/kernel_args.h), every pointer's target
//    operand and offset, and the identity of every persistent tensor and
//    temporary read or written. A difference is refused naming the kernel
//    index, op, argument and both values.
//  - replay() checks that the persistent tensors are alive (a tensor that
//    only graphs still hold, this one or others, was freed or replaced:
//    NOTE [ Counting the graphs' own references ] in capture/held.h), that
//    bound inputs (CaptureOptions::inputs) still hold their tensors, that no
//    requires_grad_() changed a tensor the step uses, and that host state
//    deciding which kernels the step issues (the lazy zero_grad flag of each
//    parameter, the training mode of each module the step read) is as the
//    capture run read it; it then leaves that state as the step would
//    (NOTE [ Host state as a precondition ] in capture/graph_impl.h). Each
//    parameter whose gradient the step looked at (an optimizer, zero_grad,
//    backward) must still have the same gradient tensor, or still have none
//    (a parameter skipped for want of one would now be updated), and, in a
//    step that runs backward, the requires_grad and post-accumulate hooks
//    it had (NOTE [ A leaf's gradient state ] in src/core/step_observer.h);
//    capture() refuses a step that changes those and leaves them changed. A step that runs backward is refused inside
//    a NoGradGuard, where its eager twin's backward() fails (NOTE
//    [ Grad mode ] in src/core/grad_mode.h).
//  - Not seen: a variable rebound to a new tensor (lin.weight = t) while
//    other handles keep the old one alive (the module's parameter list, the
//    optimizer, a copy of graph.output(i) the user kept; also the step
//    itself, kept by a graph under verify_every, whose closure may hold
//    tensors by value): replays go on with the old tensor. Graphs' own
//    references are not such handles, however many graphs share them: to
//    the tensors they guard, and their outputs, a persistent tensor the
//    step returned included. Refill parameters in place
//    (copy_(), load_into()); bind batch variables with
//    CaptureOptions::inputs, which are checked by variable.
//  - What stays frozen at the capture run's values, by design: host numbers
//    baked into kernel arguments (Graph::frozen() lists them), and whatever
//    the step's C++ code decides on the host without launching anything
//    differently. CaptureOptions::verify_every re-runs replays eagerly and
//    compares, for the cases no check can see.
//
// Errors instead of silent wrong answers: a host read inside the step
// (item(), to_vector(), printing), a tensor allocated in the step that
// outlives it without being an output, or an exception thrown by the step
// make capture() return a Status; the model and optimizer stay usable. So
// does a capture() called inside a step that another capture() records or
// captures, or a Graph replayed there (its kernels bypass the stream, so the
// outer graph would leave them out; a GraphedStep called there runs its step
// eagerly instead); a profiler's eager run around capture() is fine.
#pragma once

#include <functional>
#include <initializer_list>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "encore/planner.h"
#include "encore/tensor.h"

namespace encore {

struct CaptureOptions {
  int warmup = 2;                               // eager runs before capture; the last is recorded (>= 1)
  planner::Algorithm planner = planner::Algorithm::kBest;
  double planner_time_limit_s = 0.5;
  // CUDA, compute capability >= 9.0 (Hopper): the graph's kernels launch
  // while the kernel before them finishes and wait for its results at their
  // start (programmatic dependent launch), hiding the launch latency between
  // small kernels; results are the same bits. Off by default until measured
  // on a GPU (bench/gpu_bench "pdl" rows). Ignored on CPU, on older GPUs and
  // when encore was built for an older architecture (-Dgpu_arch below sm_90).
  bool programmatic_launch = false;
  // The step's inputs: the variables the step reads its batch from, e.g.
  // {&x, &y}. Optional: without it refill the tensors in place (x.copy_()).
  // With it, replay(data) copies each data[i] into input i's tensor, and
  // replay() refuses (FailedPrecondition) once a variable was rebound to
  // another tensor (x = next instead of x.copy_(next)), even while some other
  // handle keeps the old tensor alive. Every input must exist before
  // capture() and be read by the step (else InvalidArgument). The variables
  // are not owned: they must outlive the Graph.
  std::vector<Tensor*> inputs;
  // Shadow verification (NOTE [ Shadow verification ] in capture/graph.cpp):
  // every verify_every-th replay() (0: never) also runs the step eagerly from
  // the state before that replay and compares, bit for bit, every output and
  // every persistent tensor the step touches (parameters, gradients,
  // optimizer state, generator state, inputs) and the lazy zero_grad flags.
  // A difference returns Internal naming the first one (tensor, element,
  // both values); either way the state is left as the eager step left it.
  // The step function must stay callable while the graph replays. Costs an
  // eager step and a copy of the state per verified replay (bench/RESULTS.md).
  int verify_every = 0;
  // Names for the persistent tensors in messages (verification's
  // difference, the frozen list), e.g. model.named_parameters() plus
  // opt.state(); unnamed tensors are described by size and first op.
  std::vector<std::pair<std::string, Tensor>> names;
};

// A host value baked into a captured kernel's arguments (Graph::frozen()).
struct FrozenValue {
  size_t node;          // the kernel's index in the graph
  const char* op;       // its op, e.g. "mul" (static string)
  const char* phase;    // "forward", "backward" or "optimizer" (static string): the phase that launched it
  std::string name;     // the argument, e.g. "s", "alpha", "value"
  std::string value;    // e.g. "0.5", "f32 0.00999999978" (a fill value and its dtype)
};

struct CaptureStats {
  int64_t kernels = 0;             // nodes in the graph
  int64_t temporaries = 0;         // buffers placed in the arena
  int64_t arena_bytes = 0;         // the planned arena
  int64_t output_bytes = 0;        // the outputs' own region, when they live apart from the arena (GraphedStep)
  int64_t lower_bound_bytes = 0;   // planner::lower_bound of the recorded lifetimes
  // Temporaries the planner's time limit (CaptureOptions::planner_time_limit_s)
  // left out of its first plan and stacked above the rest (valid, but the
  // arena may be far above the lower bound): 0 unless the limit ran out.
  int64_t planner_stacked = 0;
  int64_t eager_peak_bytes = 0;    // caching allocator's in-use peak during the recorded warm-up,
                                   // above what was in use before it
  double warmup_ms = 0, plan_ms = 0, capture_ms = 0;
  // Of capture_ms: making the executable from the capture run (CUDA:
  // cudaGraphInstantiate or cudaGraphExecUpdate, and the upload; CPU: the
  // kernel list's argument pointers resolved or rewritten).
  double instantiate_ms = 0;
  // The executable was updated from the same graph's earlier one (GraphedStep
  // moving a graph into another arena) instead of instantiated anew.
  bool updated = false;
};

class Graph {
 public:
  // A moved-from Graph holds nothing: replay() and dump_dot() return
  // FailedPrecondition, the accessors throw encore::Error saying so.
  Graph(Graph&&) noexcept;
  Graph& operator=(Graph&&) noexcept;
  ~Graph();

  // Runs the captured step once. Refuses (FailedPrecondition) when a tensor the
  // graph reads or writes was freed since capture (no handle left but
  // graphs', this one's or others': a static input dropped, a tensor
  // replaced whose old one nothing else holds; see "Not seen" above), when
  // called inside a step that capture() records or captures (that capture
  // is refused too), or when a check of the contract above fails; a refused
  // replay runs nothing and changes nothing.
  //
  // Returns InvalidArgument, naming the op, when a kernel met bad data the
  // host could not check first (a class id or embedding index out of range:
  // src/core/kernel_errors.h). On CPU the step has then run in full with
  // those rows skipped (a bad class id counts as ignore_index; a bad
  // embedding, gather or scatter index reads and writes nothing): its
  // outputs, gradients, parameters and optimizer state were all written,
  // exactly as a replay whose batch held ignore_index there, and the host
  // state is left as after any replay: output(i) holds this replay's values,
  // the lazy zero_grad flags and training modes are as the step leaves them,
  // and it counts as a replay (verify_every; it is not verified, since the
  // eager step refuses that data). Refill good data and replay on.
  //
  // On CUDA replay() only enqueues the graph: its bad-data reports show at
  // the next synchronizing read (loss.item(), encore::synchronize(device):
  // encore::Error naming the op), or as this InvalidArgument from the next
  // replay() when the bad one has finished by then. That next replay is then
  // not launched and changes nothing (the bad one had run, as on CPU).
  [[nodiscard]] absl::Status replay();
  // Copies data[i] into the tensor of CaptureOptions::inputs[i] (the one the
  // variable held at capture), then replays (errors as replay()).
  // InvalidArgument, with nothing copied or run, when the count, a shape,
  // dtype or device does not match.
  [[nodiscard]] absl::Status replay(absl::Span<const Tensor> data);
  [[nodiscard]] absl::Status replay(std::initializer_list<Tensor> data) {
    return replay(absl::MakeConstSpan(data.begin(), data.size()));
  }
  // Every host number baked into a kernel argument (floats and fill values:
  // a loss scale, betas, eps, dropout's p), in node order. Each is the same
  // at every replay. Shapes, dtypes and modes are frozen too; capture()
  // checked all of them, with every other argument, against the recorded
  // warm-up, so none of them changed between the two runs.
  std::vector<FrozenValue> frozen() const;
  // The i-th tensor `step` returned: a view into the arena (or of a
  // persistent tensor) holding the last replay's value; the next replay()
  // overwrites it, clone() keeps one. The handle keeps the arena's memory
  // alive, so a kept output stays readable (the last replay's value) after
  // the Graph is destroyed. Before the first replay() that ran (OK, or
  // InvalidArgument for bad data on CPU) there is no value: output() throws
  // encore::Error (FailedPrecondition) saying so.
  // Throws InvalidArgument for i >= num_outputs().
  const Tensor& output(size_t i) const;
  size_t num_outputs() const;
  const CaptureStats& stats() const;
  // The recorded temporaries as planner buffers (lifetimes in kernel
  // indices), e.g. to compare planning algorithms on a real step.
  const std::vector<planner::Buffer>& buffers() const;
  // Writes the graph in Graphviz DOT: nodes named by op and coloured by
  // phase, one edge per pair of kernels with a recorded read-after-write
  // dependency, through temporaries and persistent tensors alike (on CUDA:
  // the CUDA graph's own dump, kernel names and parameters).
  [[nodiscard]] absl::Status dump_dot(const std::string& path) const;

  // What capture() recorded and the executable that replays it, for encore's
  // profiler, tools and tests: node ops and phases, arena offsets, timed
  // replays, the CUDA graph. The type is defined in capture/graph_impl.h, an
  // internal header; user code has no use for it.
  struct Impl;
  Impl& internals() const;

  explicit Graph(std::unique_ptr<Impl> impl);   // made by capture()

 private:
  std::unique_ptr<Impl> impl_;
};

[[nodiscard]] absl::StatusOr<Graph> capture(const std::function<std::vector<Tensor>()>& step,
                                            const CaptureOptions& options = {});

}  // namespace encore
