// Per-node profiles of replayed and eager steps, summaries, Chrome traces
// (include/encore/profile.h).
#include "encore/profile.h"

#include <algorithm>
#include <chrono>
#include <limits>
#include <optional>
#include <string_view>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "capture/cuda_graph.h"
#include "capture/graph_impl.h"
#include "capture/recorder.h"
#include "encore/error.h"
#include "nlohmann/json.hpp"
#include "profile/cuda_profile.h"
#include "src/core/atomic_file.h"
#include "src/core/phase.h"
#include "src/core/step_observer.h"
#include "src/core/stream.h"

namespace encore {
namespace {

using capture_internal::CudaGraph;
using profile_internal::CudaLaunchTimer;
using profile_internal::CudaReplayTimes;
using profile_internal::NodeActivity;
using profile_internal::time_cuda_replays;
using Clock = std::chrono::steady_clock;

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch()).count();
}

// The middle value; of an even count, the mean of the two middle ones
// (rounded down, without overflow). 0 when empty.
int64_t median(std::vector<int64_t> v) {
  if (v.empty()) return 0;
  auto mid = v.begin() + static_cast<std::ptrdiff_t>(v.size() / 2);
  std::nth_element(v.begin(), mid, v.end());
  if (v.size() % 2 != 0) return *mid;
  const int64_t below = *std::max_element(v.begin(), mid);   // nth_element left the smaller half before mid
  return below + (*mid - below) / 2;
}

// Index of the run whose total is the median.
size_t median_index(const std::vector<int64_t>& totals) {
  std::vector<size_t> idx(totals.size());
  for (size_t i = 0; i < idx.size(); ++i) idx[i] = i;
  std::sort(idx.begin(), idx.end(), [&](size_t a, size_t b) { return totals[a] < totals[b]; });
  return idx[idx.size() / 2];
}

// The launches in `producers` (read_producers of one launch), ascending,
// without repeats or -1.
std::vector<int64_t> distinct_producers(std::vector<int64_t> producers) {
  std::sort(producers.begin(), producers.end());
  producers.erase(std::unique(producers.begin(), producers.end()), producers.end());
  if (!producers.empty() && producers.front() < 0) producers.erase(producers.begin());
  return producers;
}

// Median cost of one steady_clock read (ns).
int64_t timer_cost_ns() {
  constexpr int kReads = 1001;
  std::vector<int64_t> t(kReads);
  for (int64_t& x : t) x = now_ns();
  std::vector<int64_t> d(kReads - 1);
  for (int i = 0; i + 1 < kReads; ++i) d[i] = t[i + 1] - t[i];
  return median(std::move(d));
}

absl::Status check_options(const ProfileOptions& o) {
  if (o.runs < 1 || o.warmup_runs < 0) {
    return absl::InvalidArgumentError(
        absl::StrFormat("profile: runs must be >= 1 and warmup_runs >= 0, got runs=%d warmup_runs=%d", o.runs,
                        o.warmup_runs));
  }
  return absl::OkStatus();
}

void fill_step_stats(const std::vector<int64_t>& untimed, StepProfile& p) {
  p.step_ns = median(untimed);
  p.step_min_ns = *std::min_element(untimed.begin(), untimed.end());
  p.step_max_ns = *std::max_element(untimed.begin(), untimed.end());
}

// durations[r][i]: node i in timed run r. Fills median_ns when every run has
// the same number of nodes.
void fill_medians(const std::vector<std::vector<int64_t>>& durations, StepProfile& p) {
  std::vector<int64_t> column(durations.size());
  for (size_t i = 0; i < p.nodes.size(); ++i) {
    bool complete = true;
    for (size_t r = 0; r < durations.size(); ++r) {
      complete = complete && durations[r].size() == p.nodes.size();
      if (complete) column[r] = durations[r][i];
    }
    p.nodes[i].median_ns = complete ? median(column) : p.nodes[i].duration_ns;
  }
}

// Times every eager launch by running the kernel itself (and telling the
// stream it took the launch), so the kernel runs exactly as it would have.
// CPU launches: steady_clock around the kernel. CUDA launches: events around
// it on the stream (`gpu`), read after the run by finish().
class EagerTimer final : public StepObserver {
 public:
  struct Launch {
    const char* op;
    Phase phase;
    Device device;
    int64_t start, end;   // ns from the run's start
    std::vector<int64_t> read_bytes, write_bytes;
    std::vector<uint64_t> read_ids, write_ids;   // Storage::id() of each storage read / written
  };

  explicit EagerTimer(CudaLaunchTimer* gpu) : gpu_(gpu) {}

