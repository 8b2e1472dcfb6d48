// Profiling a training step: per-node times of a captured Graph's replay (and
// per-kernel times of the same step run eagerly), mapped back to the encore op
// and the phase (forward, backward, optimizer) that launched each node; a
// summary; a Chrome trace JSON that opens in Perfetto and chrome://tracing.
// The encore-prof tool is a thin main over this header; call it around your
// own captured step the same way:
//
//   absl::StatusOr<encore::Graph> graph = encore::capture(step);
//   absl::StatusOr<encore::StepProfile> replayed = encore::profile_replay(*graph);
//   absl::StatusOr<encore::StepProfile> eager = encore::profile_eager(step);
//   std::fputs(encore::format_summary(*replayed).c_str(), stdout);
//   absl::Status s = encore::write_chrome_trace("step.json", {&*eager, &*replayed});
//
// Profiling never changes what a step computes: replays run the same kernels
// in the same order (test: tests/profile/profile_test.cpp), and eager runs
// launch the step's kernels unchanged. It does change the training state,
// like any step: every profiled run is a real training step (see the counts
// on each function).
//
// Times are nanoseconds. On CPU a node's time is wall clock (steady_clock)
// between two clock reads around it, so it includes one clock read
// (StepProfile::timer_ns, typically ~20 ns).
//
// CUDA (when built and a GPU answers): profile_replay() of a CUDA graph
// times every kernel, memset and memcpy node on the GPU from CUPTI activity
// records of a profiling copy of the graph (NOTE [ Profiling a CUDA graph
// with CUPTI ] in profile/cuda_profile.h); one encore launch may be several
// nodes (cuBLAS), and NodeTiming::launch names the launch each came from.
// It also reports the GPU's idle time between nodes (gpu_idle_ns). When
// CUPTI is unavailable (another profiler holds it), each replay is timed by
// wall clock only, with no nodes, and StepProfile::note says why.
// profile_eager() on CUDA brackets each launch with CUDA events on the
// stream: a node's time is GPU time between its events, which includes
// launch latency while the GPU waits for the host. cuda_profiling_status()
// says what this build and machine offer.
//
// These functions live in libencore_profile (meson: encore_profile_dep), not
// in libencore: with CUDA they use CUPTI, so only programs that profile need
// libcupti at run time.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "encore/capture.h"
#include "encore/tensor.h"

