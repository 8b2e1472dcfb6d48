// Graphed training steps: a step function called like an eager one, where
// every call is exactly one training step, and repeated calls replay a
// captured graph. The reference points are PyTorch's
// torch.cuda.make_graphed_callables and tinygrad's TinyJit: no hidden extra
// steps, a graph per input signature, and here one arena shared by all of
// an object's graphs.
//
//   encore::GraphedStep train([&](const std::vector<encore::Tensor>& in) {
//     opt.zero_grad();
//     encore::Tensor loss = encore::cross_entropy(model.forward(in[0]), in[1]);
//     loss.backward();
//     opt.step();
//     return std::vector<encore::Tensor>{loss};
//   });
//   for (const Batch& b : batches) {                    // batches of several shapes, in any order
//     sched.step();                                    // nothing special: every call is one step
//     std::vector<encore::Tensor> out = train({b.x, b.y});
//     float loss = out[0].item<float>();
//   }
//   const encore::GraphedStats& s = train.stats();     // graphs, captures, replays, eager calls, bytes
//
// A call's signature is the shapes, dtypes and devices of its inputs plus
// the optional key (e.g. "train" and "eval" for two uses of one step). Per
// signature, calls 1 .. warmup-1 run the step eagerly, call `warmup` runs it
// eagerly under the recorder (capture/steps.h), call warmup+1 captures it (the
// capture run computes nothing) and replays it once, and later calls replay.
// Each call's inputs are copied into the signature's own static inputs
// (clones made at the recorded call, which the step function receives; on
// CUDA the copy does not wait for the GPU), so rebinding cannot happen.
// What the step writes into its inputs in place (a carried state) is copied
// back into the caller's tensors after the call, as an eager call leaves
// them. Calls with an input that requires grad run eagerly (a graph's
// static inputs pass no gradient back), and so do calls whose inputs share
// memory (one tensor passed twice, two views of one) and calls with an
// input the step also reaches itself (a module's buffer passed as an input,
// a tensor the step function holds: a static copy would hold the two apart;
// the signature's recorded call runs over the caller's own memory to find
// them, and a signature whose recorded call found one runs eagerly). A
// signature with a non-contiguous input records twice: once over the
// caller's memory to find such inputs, then over its copy.
//
// Memory: every graph of the object places its temporaries (workspaces
// included) in one shared arena, as large as the largest graph needs; a
// graph's outputs live in a small region of their own, so other signatures'
// replays never touch them. Returned outputs keep their values as an eager
// call's would, however long the caller keeps them: a replay whose
// previous outputs (or views of them) the caller still holds first moves
// those to a copy of their own (stats().kept_outputs counts it; a caller that
// reads the loss and drops it pays nothing). An input the step returns (or
// a view of one) is the caller's own tensor, as eagerly (a copy where the
// caller's tensor is not contiguous). When a graph needs a larger arena than the
// shared one, a larger one is made and the older graphs move into it at
// their next call (a capture run, counted in stats().recaptures).
//
// Several objects whose calls never overlap (a train step and an eval step,
// called from one thread) can share one arena too: give them one GraphPool
// (PyTorch's graph_pool_handle). The pool's arena is as large as the
// largest graph of any of its objects; each graph keeps its outputs and
// static inputs apart, so outputs stay valid as above across the objects.
// A graph recaptured to move into another arena updates its executable
// (CUDA: cudaGraphExecUpdate) instead of instantiating a new one where the
// driver allows (stats().updates; the CPU's kernel lists are made anew,
// which costs less there).
//
//   encore::GraphPool pool;
//   encore::GraphedStep train(train_fn, {.pool = pool}), eval(eval_fn, {.pool = pool});
//
// Fallbacks, never wrong answers: a signature whose capture is refused
// (capture()'s refusals: a host read in the step, a changing host value, ...;
// a refused recording or capture run is recorded once more at the next
// call, since state the first call creates lazily is refused only then), a
// replay refused for its preconditions (a zero_grad() called between calls,
// say; a signature whose parameters gained or lost a gradient, hooks or
// requires_grad since its capture is recorded again instead: NOTE [ Graphs
// of another gradient state ] in capture/graphed.cpp), signatures past
// max_graphs, and graphs that do not fit max_bytes run eagerly instead; each reason is counted, kept in
// last_fallback(), and logged once to stderr (naming the signature) unless
// options.log is false.
//
// Errors the eager step would raise (an exception from the step, bad class
// ids found by a replayed kernel) are thrown as encore::Error. A replay that
// met bad data on CPU has run with the bad rows skipped (Graph::replay()):
// its parameter and optimizer updates stay, what it wrote into its inputs is
// copied back into the caller's tensors and it counts in stats().replays,
// as for any replay; only its outputs are not returned. On CUDA the bad
// call's report surfaces at a later synchronizing read, or is thrown by the
// signature's next call, which then runs nothing.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "encore/capture.h"
#include "encore/tensor.h"