  bool on_launch(const LaunchRecord& launch) override {
    Launch l{launch.op, current_phase(), launch.device, 0, 0, {}, {}, {}, {}};
    for (Storage* s : launch.reads) {
      l.read_bytes.push_back(s->nbytes());
      l.read_ids.push_back(s->id());
    }
    for (Storage* s : launch.writes) {
      l.write_bytes.push_back(s->nbytes());
      l.write_ids.push_back(s->id());
    }
    if (launch.device.is_cuda() && gpu_ != nullptr) {
      if (gpu_anchor_ < 0) gpu_anchor_ = now_ns();
      gpu_->before_launch();
      launch.thunk(launch.args);
      gpu_->after_launch();
    } else {
      l.start = now_ns();
      launch.thunk(launch.args);
      l.end = now_ns();
    }
    launches.push_back(std::move(l));
    return false;   // already ran
  }

  // After the run (times relative to t0): fills the CUDA launches' times from
  // their events, placed after the host time of the first CUDA launch.
  absl::Status finish(int64_t t0) {
    std::vector<std::pair<int64_t, int64_t>> gpu_times;
    if (gpu_ != nullptr && gpu_->launches() > 0) {
      if (absl::Status s = gpu_->read(gpu_times); !s.ok()) return s;
      gpu_->reset();
    }
    size_t g = 0;
    for (Launch& l : launches) {
      if (l.device.is_cuda() && gpu_ != nullptr) {
        if (g >= gpu_times.size()) return absl::InternalError("profile_eager: a CUDA launch lost its events");
        l.start = gpu_anchor_ + gpu_times[g].first;
        l.end = gpu_anchor_ + gpu_times[g].second;
        ++g;
      }
      l.start -= t0, l.end -= t0;
    }
    return absl::OkStatus();
  }

  std::vector<Launch> launches;

 private:
  CudaLaunchTimer* gpu_;
  int64_t gpu_anchor_ = -1;   // host time of the first CUDA launch
};

// Waits for the GPU's stream (a no-op without one); throws encore::Error.
void synchronize_gpu(const std::optional<Device>& gpu) {
  if (gpu.has_value()) current_stream(*gpu).synchronize();
}

}  // namespace

std::vector<int64_t> arena_bytes_in_use(const Graph& graph) {
  const int64_t k = graph.stats().kernels;
  std::vector<int64_t> delta(static_cast<size_t>(k) + 2, 0);
  for (const planner::Buffer& b : graph.buffers()) {
    const int64_t lo = std::clamp<int64_t>(b.lower, 0, k + 1), hi = std::clamp<int64_t>(b.upper, 0, k + 1);
    if (lo >= hi) continue;
    delta[lo] += b.size;
    delta[hi] -= b.size;
  }
  std::vector<int64_t> in_use(static_cast<size_t>(k) + 1);
  int64_t live = 0;
  for (int64_t t = 0; t <= k; ++t) in_use[t] = live += delta[t];
  return in_use;
}