namespace encore {

struct ProfileOptions {
  int warmup_runs = 2;   // untimed runs first (>= 0)
  int runs = 20;         // timed runs (>= 1); node times are medians over them (of an even
                         // count, the mean of the two middle values, rounded down)
};

// One kernel (a graph node, or an eager launch) in the representative run:
// the timed run whose total time is the median (of an even count of runs,
// the slower of the two middle ones).
struct NodeTiming {
  int64_t node = 0;                 // graph node index (CUDA: in CudaGraph::launch_nodes() order), or launch
                                    // order when eager
  int64_t launch = 0;               // the encore launch that made it (its index in the captured step); = node on CPU
                                    // and when eager
  const char* op = "";              // the launch's op name (static string), e.g. "gemm", "relu_backward"
  const char* phase = "forward";    // "forward", "backward" or "optimizer" (static string)
  int stream = 0;                   // index into StepProfile::streams
  int64_t start_ns = 0;             // from the start of the representative run (CUDA replay: of its first node)
  int64_t duration_ns = 0;          // in the representative run
  int64_t median_ns = 0;            // median over all timed runs
  std::vector<int64_t> read_bytes;  // bytes of each storage read (whole storages)
  std::vector<int64_t> write_bytes; // bytes of each storage written
  // The earlier launches of the step whose output this one reads (the last
  // writer of each storage it reads: temporaries, parameters, gradients and
  // optimizer state alike), ascending, without repeats.
  std::vector<int64_t> reads_from;
};

struct StepProfile {
  std::string mode;                    // "replay" or "eager"
  std::string device;                  // "cpu" or "cuda:0"
  std::vector<std::string> streams;    // one name per track, e.g. {"cpu stream"}, {"cuda:0 stream"}
  std::vector<NodeTiming> nodes;       // in launch order
  // Planned arena bytes live while node i runs (replay only; empty when
  // eager): the sum of the sizes of the buffers() with lower <= i < upper.
  // One more entry at the end: the bytes still live after the last node
  // (the step's outputs).
  std::vector<int64_t> arena_in_use_bytes;
  int64_t arena_bytes = 0;             // the planned arena (replay only)
  int64_t step_ns = 0;                 // median wall time of one UNtimed run (CUDA: to the end of a synchronize)
  int64_t step_min_ns = 0, step_max_ns = 0;
  int64_t timed_step_ns = 0;           // wall time of the representative timed run
  int64_t timer_ns = 0;                // cost of one clock read, included in each node's time
  // CUDA replays: the GPU's idle time inside one replay, from its first
  // node's start to its last node's end minus the time some node ran
  // (median over the timed runs); -1 when not measured.
  int64_t gpu_idle_ns = -1;
  int runs = 0;                        // timed runs behind the medians
  std::string note;                    // what could not be measured and why; empty when all was
};

// Replays `graph` warmup_runs + 2 * runs times (warm-up, untimed runs for
// step_ns, timed runs for the node times; on CUDA each one synchronized, the
// timed runs on a profiling copy of the graph that computes the same). Shadow
// verification (CaptureOptions::verify_every) is paused for these replays, so
// that no eager step is timed as a replay, and StepProfile::note says so; it
// resumes after. Fails like replay() does (a freed parameter, ...) and with
// InvalidArgument on bad options.
[[nodiscard]] absl::StatusOr<StepProfile> profile_replay(Graph& graph, const ProfileOptions& options = {});

// Runs `step` eagerly warmup_runs + 2 * runs times, timing each kernel launch
// in the timed runs (on the CPU and, when a GPU is usable, on cuda:0's
// stream; the profile's device is the one the first launch ran on); the gap
// between kernels is eager overhead (dispatch, autograd, allocation). A step must launch the same kernels every run for
// per-node medians; otherwise median_ns is the representative run's time.
// Errors thrown by the step come back as a Status. Refused (FailedPrecondition)
// where an observer already watches the streams, e.g. inside a step that
// capture() records or captures; the step may itself call capture().
[[nodiscard]] absl::StatusOr<StepProfile> profile_eager(const std::function<std::vector<Tensor>()>& step,
                                                        const ProfileOptions& options = {});

// Planned arena bytes in use at each node of `graph` and after the last one
// (size stats().kernels + 1), from buffers() lifetimes and sizes. Its maximum
// is at most planner::lower_bound(buffers()) (which rounds sizes up to the
// alignment), and equal to it when every size is a multiple of 64.
std::vector<int64_t> arena_bytes_in_use(const Graph& graph);

struct OpTime {
  std::string op;
  int64_t total_ns = 0;   // sum of the node medians
  int64_t count = 0;      // nodes
};

struct ProfileSummary {
  int64_t step_ns = 0;     // StepProfile::step_ns (untimed)
  int64_t kernel_ns = 0;   // sum of node medians (every sum here held at INT64_MAX, never wrapped)
  // In the representative timed run: its wall time minus the time inside its
  // kernels (eager: dispatch, autograd, allocation; replay: the loop itself).
  int64_t outside_kernels_ns = 0;
  // {"forward", ns}, {"backward", ns}, {"optimizer", ns}, then any other
  // phase the nodes name (CUDA nodes left unmapped: "unknown"), in order of
  // first appearance: sums of node medians, adding up to kernel_ns.
  std::vector<std::pair<std::string, int64_t>> phase_ns;
  std::vector<OpTime> top_ops;   // by total_ns, largest first
};

ProfileSummary summarize(const StepProfile& profile, int top = 10);
// A few lines of text: step time, kernel time and the rest, time per phase,
// the top ops, and the CUDA status line.
std::string format_summary(const StepProfile& profile, int top = 10);
// A duration in the unit that reads best: "850 ns", "12.3 µs" (below 1 ms
// once rounded: 999,950 ns is "1.000 ms"), "1.234 ms". format_summary prints
// every time so.
std::string duration_str(int64_t ns);

// One line on CUDA profiling in this build and on this machine, e.g.
// "cuda: not built (CPU profiling only)".
std::string cuda_profiling_status();

// The profiles as one Chrome trace (JSON object format): one process per
// profile with, top to bottom, a "phases" track (an "X" slice per run of
// nodes in one phase: forward, backward, optimizer), an "ops" track (an "X"
// slice per launch, spanning its nodes), one thread track per stream with an
// "X" event per node (name = op, args = phase, node, launch, read/write
// bytes, median_ns), flow arrows ("s"/"f" pairs, category "dependency")
// from a launch's last node to the first node of each launch that reads its
// output (NodeTiming::reads_from), and for replays a counter track "arena
// bytes in use" (a value per launch). Times in microseconds. otherData.encore holds each profile's summary
// (with gpu_idle_ns and note). Strings are escaped as JSON requires; bytes that
// are not UTF-8 become U+FFFD.
std::string chrome_trace_json(absl::Span<const StepProfile* const> profiles);
// chrome_trace_json into `path`, whole or not at all: a regular file is
// written beside it and renamed over it, so a failed write (returned, with
// its cause) leaves the file as it was; /dev/stdout and pipes are written in
// place (NOTE [ Writing a file atomically ] in src/core/atomic_file.cpp).
[[nodiscard]] absl::Status write_chrome_trace(const std::string& path,
                                              absl::Span<const StepProfile* const> profiles);

}  // namespace encore
