// The pieces of capture() for callers that run every step themselves
// (GraphedStep, capture/graphed.cpp): one recorded eager run and its plan,
// then the capture run into an arena the caller may share between graphs.
//
//   std::vector<Tensor> outs;   // the recorded run is a real step: these are its outputs
//   absl::StatusOr<std::unique_ptr<Graph::Impl>> g = record_and_plan(step, options, outs);
//   Ref<Storage> arena = Storage::allocate((*g)->stats.arena_bytes, (*g)->device);
//   absl::Status s = capture_into(step, options, **g, arena);   // computes nothing
//   Graph graph(*std::move(g));
//   s = graph.replay();
#pragma once

#include <functional>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "capture/graph_impl.h"

namespace encore::capture_internal {

// Runs `step` once eagerly under the recorder (outputs: what it returned,
// detached) and plans its temporaries, the outputs in a region of their own
// (stats.output_bytes) apart from the arena (stats.arena_bytes). The refusals
// of capture()'s recorded run (host reads, escapes, lazily created state);
// options.warmup only words their advice.
absl::StatusOr<std::unique_ptr<Graph::Impl>> record_and_plan(const std::function<std::vector<Tensor>()>& step,
                                                             const CaptureOptions& options,
                                                             std::vector<Tensor>& outputs);

// The capture run of a graph from record_and_plan (again, to move it into
// another arena): allocations from `shared` (at least g.stats.arena_bytes on
// g.device) and a new output region. Computes nothing and leaves the host
// state as it found it. The refusals of capture()'s capture run.
absl::Status capture_into(const std::function<std::vector<Tensor>()>& step, const CaptureOptions& options,
                          Graph::Impl& g, const Ref<Storage>& shared);

// Whether this thread runs a step that capture() (or a GraphedStep) is
// recording or capturing (NOTE [ Nested captures ] in capture/capture.cpp).
bool inside_capture();

}  // namespace encore::capture_internal