namespace {

// Per-node wall times of CPU replays (CpuGraph::replay_timed).
absl::StatusOr<StepProfile> profile_cpu_replay(Graph& graph, const ProfileOptions& options) {
  Graph::Impl& g = graph.internals();
  for (int r = 0; r < options.warmup_runs; ++r) {
    if (absl::Status s = graph.replay(); !s.ok()) return s;
  }
  StepProfile p{.mode = "replay", .device = "cpu", .streams = {"cpu stream"}};
  std::vector<int64_t> untimed(options.runs);
  for (int64_t& t : untimed) {
    const int64_t t0 = now_ns();
    if (absl::Status s = graph.replay(); !s.ok()) return s;
    t = now_ns() - t0;
  }
  fill_step_stats(untimed, p);
  std::vector<std::vector<int64_t>> stamps(options.runs), durations(options.runs);
  std::vector<int64_t> totals(options.runs);
  for (int r = 0; r < options.runs; ++r) {
    if (absl::Status s = g.replay_timed(stamps[r]); !s.ok()) return s;
    totals[r] = stamps[r].back() - stamps[r].front();
    for (size_t i = 0; i + 1 < stamps[r].size(); ++i) durations[r].push_back(stamps[r][i + 1] - stamps[r][i]);
  }
  const size_t rep = median_index(totals);
  const std::vector<int64_t>& st = stamps[rep];
  const std::vector<std::vector<int64_t>> producers = capture_internal::read_producers(g.trace);
  for (size_t i = 0; i + 1 < st.size(); ++i) {
    p.nodes.push_back({.node = static_cast<int64_t>(i), .launch = static_cast<int64_t>(i), .op = g.node_op(i),
                       .phase = g.node_phase(i), .stream = 0, .start_ns = st[i] - st[0], .duration_ns = st[i + 1] - st[i],
                       .read_bytes = g.node_read_bytes(i), .write_bytes = g.node_write_bytes(i),
                       .reads_from = distinct_producers(producers[i])});
  }
  fill_medians(durations, p);
  p.arena_in_use_bytes = arena_bytes_in_use(graph);
  p.arena_bytes = graph.stats().arena_bytes;
  p.timed_step_ns = totals[rep];
  p.timer_ns = timer_cost_ns();
  p.runs = options.runs;
  return p;
}

// The GPU's idle time inside each timed CUDA replay: from its first node's
// start to its last node's end, minus the time some node ran; the median over
// the runs, -1 when none has nodes.
int64_t median_gpu_idle_ns(const CudaReplayTimes& times) {
  std::vector<int64_t> idle;
  for (const std::vector<NodeActivity>& run : times.runs) {
    if (run.empty()) continue;
    int64_t busy_until = run.front().start_ns, gaps = 0;
    for (const NodeActivity& a : run) {
      gaps += std::max<int64_t>(0, a.start_ns - busy_until);
      busy_until = std::max(busy_until, a.end_ns);
    }
    idle.push_back(gaps);
  }
  return idle.empty() ? -1 : median(idle);
}

// The nodes of CUDA replay `rep` of `times`, each with its median over the
// runs and, when the launch marks match the launches, its launch's op, phase
// and bytes.
void fill_cuda_nodes(const Graph::Impl& g, const CudaGraph& cuda_graph, const CudaReplayTimes& times, size_t rep,
                     StepProfile& p) {
  std::vector<std::vector<int64_t>> per_node(times.nodes.size());
  for (const std::vector<NodeActivity>& run : times.runs) {
    for (const NodeActivity& a : run) per_node[a.node].push_back(a.end_ns - a.start_ns);
  }
  const int64_t kernels = g.stats.kernels;
  const std::vector<NodeActivity>& run = times.runs[rep];
  const int64_t origin = run.empty() ? 0 : run.front().start_ns;
  const std::vector<std::vector<int64_t>> producers = capture_internal::read_producers(g.trace);
  for (const NodeActivity& a : run) {
    int64_t launch = times.nodes[a.node].launch;
    if (cuda_graph.num_marks() != kernels + 1 || launch >= kernels) launch = -1;
    NodeTiming n{.node = a.node, .launch = launch, .op = "(unmapped)", .phase = "unknown", .stream = 0,
                 .start_ns = a.start_ns - origin, .duration_ns = a.end_ns - a.start_ns,
                 .median_ns = median(per_node[a.node])};
    if (launch >= 0) {
      n.op = g.node_op(launch);
      n.phase = g.node_phase(launch);
      n.read_bytes = g.node_read_bytes(launch);
      n.write_bytes = g.node_write_bytes(launch);
      n.reads_from = distinct_producers(producers[launch]);
    }
    p.nodes.push_back(std::move(n));
  }
}

// Per-node times of CUDA replays (NOTE [ Profiling a CUDA graph with CUPTI ]).
absl::StatusOr<StepProfile> profile_cuda_replay(Graph& graph, const CudaGraph& cuda_graph,
                                                const ProfileOptions& options) {
  const Device device = cuda_graph.device();
  auto replay_synced = [&]() -> absl::Status {
    if (absl::Status s = graph.replay(); !s.ok()) return s;
    return status_of([&] { current_stream(device).synchronize(); });
  };
  for (int r = 0; r < options.warmup_runs; ++r) {
    if (absl::Status s = replay_synced(); !s.ok()) return s;
  }
  StepProfile p{.mode = "replay", .device = device.str(), .streams = {absl::StrCat(device.str(), " stream")}};
  std::vector<int64_t> untimed(options.runs);
  for (int64_t& t : untimed) {
    const int64_t t0 = now_ns();
    if (absl::Status s = replay_synced(); !s.ok()) return s;
    t = now_ns() - t0;
  }
  fill_step_stats(untimed, p);
  p.arena_in_use_bytes = arena_bytes_in_use(graph);
  p.arena_bytes = graph.stats().arena_bytes;
  p.runs = options.runs;
  absl::StatusOr<CudaReplayTimes> times = time_cuda_replays(cuda_graph, options.runs);
  if (!times.ok()) return times.status();
  const size_t rep = median_index(times->wall_ns);
  p.timed_step_ns = times->wall_ns[rep];
  if (!times->unavailable.empty()) {
    p.note = absl::StrCat("no per-node GPU times (", times->unavailable, "): each timed replay by wall clock only");
    return p;
  }
  p.note = times->note;
  const int64_t kernels = graph.stats().kernels;
  if (cuda_graph.num_marks() != kernels + 1) {
    p.note = absl::StrFormat("launch marks (%d) do not match the launches (%d): nodes left unmapped",
                             cuda_graph.num_marks(), kernels);
  }
  p.gpu_idle_ns = median_gpu_idle_ns(*times);
  fill_cuda_nodes(graph.internals(), cuda_graph, *times, rep, p);
  return p;
}

// NOTE [ Profiled replays are not verified ]: a graph with shadow
// verification (CaptureOptions::verify_every) runs the step eagerly beside
// every verify_every-th replay(). Timed as a replay, that would put an eager
// step, a copy of the state and a comparison into step_ns (with
// verify_every = 1, into every untimed run). So verification is paused for
// the profile's replays, the profile's note says so, and it resumes after.
class VerificationPause {
 public:
  explicit VerificationPause(Graph::Impl& g) : g_(g), every_(g.verify_every) { g_.verify_every = 0; }
  ~VerificationPause() { g_.verify_every = every_; }
  VerificationPause(const VerificationPause&) = delete;
  VerificationPause& operator=(const VerificationPause&) = delete;
  // "" when the graph verifies nothing; else what the profile's note says.
  std::string note() const {
    return every_ > 0 ? absl::StrFormat("shadow verification (verify_every = %d) paused for the profiled replays",
                                        every_)
                      : std::string();
  }

