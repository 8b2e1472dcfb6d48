// What capture() turns a step into, on any device: an Executable replays the
// captured step; a Capturer makes one from the capture run. The CPU's kernel
// list (capture/cpu_graph.h) and CUDA's graph (capture/cuda_graph.h) are the
// two implementations, so that Graph and capture() never ask which device.
//
//   std::unique_ptr<Capturer> c = make_cpu_capturer();   // or make_cuda_capturer(device, programmatic)
//   c->prepare_arena(*arena);
//   // While the capture run goes, the capture observer hands every launch
//   // that matched the recorded warm-up to c->take(launch).
//   absl::StatusOr<std::unique_ptr<Executable>> exe = c->capture([&] { outputs = run_step(step); });
//   ReplayResult r = (*exe)->replay();   // r.status; r.ran: whether the kernels ran
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "capture/trace.h"
#include "src/core/step_observer.h"

namespace encore::capture_internal {

class CudaGraph;   // capture/cuda_graph.h

// NOTE [ A replay that ran ]: what one replay did. A replay's error means
// one of two things, which its Graph handles apart:
//  - ran: the kernels ran, and status says they met bad data (CPU: a class
//    id or index out of range, src/core/kernel_errors.h). The step has run
//    with those rows skipped: it wrote everything it writes (outputs,
//    gradients, parameters, optimizer state), so the host state is left as
//    after any replay (the postconditions, the outputs readable, a graphed
//    step's inputs written back), and the error is still returned.
//  - not ran: nothing was launched (CUDA: an earlier replay's bad data found
//    before launching, or cudaGraphLaunch failed; both devices: timing not
//    available), so nothing changes.
// OK implies ran.
struct [[nodiscard]] ReplayResult {
  absl::Status status;
  bool ran = false;
};

// A captured step, ready to replay; owns its kernel list or CUDA graph (not
// the arena, which its Graph owns and which must outlive it).
class Executable {
 public:
  virtual ~Executable() = default;
  // Runs the step once (Graph::replay() documents the errors), and says
  // whether its kernels ran (NOTE [ A replay that ran ]).
  virtual ReplayResult replay() = 0;
  // replay() that also timestamps every node (profilers): stamps gets
  // launches + 1 values, stamps[i + 1] - stamps[i] = node i's wall time in
  // ns (steady_clock). Unimplemented, not run, where nodes are timed
  // otherwise (CUDA: CUPTI, profile/cuda_profile.h).
  virtual ReplayResult replay_timed(std::vector<int64_t>& stamps) = 0;
  // Graphviz DOT of the step; `trace` is the recorded warm-up it was captured from.
  [[nodiscard]] virtual absl::Status dump_dot(const std::string& path, const Trace& trace) const = 0;
  // The CUDA graph behind a CUDA executable (profilers, tools); nullptr otherwise.
  virtual const CudaGraph* cuda_graph() const { return nullptr; }
  // Moves the CUDA graph out (the executable is then empty: only destroy
  // it); nullptr on CPU. For a Capturer updating it (Capturer::reuse).
  virtual std::unique_ptr<CudaGraph> take_cuda_graph();   // capture/cuda_graph.cpp
};

// Makes an Executable of one capture run of a step, on one device.
class Capturer {
 public:
  virtual ~Capturer() = default;
  // Called once with the arena before the capture run (CPU: touches every page).
  virtual void prepare_arena(Storage& arena) {}
  // An earlier executable of the same step (its graph moved into another
  // arena, say), given before capture(): where the new capture has the same
  // kernels in the same order (only pointers, shapes or launch dimensions
  // differ), capture() updates it in place and returns it instead of
  // instantiating a new one (CUDA: cudaGraphExecUpdate, falling back to
  // cudaGraphInstantiate when the driver refuses; CPU: ignored, a kernel
  // list is cheaper to make than to rewrite). The capturer owns it from
  // here on.
  virtual void reuse(std::unique_ptr<Executable> previous) {}
  // A launch of the capture run that matched the recorded warm-up. Returns
  // whether it runs now (CUDA: into the capturing stream) rather than being
  // taken (CPU: appended to the kernel list, not run). Never throws.
  virtual bool take(const LaunchRecord& launch) = 0;
  // Runs `run` (the capture run: the step under the capture observer) in
  // capture mode and returns the executable, or the error `run` threw (as a
  // Status) or capture met. Called once.
  [[nodiscard]] virtual absl::StatusOr<std::unique_ptr<Executable>> capture(const std::function<void()>& run) = 0;
  // After capture(): whether it updated reuse()'s executable, and the ns it
  // spent making the executable (instantiating or updating, uploading on
  // CUDA; not the capture run's launches).
  virtual bool updated() const = 0;
  virtual int64_t instantiate_ns() const = 0;
};

std::unique_ptr<Capturer> make_cpu_capturer();                                          // capture/cpu_graph.cpp
std::unique_ptr<Capturer> make_cuda_capturer(Device device, bool programmatic_launch);   // capture/cuda_graph.cpp

}  // namespace encore::capture_internal
