// capture(): warm-up, record, plan, capture, and the Graph that replays.
#include "encore/capture.h"

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <optional>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "capture/arena.h"
#include "capture/cpu_graph.h"
#include "capture/cuda_graph.h"
#include "capture/recorder.h"
#include "src/core/allocator.h"
#include "src/core/kernel_errors.h"
#include "src/core/step_observer.h"
#include "src/core/stream.h"

namespace encore {

using capture_internal::ArenaPlan;
using capture_internal::ArenaScope;
using capture_internal::CpuGraph;
using capture_internal::CudaGraph;
using capture_internal::Recorder;
using capture_internal::Trace;

#define ENCORE_RETURN_IF_ERROR(expr)       \
  do {                                     \
    absl::Status encore_status_ = (expr);  \
    if (!encore_status_.ok()) return encore_status_; \
  } while (0)

namespace {

// Bytes each temporary's arena offset is a multiple of: the CPU caching
// allocator's alignment, and on CUDA cudaMalloc's 256 (cuBLAS workspaces and
// vectorised kernels rely on it).
int64_t arena_alignment(Device device) { return device.is_cuda() ? 256 : 64; }

double ms_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

// Returns the step's outputs without their autograd history, so that the
// step's graph (and every tensor it saved) is gone once the step returns.
std::vector<Tensor> run_step(const std::function<std::vector<Tensor>()>& step) {
  std::vector<Tensor> outs = step();
  for (Tensor& t : outs) {
    ENCORE_CHECK(t.defined(), "capture: the step returned an undefined tensor");
    t = t.detach();
  }
  return outs;
}

// A step that reads device data on the host cannot be one graph.
absl::Status host_read_error(const char* op, int64_t kernels_before, const char* last_op) {
  return absl::FailedPreconditionError(
      absl::StrFormat("capture: %s stops for the host inside the captured step (after kernel #%d, '%s'); a "
                      "captured step cannot stop for the host: move the read (or wait) out of the step and read "
                      "graph.output(i) after replay()",
                      op, kernels_before, last_op));
}

// The persistent storages the graph touches, kept alive and checked at replay.
struct Guard {
  Ref<Storage> storage;
  const char* first_op;
};

// Watches the capture run: checks each launch against the recorded warm-up,
// refuses host reads, and on CPU appends the launch to the graph instead of
// running it (on CUDA the launch runs into the capturing stream).
class CaptureObserver final : public StepObserver {
 public:
  CaptureObserver(const Trace& trace, ArenaPlan& plan, int64_t arena_bytes, bool append)
      : trace_(trace), plan_(plan), arena_end_(plan.base + arena_bytes), append_(append) {}

  bool on_launch(const LaunchRecord& launch) override {
    const size_t k = ops.size();
    // The op name too: on CUDA one launcher serves a family of ops (relu and
    // tanh both launch unary_launch, the op travels in the arguments).
    if (k >= trace_.kernels.size() || trace_.kernels[k].thunk != launch.thunk ||
        std::strcmp(trace_.kernels[k].op, launch.op) != 0) {
      throw_error(absl::StatusCode::kFailedPrecondition,
                  absl::StrFormat("capture: kernel #%d differs from the recorded warm-up: the warm-up ran '%s', "
                                  "the capture run issued '%s'; the step must issue the same kernels every time "
                                  "(no data-dependent shapes or control flow)",
                                  k, k < trace_.kernels.size() ? trace_.kernels[k].op : "nothing more", launch.op));
    }
    for (Storage* s : launch.reads) guard(s, launch.op);
    for (Storage* s : launch.writes) guard(s, launch.op);
    if (!append_) CudaGraph::mark_launch();   // NOTE [ CUDA graph nodes and encore launches ]
    if (append_) graph.append(launch);
    ops.push_back(launch.op);
    plan_.kernels_so_far = static_cast<int64_t>(ops.size());
    plan_.last_op = launch.op;
    return !append_;   // CPU: captured, not run; CUDA: runs into the capturing stream
  }

  void on_host_access(const char* op) override {
    throw Error(host_read_error(op, static_cast<int64_t>(ops.size()), plan_.last_op));
  }

  CpuGraph graph;
  std::vector<const char*> ops;
  std::vector<Guard> guards;