 private:
  Graph::Impl& g_;
  const int every_;
};

}  // namespace

absl::StatusOr<StepProfile> profile_replay(Graph& graph, const ProfileOptions& options) {
  if (absl::Status s = check_options(options); !s.ok()) return s;
  const VerificationPause pause(graph.internals());   // NOTE [ Profiled replays are not verified ]
  const CudaGraph* cg = graph.internals().executable->cuda_graph();
  absl::StatusOr<StepProfile> p = cg != nullptr ? profile_cuda_replay(graph, *cg, options)
                                                : profile_cpu_replay(graph, options);
  if (p.ok() && !pause.note().empty()) {
    p->note = p->note.empty() ? pause.note() : absl::StrCat(p->note, "; ", pause.note());
  }
  return p;
}

namespace {

// One eager run with every launch timed; times relative to the run's start.
// `expected` launches are reserved up front. Returns the run's wall time (ns),
// to the end of a synchronize of the GPU when there is one. Throws like the step.
int64_t timed_eager_run(const std::function<std::vector<Tensor>()>& step, const std::optional<Device>& gpu,
                        CudaLaunchTimer* gpu_timer, size_t expected, std::vector<EagerTimer::Launch>& launches) {
  EagerTimer timer(gpu_timer);
  timer.launches.reserve(expected);
  int64_t t0 = 0, total = 0;
  {
    StepObserverScope observe(&timer);
    t0 = now_ns();
    step();
  }
  synchronize_gpu(gpu);
  total = now_ns() - t0;
  if (absl::Status s = timer.finish(t0); !s.ok()) throw Error(s);
  launches = std::move(timer.launches);
  return total;
}

// The eager runs of profile_eager(): warmup_runs, then `untimed` runs timed
// as a whole, then `runs` runs with every launch timed. Throws like the step.
void eager_runs(const std::function<std::vector<Tensor>()>& step, const ProfileOptions& options,
                const std::optional<Device>& gpu, std::vector<int64_t>& untimed, std::vector<int64_t>& totals,
                std::vector<std::vector<EagerTimer::Launch>>& runs) {
  std::optional<CudaLaunchTimer> gpu_timer;
  if (gpu.has_value()) gpu_timer.emplace(*gpu);
  for (int r = 0; r < options.warmup_runs; ++r) step();
  synchronize_gpu(gpu);
  for (int64_t& t : untimed) {
    const int64_t t0 = now_ns();
    step();
    synchronize_gpu(gpu);
    t = now_ns() - t0;
  }
  for (int r = 0; r < options.runs; ++r) {
    totals[r] = timed_eager_run(step, gpu, gpu_timer ? &*gpu_timer : nullptr, r > 0 ? runs[r - 1].size() : 0,
                                runs[r]);
  }
}

// The nodes of the representative run `rep`, one stream per device in the
// order the devices first launched (the profile's device first).
void fill_eager_nodes(std::vector<std::vector<EagerTimer::Launch>>& runs, size_t rep, StepProfile& p) {
  std::vector<Device> stream_devices;
  auto stream_of = [&](Device d) {
    auto it = std::find(stream_devices.begin(), stream_devices.end(), d);
    if (it != stream_devices.end()) return static_cast<int>(it - stream_devices.begin());
    stream_devices.push_back(d);
    p.streams.push_back(absl::StrCat(d.str(), " stream"));
    return static_cast<int>(stream_devices.size()) - 1;
  };
  (void)stream_of(runs[rep].empty() ? kCPU : runs[rep].front().device);
  std::vector<std::vector<int64_t>> durations(runs.size());
  for (size_t r = 0; r < runs.size(); ++r) {
    for (const EagerTimer::Launch& l : runs[r]) durations[r].push_back(l.end - l.start);
  }
  absl::flat_hash_map<uint64_t, int64_t> last_writer;   // Storage::id() -> launch
  for (size_t i = 0; i < runs[rep].size(); ++i) {
    EagerTimer::Launch& l = runs[rep][i];
    std::vector<int64_t> producers;
    for (uint64_t id : l.read_ids) {
      auto it = last_writer.find(id);
      producers.push_back(it == last_writer.end() ? -1 : it->second);
    }
    for (uint64_t id : l.write_ids) last_writer[id] = static_cast<int64_t>(i);
    p.nodes.push_back({.node = static_cast<int64_t>(i), .launch = static_cast<int64_t>(i), .op = l.op,
                       .phase = phase_name(l.phase), .stream = stream_of(l.device), .start_ns = l.start,
                       .duration_ns = l.end - l.start, .read_bytes = std::move(l.read_bytes),
                       .write_bytes = std::move(l.write_bytes), .reads_from = distinct_producers(producers)});
  }
  fill_medians(durations, p);
}

}  // namespace