namespace encore {

// A handle on one arena that several GraphedStep objects share (copies
// of the handle name the same arena). The arena lives while any handle or
// graph holds it. Not thread-safe: the objects sharing it must be called
// from one thread, one call at a time.
class GraphPool {
 public:
  GraphPool();
  int64_t arena_bytes() const;   // the shared arena now (0 before the first graph)

 private:
  friend class GraphedStep;
  struct Impl;
  std::shared_ptr<Impl> impl_;
};

struct GraphedOptions {
  int warmup = 2;            // eager calls per signature, the last of them recorded (>= 1)
  int max_graphs = 16;       // signatures past this many run eagerly (counted in eager_fallbacks)
  // Bytes for all of the object's graphs: the shared arena, the outputs'
  // regions and the static inputs. 0: no limit. When a new graph would
  // exceed it, least recently used graphs are released (their signatures
  // start over at their next call); when even that cannot make room, the
  // new signature runs eagerly.
  int64_t max_bytes = 0;
  // planner, planner_time_limit_s, programmatic_launch, verify_every and
  // names apply to every graph; warmup and inputs are the object's own.
  CaptureOptions capture;
  bool log = true;           // one stderr line per distinct fallback reason
  // The arena this object's graphs share; default: one of its own. With a
  // pool shared by several objects, max_bytes counts the pool's arena and
  // this object's own outputs and inputs, and releases only its own graphs.
  GraphPool pool;
};

struct GraphedStats {
  int64_t graphs = 0;             // captured graphs held now
  int64_t captures = 0;           // graphs captured (a capture run each)
  int64_t recaptures = 0;         // graphs moved into a larger or smaller shared arena
  int64_t updates = 0;            // of those, executables updated in place (not instantiated anew)
  int64_t replays = 0;            // calls answered by a replay
  int64_t eager_calls = 0;        // warm-up calls (eager, the last one recorded)
  int64_t eager_fallbacks = 0;    // calls run eagerly for a reason (see GraphedStep::last_fallback)
  int64_t released = 0;           // graphs released for max_bytes
  // Replays before which the caller still held the last replay's outputs
  // (or views of them), which then moved to a copy of their own: one
  // allocation and a copy of the outputs' bytes each.
  int64_t kept_outputs = 0;
  int64_t arena_bytes = 0;        // the shared arena now
  int64_t largest_arena_bytes = 0;   // the largest single graph's arena need among those held
  int64_t output_bytes = 0;       // the graphs' output regions, summed
  int64_t input_bytes = 0;        // the static inputs, summed
  // The largest eager peak among the graphs held: the caching allocator's
  // in-use peak above its start during each signature's recorded call
  // (temporaries and outputs), to set arena_bytes against.
  int64_t eager_peak_bytes = 0;
};

// One graph of a GraphedStep, for reports (GraphedStep::graphs()).
struct GraphedGraph {
  std::string signature;
  CaptureStats capture;   // its capture: kernels, arena need, lower bound, eager peak, times
  int64_t replays = 0;    // its replays so far
};

class GraphedStep {
 public:
  // The step: inputs in, outputs out (the outputs are returned detached).
  using Fn = std::function<std::vector<Tensor>(const std::vector<Tensor>& inputs)>;

  // Keeps `fn` for its whole life: what fn refers to (the model, the
  // optimizer) must outlive the GraphedStep.
  explicit GraphedStep(Fn fn, GraphedOptions options = {});
  ~GraphedStep();
  GraphedStep(const GraphedStep&) = delete;
  GraphedStep& operator=(const GraphedStep&) = delete;

  // One training step on `inputs`. Its outputs keep this call's values for
  // as long as the caller holds them (a replay's are handles on the graph's
  // output region until the next replay of the signature moves them to a
  // copy: NOTE [ Outputs the caller keeps ] in capture/graphed.cpp).
  std::vector<Tensor> operator()(const std::vector<Tensor>& inputs, const std::string& key = "");

  const GraphedStats& stats() const;
  // The graphs held now, least recently used first.
  std::vector<GraphedGraph> graphs() const;
  // The last reason a call ran eagerly instead of replaying, naming its
  // signature ("" if none yet).
  const std::string& last_fallback() const;
  // The signature string of these inputs and key, as messages show it:
  // "[8, 12] f32 cpu, [8] i64 cpu | train".
  static std::string signature(const std::vector<Tensor>& inputs, const std::string& key = "");

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace encore