 private:
  void guard(Storage* s, const char* op) {
    const char* p = static_cast<const char*>(s->data());
    if (p >= plan_.base && p < arena_end_) return;   // a temporary in the arena
    if (seen_.insert(s).second) guards.push_back({Ref<Storage>(s), op});
  }
  const Trace& trace_;
  ArenaPlan& plan_;
  const char* arena_end_;
  const bool append_;
  absl::flat_hash_set<Storage*> seen_;
};

}  // namespace

// ---- Graph ----

struct Graph::Impl {
  Device device;                       // where the step runs
  Ref<Storage> arena;                  // owns the arena memory (from the caching allocator)
  CpuGraph graph;                      // CPU steps
  std::unique_ptr<CudaGraph> cuda_graph;   // CUDA steps
  std::vector<const char*> ops;        // op of each node
  std::vector<Guard> guards;
  std::vector<Tensor> outputs;
  std::vector<planner::Buffer> buffers;
  std::vector<int64_t> offsets;
  Trace trace;
  CaptureStats stats;
};

Graph::Graph(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Graph::Graph(Graph&&) noexcept = default;
Graph& Graph::operator=(Graph&&) noexcept = default;
Graph::~Graph() = default;

namespace {

absl::Status check_guards(const std::vector<Guard>& guards) {
  for (const Guard& g : guards) {
    // The graph holds one reference; nobody else holding one means the tensor
    // was freed or its handle now points at other storage.
    if (g.storage->use_count() < 2) {
      return absl::FailedPreconditionError(absl::StrFormat(
          "replay: a %d-byte tensor that the captured step uses (first by '%s') was freed or replaced since "
          "capture (a parameter or static input reassigned, moved or dropped?); keep it alive, refill it "
          "in place with copy_(), and capture again after changing it",
          g.storage->nbytes(), g.first_op));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status Graph::replay() {
  ENCORE_RETURN_IF_ERROR(check_guards(impl_->guards));
  if (impl_->cuda_graph != nullptr) {
    // Asynchronous: this replay's reports arrive at the next synchronization,
    // or here at the next replay if it has finished by then.
    if (const uint32_t errors = take_kernel_errors(impl_->device, /*wait=*/false); errors != 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "replay: an earlier replay or step on ", impl_->device.str(), " met bad data: ",
          describe_kernel_errors(errors),
          "; its outputs, gradients and parameter updates used it: check the batches copied into the static "
          "inputs. This replay was not launched"));
    }
    return impl_->cuda_graph->replay();
  }
  (void)take_kernel_errors(kCPU);   // reports from before this replay are not its own
  impl_->graph.replay();
  if (const uint32_t errors = take_kernel_errors(kCPU); errors != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "replay: ", describe_kernel_errors(errors),
        "; this replay's outputs, gradients and parameter updates used bad data: check the batch copied into the "
        "static inputs"));
  }
  return absl::OkStatus();
}

absl::Status Graph::replay_timed(std::vector<int64_t>& stamps) {
  ENCORE_RETURN_IF_ERROR(check_guards(impl_->guards));
  if (impl_->cuda_graph != nullptr) {
    return absl::UnimplementedError("replay_timed: per-node host timing is for CPU graphs; time CUDA graphs with "
                                    "CUPTI or events");
  }
  stamps.resize(impl_->graph.size() + 1);
  impl_->graph.replay_timed(stamps.data());
  return absl::OkStatus();
}

const Tensor& Graph::output(size_t i) const {
  ENCORE_CHECK(i < impl_->outputs.size(), "Graph::output: index %d out of range (%d outputs)", i,
               impl_->outputs.size());
  return impl_->outputs[i];
}
size_t Graph::num_outputs() const { return impl_->outputs.size(); }
const CaptureStats& Graph::stats() const { return impl_->stats; }
const std::vector<planner::Buffer>& Graph::buffers() const { return impl_->buffers; }
const char* Graph::node_op(size_t i) const { return impl_->ops.at(i); }
CudaGraph* Graph::cuda_graph() const { return impl_->cuda_graph.get(); }
const char* Graph::node_phase(size_t i) const { return phase_name(impl_->trace.kernels.at(i).phase); }
const std::vector<int64_t>& Graph::node_read_bytes(size_t i) const { return impl_->trace.kernels.at(i).read_bytes; }
const std::vector<int64_t>& Graph::node_write_bytes(size_t i) const { return impl_->trace.kernels.at(i).write_bytes; }
const std::vector<int64_t>& Graph::arena_offsets() const { return impl_->offsets; }

std::vector<int32_t> Graph::node_temporaries(size_t i) const {
  const capture_internal::KernelRecord& k = impl_->trace.kernels.at(i);
  std::vector<int32_t> out;
  for (const auto* ids : {&k.reads, &k.writes}) {
    for (int32_t id : *ids) {
      if (id != capture_internal::kPersistent) out.push_back(id);
    }
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

absl::Status Graph::dump_dot(const std::string& path) const {
  if (impl_->cuda_graph != nullptr) return impl_->cuda_graph->dump_dot(path);
  std::ofstream out(path);
  if (!out) return absl::NotFoundError(absl::StrCat("dump_dot: cannot open ", path, ": ", std::strerror(errno)));
  out << "digraph encore {\n  node [shape=box, fontname=\"monospace\"];\n";
  absl::flat_hash_map<int32_t, size_t> last_writer;   // temporary id -> kernel
  const auto& kernels = impl_->trace.kernels;
  for (size_t k = 0; k < kernels.size(); ++k) {
    out << "  n" << k << " [label=\"" << k << ": " << kernels[k].op << "\"];\n";
    for (int32_t id : kernels[k].reads) {
      auto it = last_writer.find(id);
      if (id != capture_internal::kPersistent && it != last_writer.end()) {
        out << "  n" << it->second << " -> n" << k << " [label=\"t" << id << "\"];\n";
      }
    }
    for (int32_t id : kernels[k].writes) {
      if (id != capture_internal::kPersistent) last_writer[id] = k;
    }
  }
  out << "}\n";
  return out ? absl::OkStatus() : absl::DataLossError(absl::StrCat("dump_dot: write to ", path, " failed"));
}

// ---- capture ----

namespace {

// Buffers for the planner: one per recorded temporary, live from first to
// last use (outputs to the end of the step).
std::vector<planner::Buffer> lifetimes(const Trace& trace, int64_t alignment) {
  const int64_t end = static_cast<int64_t>(trace.kernels.size()) + 1;
  std::vector<planner::Buffer> buffers;
  buffers.reserve(trace.allocs.size());
  for (size_t i = 0; i < trace.allocs.size(); ++i) {
    const capture_internal::AllocRecord& a = trace.allocs[i];
    const int64_t lower = a.first_use >= 0 ? a.first_use : a.allocated_at;
    const int64_t upper = a.output ? end : (a.last_use >= 0 ? a.last_use : lower) + 1;
    buffers.push_back({.id = absl::StrCat("t", i), .size = a.nbytes, .lower = lower, .upper = upper,
                       .alignment = alignment});
  }
  return buffers;
}

absl::Status check_escapes(const Recorder& rec, const Trace& trace) {
  std::vector<int32_t> escaped = rec.escaped();
  if (escaped.empty()) return absl::OkStatus();
  const capture_internal::AllocRecord& a = trace.allocs[escaped[0]];
  const char* op = a.first_use >= 0 ? trace.kernels[a.first_use].op : "(never used)";
  return absl::FailedPreconditionError(absl::StrFormat(
      "capture: %d tensor(s) allocated inside the step outlive it without being step outputs (the first: %d "
      "bytes, first written by '%s'); a replay would overwrite them. Return them from the step, or copy_() "
      "them into tensors created before capture",
      escaped.size(), a.nbytes, op));
}

// The one device the recorded step ran on (the CPU when it launched nothing).
// A step that launches or allocates on two devices cannot be one graph.
absl::StatusOr<Device> step_device(const Trace& trace) {
  const Device device = trace.kernels.empty() ? kCPU : trace.kernels[0].device;
  for (const capture_internal::KernelRecord& k : trace.kernels) {
    if (k.device != device) {
      return absl::FailedPreconditionError(absl::StrFormat(
          "capture: the step launched '%s' on %s and '%s' on %s; a captured step runs on one device (move "
          "the tensors with .to(device) before capture)",
          trace.kernels[0].op, device.str(), k.op, k.device.str()));
    }
  }
  for (const capture_internal::AllocRecord& a : trace.allocs) {
    if (a.device != device) {
      return absl::FailedPreconditionError(absl::StrFormat(
          "capture: the step runs on %s but allocated %d bytes on %s; a captured step allocates on one device",
          device.str(), a.nbytes, a.device.str()));
    }
  }
  return device;
}

absl::StatusOr<std::unique_ptr<Graph::Impl>> capture_impl(const std::function<std::vector<Tensor>()>& step,
                                                          const CaptureOptions& options) {
  if (options.warmup < 1) return absl::InvalidArgumentError("capture: warmup must be at least 1 (the recorded run)");
  auto impl = std::make_unique<Graph::Impl>();
  auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i + 1 < options.warmup; ++i) run_step(step);

  // 1-2. The recorded warm-up.
  const std::optional<Device> gpu = usable_gpu();
  Recorder rec;
  const int64_t cpu_in_use_before = allocator_stats(kCPU).in_use_bytes;
  const int64_t gpu_in_use_before = gpu.has_value() ? allocator_stats(*gpu).in_use_bytes : 0;
  reset_peak_stats(kCPU);
  if (gpu.has_value()) reset_peak_stats(*gpu);
  (void)take_kernel_errors(kCPU);
  // CUDA reports of earlier eager steps (the warm-ups above) surface here as
  // an error, not in the recorded run (NOTE [ Kernel error words ]).
  if (gpu.has_value()) current_stream(*gpu).synchronize();
  {
    StepObserverScope observe(&rec);
    std::vector<Tensor> outs = run_step(step);
    // Host index checks are off while recording; CUDA kernels never check on the host.
    const uint32_t errors = take_kernel_errors(kCPU) | (gpu.has_value() ? take_kernel_errors(*gpu) : 0u);
    if (errors != 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("capture: in the recorded warm-up step, ", describe_kernel_errors(errors),
                       "; check the batch in the static inputs"));
    }
    for (const Tensor& t : outs) rec.mark_output(t.storage());
    if (rec.first_host_access() != nullptr) {
      const int64_t k = rec.kernels_before_host_access();
      return host_read_error(rec.first_host_access(), k, k > 0 ? rec.trace().kernels[k - 1].op : "(start of step)");
    }
    ENCORE_RETURN_IF_ERROR(check_escapes(rec, rec.trace()));
  }
  impl->trace = std::move(rec.trace());
  absl::StatusOr<Device> device = step_device(impl->trace);
  if (!device.ok()) return device.status();
  impl->device = *device;
  impl->stats.eager_peak_bytes = allocator_stats(impl->device).peak_in_use_bytes -
                                 (impl->device.is_cpu() ? cpu_in_use_before : gpu_in_use_before);
  impl->stats.warmup_ms = ms_since(t0);

  // 3. Plan.
  t0 = std::chrono::steady_clock::now();
  impl->buffers = lifetimes(impl->trace, arena_alignment(impl->device));
  absl::StatusOr<planner::Plan> plan =
      planner::plan_buffers(impl->buffers, {.algorithm = options.planner, .time_limit_s = options.planner_time_limit_s});
  if (!plan.ok()) return plan.status();
  impl->stats.plan_ms = ms_since(t0);
  impl->stats.arena_bytes = plan->peak;
  impl->offsets = plan->offsets;
  impl->stats.lower_bound_bytes = planner::lower_bound(impl->buffers);
  impl->stats.temporaries = static_cast<int64_t>(impl->buffers.size());

  // 4. Capture run into the arena.
  t0 = std::chrono::steady_clock::now();
  const bool on_cpu = impl->device.is_cpu();
  impl->arena = Storage::allocate(std::max<int64_t>(plan->peak, 1), impl->device);
  if (on_cpu) {
    std::memset(impl->arena->data(), 0, static_cast<size_t>(impl->arena->nbytes()));   // touch every page once, now
  }
  ArenaPlan arena{static_cast<char*>(impl->arena->data()), plan->offsets, {}, 0, 0, "(start of step)"};
  for (const auto& a : impl->trace.allocs) arena.sizes.push_back(a.nbytes);
  CaptureObserver cap(impl->trace, arena, impl->arena->nbytes(), /*append=*/on_cpu);
  if (on_cpu) {
    StepObserverScope observe(&cap);
    ArenaScope scope(&arena, impl->device);
    impl->outputs = run_step(step);
  } else {
    ENCORE_RETURN_IF_ERROR(CudaGraph::begin(impl->device, options.programmatic_launch));
    absl::Status run = status_of([&] {
      StepObserverScope observe(&cap);
      ArenaScope scope(&arena, impl->device);
      impl->outputs = run_step(step);
    });
    absl::StatusOr<std::unique_ptr<CudaGraph>> g = CudaGraph::end(impl->device, std::move(run));
    if (!g.ok()) return g.status();
    impl->cuda_graph = std::move(*g);
  }
  if (cap.ops.size() != impl->trace.kernels.size() || arena.next != static_cast<int64_t>(arena.sizes.size())) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "capture: the capture run issued %d kernels and %d allocations, the recorded warm-up %d and %d; the step "
        "must issue the same work every time",
        cap.ops.size(), arena.next, impl->trace.kernels.size(), arena.sizes.size()));
  }
  cap.graph.freeze();
  impl->graph = std::move(cap.graph);
  impl->ops = std::move(cap.ops);
  impl->guards = std::move(cap.guards);
  impl->stats.kernels = static_cast<int64_t>(impl->ops.size());
  impl->stats.capture_ms = ms_since(t0);
  return impl;
}

}  // namespace

absl::StatusOr<Graph> capture(const std::function<std::vector<Tensor>()>& step, const CaptureOptions& options) {
  absl::StatusOr<std::unique_ptr<Graph::Impl>> impl;
  absl::Status thrown = status_of([&] { impl = capture_impl(step, options); });
  if (!thrown.ok()) return thrown;
  if (!impl.ok()) return impl.status();
  return Graph(std::move(*impl));
}

}  // namespace encore