absl::StatusOr<StepProfile> profile_eager(const std::function<std::vector<Tensor>()>& step,
                                          const ProfileOptions& options) {
  if (absl::Status s = check_options(options); !s.ok()) return s;
  const std::optional<Device> gpu = usable_gpu();
  for (const std::optional<Device>& d : {std::optional<Device>(kCPU), gpu}) {
    if (d.has_value() && current_stream(*d).observer() != nullptr) {
      return absl::FailedPreconditionError(absl::StrCat("profile_eager: the ", d->str(),
                                                        " stream already has an observer (inside capture?)"));
    }
  }
  std::vector<int64_t> untimed(options.runs), totals(options.runs);
  std::vector<std::vector<EagerTimer::Launch>> runs(options.runs);
  absl::Status thrown = status_of([&] { eager_runs(step, options, gpu, untimed, totals, runs); });
  if (!thrown.ok()) return thrown;
  const size_t rep = median_index(totals);
  // The profile's device: where the representative run's first launch ran.
  const Device device = runs[rep].empty() ? kCPU : runs[rep].front().device;
  StepProfile p{.mode = "eager", .device = device.str()};
  fill_step_stats(untimed, p);
  fill_eager_nodes(runs, rep, p);
  p.timed_step_ns = totals[rep];
  p.timer_ns = device.is_cpu() ? timer_cost_ns() : 0;
  p.runs = options.runs;
  return p;
}

namespace {
// a + b for times >= 0, held at INT64_MAX instead of overflowing (signed
// overflow is undefined, and wrapped to a negative total besides).
int64_t add_ns(int64_t a, int64_t b) {
  return b > 0 && a > std::numeric_limits<int64_t>::max() - b ? std::numeric_limits<int64_t>::max() : a + b;
}
}  // namespace

ProfileSummary summarize(const StepProfile& profile, int top) {
  ProfileSummary s{.step_ns = profile.step_ns};
  s.phase_ns = {{"forward", 0}, {"backward", 0}, {"optimizer", 0}};
  std::vector<OpTime> ops;
  int64_t in_kernels = 0;
  for (const NodeTiming& n : profile.nodes) {
    s.kernel_ns = add_ns(s.kernel_ns, n.median_ns);
    in_kernels = add_ns(in_kernels, n.duration_ns);
    // A phase beyond the three (CUDA nodes left unmapped are "unknown")
    // gets its own entry, so that the phases add up to kernel_ns.
    auto phase = std::find_if(s.phase_ns.begin(), s.phase_ns.end(), [&](const auto& e) { return e.first == n.phase; });
    if (phase == s.phase_ns.end()) phase = s.phase_ns.insert(s.phase_ns.end(), {n.phase, 0});
    phase->second = add_ns(phase->second, n.median_ns);
    auto it = std::find_if(ops.begin(), ops.end(), [&](const OpTime& o) { return o.op == n.op; });
    if (it == ops.end()) it = ops.insert(ops.end(), OpTime{n.op, 0, 0});
    it->total_ns = add_ns(it->total_ns, n.median_ns);
    ++it->count;
  }
  s.outside_kernels_ns = std::max<int64_t>(0, profile.timed_step_ns - in_kernels);
  std::stable_sort(ops.begin(), ops.end(), [](const OpTime& a, const OpTime& b) { return a.total_ns > b.total_ns; });
  if (static_cast<int>(ops.size()) > top) ops.resize(std::max(top, 0));
  s.top_ops = std::move(ops);
  return s;
}

std::string cuda_profiling_status() {
#ifdef ENCORE_HAVE_CUDA
  if (!cuda_available()) return "cuda: backend built, no GPU available: nothing to profile on CUDA";
  return "cuda: GPU available: replays timed per graph node with CUPTI activity records (wall clock per replay "
         "where CUPTI is unavailable), eager launches with CUDA events";
#else
  return "cuda: not built (CPU profiling only)";
#endif
}

// A duration with its unit, readable at a glance: "850 ns", "12.3 us" below a
// millisecond (as "\u00b5s"), "1.234 ms" from there on. The unit is the
// rounded value's: 999,950 ns is "1.000 ms", never "1000.0 us".
std::string duration_str(int64_t ns) {
  const double v = static_cast<double>(ns);
  if (ns < 1000) return absl::StrFormat("%d ns", ns);
  if (ns < 999950) return absl::StrFormat("%.1f \u00b5s", v / 1e3);
  return absl::StrFormat("%.3f ms", v / 1e6);
}

namespace {
// duration_str right-aligned in `width` columns ("µs" is two bytes, one column).
std::string duration_col(int64_t ns, size_t width) {
  const std::string d = duration_str(ns);
  size_t columns = 0;
  for (unsigned char c : d) columns += (c & 0xC0) != 0x80;
  return std::string(width > columns ? width - columns : 0, ' ') + d;
}
}  // namespace

std::string format_summary(const StepProfile& profile, int top) {
  const ProfileSummary s = summarize(profile, top);
  auto t = duration_str;
  auto pct = [&](int64_t ns) { return s.kernel_ns > 0 ? 100.0 * static_cast<double>(ns) / s.kernel_ns : 0.0; };
  std::string out = absl::StrFormat(
      "%s (%s): %d nodes; step %s (median of %d untimed runs, min %s, max %s)\n", profile.mode,
      profile.device, profile.nodes.size(), t(s.step_ns), profile.runs, t(profile.step_min_ns),
      t(profile.step_max_ns));
  const bool on_gpu = profile.device != "cpu";
  if (on_gpu) {
    absl::StrAppendFormat(&out, "  kernels %s (sum of node medians, GPU time%s)\n", t(s.kernel_ns),
                          profile.mode == "eager" ? " between events around each launch" : "");
  } else {
    absl::StrAppendFormat(&out, "  kernels %s (sum of node medians, each incl. ~%d ns of timer)\n",
                          t(s.kernel_ns), profile.timer_ns);
  }
  if (profile.mode == "eager") {
    absl::StrAppendFormat(&out, "  timed run %s, of which outside kernels %s (dispatch, autograd, "
                          "allocation, profiler)\n", t(profile.timed_step_ns), t(s.outside_kernels_ns));
  } else if (on_gpu) {
    absl::StrAppendFormat(&out, "  timed run %s (launch to end of synchronize), of which outside GPU nodes %s "
                          "(launch, idle, synchronize)\n", t(profile.timed_step_ns), t(s.outside_kernels_ns));
  } else {
    absl::StrAppendFormat(&out, "  timed run %s (nodes back to back: the replay loop is inside node times)\n",
                          t(profile.timed_step_ns));
  }
  if (!profile.arena_in_use_bytes.empty()) {
    absl::StrAppendFormat(&out, "  arena %d bytes; peak bytes in use %d\n", profile.arena_bytes,
                          *std::max_element(profile.arena_in_use_bytes.begin(), profile.arena_in_use_bytes.end()));
  }
  absl::StrAppendFormat(&out, "  %-10s %11s %7s\n", "phase", "time", "%");
  for (const auto& [name, ns] : s.phase_ns) {
    absl::StrAppendFormat(&out, "  %-10s %s %6.1f%%\n", name, duration_col(ns, 11), pct(ns));
  }
  absl::StrAppendFormat(&out, "  top %d ops by time:\n  %-22s %6s %11s %7s\n", s.top_ops.size(), "op", "nodes",
                        "time", "%");
  for (const OpTime& o : s.top_ops) {
    absl::StrAppendFormat(&out, "  %-22s %6d %s %6.1f%%\n", o.op, o.count, duration_col(o.total_ns, 11),
                          pct(o.total_ns));
  }
  if (!profile.note.empty()) absl::StrAppendFormat(&out, "  note: %s\n", profile.note);
  if (profile.gpu_idle_ns >= 0) {
    absl::StrAppendFormat(&out, "  gpu idle %s between nodes inside one replay (median of %d runs)\n",
                          t(profile.gpu_idle_ns), profile.runs);
  }
  absl::StrAppendFormat(&out, "  %s\n", cuda_profiling_status());
  return out;
}

namespace {

// Thread tracks of one profile's process, top to bottom: phases, ops, then
// one per stream. Track ids double as the sort order (thread_sort_index).
constexpr int kPhaseTrack = 1;
constexpr int kOpTrack = 2;
int stream_track(int stream) { return stream + 3; }

double us(int64_t ns) { return static_cast<double>(ns) / 1e3; }

nlohmann::json node_event(const NodeTiming& n, int pid) {
  return {{"name", n.op}, {"cat", n.phase}, {"ph", "X"}, {"pid", pid}, {"tid", stream_track(n.stream)},
          {"ts", us(n.start_ns)}, {"dur", us(n.duration_ns)},
          {"args", {{"phase", n.phase}, {"node", n.node}, {"launch", n.launch}, {"read_bytes", n.read_bytes},
                    {"write_bytes", n.write_bytes}, {"median_ns", n.median_ns}}}};
}

// An "X" slice on an upper track spanning nodes [first, last] of `p`.
nlohmann::json span_event(const StepProfile& p, size_t first, size_t last, const char* cat, int pid, int tid) {
  const NodeTiming& a = p.nodes[first];
  int64_t end = a.start_ns + a.duration_ns;
  for (size_t i = first; i <= last; ++i) end = std::max(end, p.nodes[i].start_ns + p.nodes[i].duration_ns);
  const char* name = tid == kPhaseTrack ? a.phase : a.op;
  return {{"name", name}, {"cat", cat}, {"ph", "X"}, {"pid", pid}, {"tid", tid}, {"ts", us(a.start_ns)},
          {"dur", us(end - a.start_ns)},
          {"args", {{"phase", a.phase}, {"launch", a.launch}, {"nodes", static_cast<int64_t>(last - first + 1)}}}};
}

// One slice per run of consecutive nodes that share a phase (kPhaseTrack) or
// a launch (kOpTrack).
void append_spans(const StepProfile& p, int pid, int tid, nlohmann::json& events) {
  const char* cat = tid == kPhaseTrack ? "phase" : "op";
  auto same = [tid](const NodeTiming& a, const NodeTiming& b) {
    return tid == kPhaseTrack ? std::string_view(a.phase) == b.phase : a.launch == b.launch;
  };
  for (size_t first = 0; first < p.nodes.size();) {
    size_t last = first;
    while (last + 1 < p.nodes.size() && same(p.nodes[first], p.nodes[last + 1])) ++last;
    events.push_back(span_event(p, first, last, cat, pid, tid));
    first = last + 1;
  }
}

// Flow arrows ("s" at the producer's last node, "f" binding to the enclosing
// slice of the consumer's first node) for every NodeTiming::reads_from.
// Ids are unique across the whole trace (`next_id`).
void append_flows(const StepProfile& p, int pid, int64_t& next_id, nlohmann::json& events) {
  absl::flat_hash_map<int64_t, size_t> first_node, last_node;   // launch -> node index
  for (size_t i = 0; i < p.nodes.size(); ++i) {
    first_node.try_emplace(p.nodes[i].launch, i);
    last_node[p.nodes[i].launch] = i;
  }
  for (size_t to = 0; to < p.nodes.size(); ++to) {
    if (first_node.at(p.nodes[to].launch) != to) continue;
    for (int64_t producer : p.nodes[to].reads_from) {
      auto from = last_node.find(producer);
      if (from == last_node.end()) continue;
      const NodeTiming& a = p.nodes[from->second];
      const NodeTiming& b = p.nodes[to];
      const int64_t id = next_id++;
      events.push_back({{"name", "reads output"}, {"cat", "dependency"}, {"ph", "s"}, {"id", id}, {"pid", pid},
                        {"tid", stream_track(a.stream)}, {"ts", us(a.start_ns)}});
      events.push_back({{"name", "reads output"}, {"cat", "dependency"}, {"ph", "f"}, {"bp", "e"}, {"id", id},
                        {"pid", pid}, {"tid", stream_track(b.stream)}, {"ts", us(b.start_ns)}});
    }
  }
}

nlohmann::json counter_event(int pid, int64_t ts_ns, int64_t bytes) {
  return {{"name", "arena bytes in use"}, {"ph", "C"}, {"pid", pid}, {"tid", 0}, {"ts", us(ts_ns)},
          {"args", {{"bytes", bytes}}}};
}

nlohmann::json metadata(const char* what, int pid, int tid, const std::string& name) {
  return {{"name", what}, {"ph", "M"}, {"pid", pid}, {"tid", tid}, {"args", {{"name", name}}}};
}

// A thread track's name and its place in the process (thread_sort_index).
void append_track(int pid, int tid, const std::string& name, nlohmann::json& events) {
  events.push_back(metadata("thread_name", pid, tid, name));
  events.push_back({{"name", "thread_sort_index"}, {"ph", "M"}, {"pid", pid}, {"tid", tid},
                    {"args", {{"sort_index", tid}}}});
}

}  // namespace

std::string chrome_trace_json(absl::Span<const StepProfile* const> profiles) {
  nlohmann::json events = nlohmann::json::array();
  nlohmann::json summaries = nlohmann::json::array();
  int64_t next_flow_id = 1;
  for (size_t k = 0; k < profiles.size(); ++k) {
    const StepProfile& p = *profiles[k];
    const int pid = static_cast<int>(k) + 1;
    events.push_back(metadata("process_name", pid, 0, absl::StrCat("encore ", p.mode, " (", p.device, ")")));
    append_track(pid, kPhaseTrack, "phases", events);
    append_track(pid, kOpTrack, "ops", events);
    for (size_t s = 0; s < p.streams.size(); ++s) {
      append_track(pid, stream_track(static_cast<int>(s)), p.streams[s], events);
    }
    append_spans(p, pid, kPhaseTrack, events);
    append_spans(p, pid, kOpTrack, events);
    for (const NodeTiming& n : p.nodes) events.push_back(node_event(n, pid));
    append_flows(p, pid, next_flow_id, events);
    if (!p.arena_in_use_bytes.empty()) {
      // One value per launch, at its first node (a launch may be several nodes on CUDA).
      const int64_t launches = static_cast<int64_t>(p.arena_in_use_bytes.size()) - 1;
      int64_t prev = -1, end = 0;
      for (const NodeTiming& n : p.nodes) {
        end = std::max(end, n.start_ns + n.duration_ns);
        if (n.launch < 0 || n.launch >= launches || n.launch == prev) continue;
        events.push_back(counter_event(pid, n.start_ns, p.arena_in_use_bytes[n.launch]));
        prev = n.launch;
      }
      if (!p.nodes.empty()) events.push_back(counter_event(pid, end, p.arena_in_use_bytes.back()));
    }
    const ProfileSummary s = summarize(p);
    nlohmann::json phases = nlohmann::json::object();
    for (const auto& [name, ns] : s.phase_ns) phases[name] = ns;
    summaries.push_back({{"mode", p.mode}, {"device", p.device}, {"step_ns", s.step_ns}, {"kernel_ns", s.kernel_ns},
                         {"outside_kernels_ns", s.outside_kernels_ns}, {"phase_ns", phases}, {"runs", p.runs},
                         {"gpu_idle_ns", p.gpu_idle_ns}, {"note", p.note}});
  }
  nlohmann::json trace = {{"traceEvents", events}, {"displayTimeUnit", "ns"},
                          {"otherData", {{"encore", summaries}, {"cuda", cuda_profiling_status()}}}};
  // Bytes of a string that are not UTF-8 (a note or name with a stray byte)
  // become U+FFFD: the default handler throws instead of writing the trace.
  return trace.dump(1, ' ', /*ensure_ascii=*/false, nlohmann::json::error_handler_t::replace);
}

// A failed write (a full disk, a file size limit) leaves the last good trace
// as it was, not half a JSON file: WriteMode::kAtomicWherePossible (NOTE
// [ Writing a file atomically ] in src/core/atomic_file.cpp), which writes
// /dev/stdout and pipes in place, there being nothing to keep.
absl::Status write_chrome_trace(const std::string& path, absl::Span<const StepProfile* const> profiles) {
  const std::string json = chrome_trace_json(profiles) + "\n";   // before any file is touched
  return write_file_atomically("write_chrome_trace", path, json, WriteMode::kAtomicWherePossible);
}

}  // namespace encore
