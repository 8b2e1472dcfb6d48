// capture(): its phases, one function each, in the order of
// include/encore/capture.h: record (warm-up, the last run recorded), plan
// (lifetimes, then the arena), capture (the capture run, matched against the
// recording and taken by the device's Capturer). Graph itself: graph.cpp.
#include "encore/capture.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <optional>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "capture/arena.h"
#include "capture/executable.h"
#include "capture/graph_impl.h"
#include "capture/launch_match.h"
#include "capture/recorder.h"
#include "capture/steps.h"
#include "src/core/allocator.h"
#include "src/core/kernel_errors.h"
#include "src/core/process_agreement.h"
#include "src/core/step_observer.h"
#include "src/core/stream.h"

namespace encore {

using capture_internal::ArenaPlan;
using capture_internal::ArenaScope;
using capture_internal::Capturer;
using capture_internal::Executable;
using capture_internal::Guard;
using capture_internal::Recorder;
using capture_internal::Trace;
using capture_internal::AllocRecord;
using capture_internal::KernelRecord;
using capture_internal::PointerTarget;

#define ENCORE_RETURN_IF_ERROR(expr)       \
  do {                                     \
    absl::Status encore_status_ = (expr);  \
    if (!encore_status_.ok()) return encore_status_; \
  } while (0)

namespace {

using Step = std::function<std::vector<Tensor>()>;

// Bytes each temporary's arena offset is a multiple of: the CPU caching
// allocator's alignment, and on CUDA cudaMalloc's 256 (cuBLAS workspaces and
// vectorised kernels rely on it).
int64_t arena_alignment(Device device) { return device.is_cuda() ? 256 : 64; }

double ms_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

// Returns the step's outputs without their autograd history, so that the
// step's graph (and every tensor it saved) is gone once the step returns.
std::vector<Tensor> run_step(const Step& step) {
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
                      "graph.output(i) after replay(); a host write (set_lr, from_vector, a seed) goes between "
                      "replays, or into a tensor the step reads",
                      op, kernels_before, last_op));
}

// ---- 1. Warm-up, the last run recorded ----

// The caching allocators' in-use peak from construction on, above what was
// in use at construction (the CPU's, and the GPU's when there is one),
// measured without lowering the peak users read (src/core/allocator.h).
class EagerPeak {
 public:
  explicit EagerPeak(const std::optional<Device>& gpu) : cpu_(kCPU) {
    if (gpu.has_value()) gpu_.emplace(*gpu);
  }
  int64_t above_start(Device device) const {
    if (device.is_cpu()) return cpu_.peak_above_start();
    return gpu_.has_value() ? gpu_->peak_above_start() : 0;
  }

 private:
  PeakMeasurement cpu_;
  std::optional<PeakMeasurement> gpu_;
};

// NOTE [ Lazily created state ]: gradients appear in the first backward(),
// optimizer state (moments, momentum buffers, AdamW's parameter table) in
// the first step(). A recorded run that creates them is not a steady step:
// its allocations outlive it, and AdamW builds its table with a host copy.
// capture() names the state and says what to do instead of blaming the
// internals (an escaped tensor, from_vector).
std::string lazy_state_advice(const CaptureOptions& options) {
  return options.warmup >= 2
             ? "a captured step must find them made: create them before capture() and keep them between steps "
               "(zero_grad() keeps gradients; an optimizer keeps its state)"
             : "capture() records its first warm-up run here (warmup = 1): run one eager step before capture(), "
               "or keep CaptureOptions::warmup >= 2 (the default)";
}

absl::Status check_escapes(const Recorder& rec, const Trace& trace, const CaptureOptions& options) {
  std::vector<int32_t> escaped = rec.escaped();
  if (escaped.empty()) return absl::OkStatus();
  // The phase that made each: backward() makes gradients, step() and zero_grad() optimizer state.
  int64_t grads = 0, state = 0;
  int32_t first_lazy = -1;
  for (int32_t id : escaped) {
    const capture_internal::AllocRecord& a = trace.allocs[id];
    const Phase phase = a.first_use >= 0 ? trace.kernels[a.first_use].phase : a.phase;
    if (phase == Phase::kForward) continue;
    (phase == Phase::kBackward ? grads : state) += 1;
    if (first_lazy < 0) first_lazy = id;
  }
  if (first_lazy >= 0) {
    const capture_internal::AllocRecord& a = trace.allocs[first_lazy];
    const char* op = a.first_use >= 0 ? trace.kernels[a.first_use].op : "(never used)";
    return absl::FailedPreconditionError(absl::StrFormat(
        "capture: the recorded warm-up step created %d gradient(s) and %d optimizer state tensor(s) that outlive "
        "it (the first: %d bytes, first written by '%s'); %s",
        grads, state, a.nbytes, op, lazy_state_advice(options)));
  }
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

// One eager run of the step watched by `rec`. Refuses a run whose kernels met
// bad data, that stopped for the host, or that let a temporary escape.
absl::Status recorded_run(const Step& step, const CaptureOptions& options, const std::optional<Device>& gpu,
                          Recorder& rec, std::vector<Tensor>& outs) {
  StepObserverScope observe(&rec);
  outs = run_step(step);
  // Host index checks are off while recording; CUDA kernels never check on the host.
  const uint32_t errors = take_kernel_errors(kCPU) | (gpu.has_value() ? take_kernel_errors(*gpu) : 0u);
  if (errors != 0) {
    return absl::InvalidArgumentError(absl::StrCat("capture: in the recorded warm-up step, ",
                                                   describe_kernel_errors(errors),
                                                   "; check the batch in the static inputs"));
  }
  for (const Tensor& t : outs) rec.mark_output(t.storage());
  if (!rec.refusal().empty()) return absl::FailedPreconditionError(rec.refusal());
  if (rec.first_host_access() != nullptr) {
    const int64_t k = rec.kernels_before_host_access();
    absl::Status s =
        host_read_error(rec.first_host_access(), k, k > 0 ? rec.trace().kernels[k - 1].op : "(start of step)");
    // NOTE [ Lazily created state ]: a first step() may copy host data to build its state.
    if (options.warmup == 1 && rec.host_access_phase() == Phase::kOptimizer) {
      s = absl::FailedPreconditionError(absl::StrCat(
          s.message(), ". It happened inside an optimizer's step() in the first run of the step: if that is the "
          "optimizer creating its state (AdamW copies its parameter table from the host once), ",
          lazy_state_advice(options)));
    }
    return s;
  }
  return check_escapes(rec, rec.trace(), options);
}

// NOTE [ Same step on every rank ]: a hash of what the recorded run
// launched and allocated, the same in every process that ran the same step
// (op names, device, every non-pointer argument byte, operand ids and sizes,
// allocation sizes; never addresses, which differ between processes), FNV-1a
// so that it does not depend on a per-process seed. capture() hands it to
// src/dist/'s agreement hook (src/core/process_agreement.h), which refuses
// a rank whose step differs from the others'.
uint64_t step_fingerprint(const Trace& trace) {
  uint64_t h = 0xcbf29ce484222325ull;   // never 0 in practice: 0 means "this rank failed to record"
  auto mix = [&h](const void* p, size_t n) {
    const auto* b = static_cast<const unsigned char*>(p);
    for (size_t i = 0; i < n; ++i) h = (h ^ b[i]) * 0x100000001b3ull;
  };
  auto mix_int = [&mix](int64_t v) { mix(&v, sizeof(v)); };
  for (const KernelRecord& k : trace.kernels) {
    mix(k.op, std::strlen(k.op) + 1);
    mix_int(static_cast<int64_t>(k.device.type) * 256 + k.device.index);
    for (const ArgField& f : k.fields) {
      if (f.kind == ArgKind::kPointer) continue;
      mix(k.args.data() + f.offset, f.size);
    }
    for (const PointerTarget& t : k.targets) {
      mix_int(t.operand);
      mix_int(t.operand == PointerTarget::kOther ? 0 : t.offset);
    }
    for (int32_t id : k.reads) mix_int(id);
    for (int32_t id : k.writes) mix_int(id);
    for (int64_t b : k.read_bytes) mix_int(b);
    for (int64_t b : k.write_bytes) mix_int(b);
  }
  for (const AllocRecord& a : trace.allocs) mix_int(a.nbytes);
  return h;
}

// Runs the step `eager_runs` times eagerly, then once recorded, whose
// outputs go to `outs`. Fills g.trace, g.device, stats.eager_peak_bytes and
// stats.warmup_ms.
absl::Status record(const Step& step, const CaptureOptions& options, int eager_runs, Graph::Impl& g,
                    std::vector<Tensor>& outs) {
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < eager_runs; ++i) run_step(step);
  const std::optional<Device> gpu = usable_gpu();
  Recorder rec;
  const EagerPeak peak(gpu);
  (void)take_kernel_errors(kCPU);
  // CUDA reports of earlier eager steps (the warm-ups above) surface here as
  // an error, not in the recorded run (NOTE [ Kernel error words ]).
  if (gpu.has_value()) current_stream(*gpu).synchronize();
  // A step that throws is refused like any other recording: it must not
  // skip the agreement below, which the other ranks are waiting in.
  absl::Status recorded;
  if (absl::Status thrown = status_of([&] { recorded = recorded_run(step, options, gpu, rec, outs); });
      !thrown.ok()) {
    recorded = thrown;
  }
  // Every rank takes part in the agreement, also one whose recording was
  // refused (fingerprint 0), so that no rank waits for it in vain.
  const absl::Status agreed = agree_on_step(recorded.ok() ? step_fingerprint(rec.trace()) : 0,
                                            static_cast<int64_t>(rec.trace().kernels.size()));
  ENCORE_RETURN_IF_ERROR(recorded);
  ENCORE_RETURN_IF_ERROR(agreed);
  g.trace = std::move(rec.trace());
  absl::StatusOr<Device> device = step_device(g.trace);
  if (!device.ok()) return device.status();
  g.device = *device;
  g.stats.eager_peak_bytes = peak.above_start(g.device);
  g.stats.warmup_ms = ms_since(t0);
  return absl::OkStatus();
}

// ---- 2-3. Lifetimes and plan ----

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
    // An empty temporary gets a byte of its own: at an address no live
    // buffer covers, a pointer to it is recognised as an empty operand's
    // (launch_match.cpp) in the capture run as in the warm-up.
    buffers.push_back({.id = absl::StrCat("t", i), .size = std::max<int64_t>(a.nbytes, 1), .lower = lower,
                       .upper = upper, .alignment = alignment});
  }
  return buffers;
}

// Places the recorded temporaries in one arena. Fills g.buffers, g.offsets,
// stats.arena_bytes, lower_bound_bytes, temporaries and plan_ms.
// With outputs_apart the step outputs are laid out one after another in a
// region of their own (stats.output_bytes) and the rest planned into the
// arena, which graphs that never run at once can then share (GraphedStep).
absl::Status plan(const CaptureOptions& options, bool outputs_apart, Graph::Impl& g) {
  const auto t0 = std::chrono::steady_clock::now();
  const int64_t alignment = arena_alignment(g.device);
  g.buffers = lifetimes(g.trace, alignment);
  const size_t n = g.buffers.size();
  g.offsets.assign(n, 0);
  g.in_output_region.assign(n, false);
  std::vector<planner::Buffer> arena_buffers;
  std::vector<size_t> index;   // arena_buffers[j] is g.buffers[index[j]]
  int64_t output_bytes = 0;
  for (size_t i = 0; i < n; ++i) {
    if (outputs_apart && g.trace.allocs[i].output) {
      g.in_output_region[i] = true;
      g.offsets[i] = (output_bytes + alignment - 1) / alignment * alignment;
      output_bytes = g.offsets[i] + g.buffers[i].size;
    } else {
      arena_buffers.push_back(g.buffers[i]);
      index.push_back(i);
    }
  }
  absl::StatusOr<planner::Plan> plan = planner::plan_buffers(
      arena_buffers, {.algorithm = options.planner, .time_limit_s = options.planner_time_limit_s});
  if (!plan.ok()) return plan.status();
  for (size_t j = 0; j < index.size(); ++j) g.offsets[index[j]] = plan->offsets[j];
  g.stats.plan_ms = ms_since(t0);
  g.stats.arena_bytes = plan->peak;
  g.stats.planner_stacked = plan->stacked_by_limit;
  g.stats.output_bytes = output_bytes;
  g.stats.lower_bound_bytes = planner::lower_bound(arena_buffers);
  g.stats.temporaries = static_cast<int64_t>(n);
  return absl::OkStatus();
}

// ---- 4. Capture ----

// Watches the capture run: checks each launch against the recorded warm-up,
// guards the persistent storages it touches, refuses host reads, and hands
// the launch to the device's Capturer (CPU: taken into the kernel list, not
// run; CUDA: runs into the capturing stream). The trace, plan and capturer
// are the caller's and outlive it; it updates the plan's message fields.
class CaptureObserver final : public StepObserver, public capture_internal::Refusals {
 public:
  CaptureObserver(const Trace& trace, ArenaPlan& plan, Capturer& capturer)
      : trace_(trace), plan_(plan), capturer_(capturer) {}

  bool on_launch(const LaunchRecord& launch) override {
    const size_t k = launches_;
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
    // Every host value and operand as recorded (capture/launch_match.h).
    temporaries_.clear();
    for (const auto* list : {&launch.reads, &launch.writes}) {
      for (Storage* s : *list) {
        auto it = temporary_ids_.find(s->id());
        temporaries_.push_back(it == temporary_ids_.end() ? capture_internal::kPersistent : it->second);
      }
    }
    if (std::string why = capture_internal::launch_difference(trace_.kernels[k], launch, temporaries_);
        !why.empty()) {
      throw_error(absl::StatusCode::kFailedPrecondition,
                  absl::StrFormat("capture: kernel #%d '%s' (%s) %s", k, launch.op,
                                  phase_name(trace_.kernels[k].phase), why));
    }
    for (Storage* s : launch.reads) guard(s, launch.op);
    for (Storage* s : launch.writes) guard(s, launch.op);
    const bool run_now = capturer_.take(launch);
    plan_.kernels_so_far = static_cast<int64_t>(++launches_);
    plan_.last_op = launch.op;
    return run_now;
  }

  void on_host_access(const char* op) override {
    throw Error(host_read_error(op, static_cast<int64_t>(launches_), plan_.last_op));
  }
  // NOTE [ Host state as a precondition ] (capture/graph_impl.h).
  void on_host_state(TensorImpl& owner, bool write, bool value) override {
    auto [it, added] = condition_index_.try_emplace(&owner, conditions.size());
    if (added) {
      conditions.push_back({.owner = capture_internal::Held<TensorImpl>(&owner), .before = owner.autograd->grad_zero_pending_,
                            .kernel = static_cast<int64_t>(launches_), .phase = current_phase()});
    }
    note(conditions[it->second], write, value);
  }
  void on_host_flag(HostFlag& flag, bool write, bool value) override {
    auto [it, added] = condition_index_.try_emplace(&flag, conditions.size());
    if (added) {
      conditions.push_back({.flag = capture_internal::Held<HostFlag>(&flag), .before = flag.value,
                            .kernel = static_cast<int64_t>(launches_), .phase = current_phase()});
    }
    note(conditions[it->second], write, value);
  }
  // NOTE [ A leaf's gradient state ]: the first report comes before any change.
  void on_leaf_state(TensorImpl& leaf, bool accumulates) override {
    auto [it, added] = leaf_index_.try_emplace(&leaf, leaves.size());
    if (added) {
      leaves.push_back({.leaf = capture_internal::Held<TensorImpl>(&leaf), .before = capture_internal::leaf_state(leaf),
                        .kernel = static_cast<int64_t>(launches_), .phase = current_phase()});
    }
    leaves[it->second].accumulates = leaves[it->second].accumulates || accumulates;
  }
  // Allocations come from the arena in recorded order: the i-th is temporary i.
  void on_allocate(const Storage& storage) override {
    if (plan_.contains(storage.data())) temporary_ids_[storage.id()] = static_cast<int32_t>(plan_.next - 1);
  }

  size_t launches() const { return launches_; }
  std::vector<Guard> guards;   // every persistent storage the run touched, once
  std::vector<capture_internal::HostCondition> conditions;   // every host state the run used, once
  std::vector<capture_internal::LeafCondition> leaves;       // every leaf whose state the run used, once

 private:
  // What the step read first (unless it wrote first) and wrote last.
  static void note(capture_internal::HostCondition& c, bool write, bool value) {
    if (write) {
      c.has_post = true;
      c.post = value;
    } else if (!c.has_post && !c.has_pre) {
      c.has_pre = true;
      c.pre = value;
    }
  }
  void guard(Storage* s, const char* op) {
    if (plan_.contains(s->data())) return;   // a temporary in the arena
    if (seen_.insert(s).second) guards.push_back({capture_internal::Held<Storage>(s), op});
  }
  const Trace& trace_;
  ArenaPlan& plan_;
  Capturer& capturer_;
  size_t launches_ = 0;
  absl::flat_hash_set<Storage*> seen_;
  absl::flat_hash_map<const void*, size_t> condition_index_;   // owner or flag -> conditions[i]
  absl::flat_hash_map<const TensorImpl*, size_t> leaf_index_;   // leaf -> leaves[i]
  absl::flat_hash_map<uint64_t, int32_t> temporary_ids_;   // Storage::id() -> temporary, for arena storages
  std::vector<int32_t> temporaries_;                       // the current launch's operands: temporary or kPersistent
};

// NOTE [ Outputs keep the arena ]: an output the step returned from the
// arena is handed out as a view of the arena storage itself (not of the
// non-owning storage the arena allocator made for it), so a kept output
// handle keeps the arena's memory alive after its Graph is gone: it then
// holds the last replay's values, never another allocation's bytes.
// Persistent outputs (a parameter returned by the step) stay as they are.
Tensor arena_view(const Ref<Storage>& arena, const Tensor& out) {
  if (!arena) return out;
  const char* base = static_cast<const char*>(arena->data());
  const char* p = static_cast<const char*>(out.storage()->data());
  if (p < base || p >= base + arena->nbytes()) return out;
  const int64_t esize = dtype_size(out.dtype());
  ENCORE_CHECK((p - base) % esize == 0, "capture: internal: output at arena byte %d is not aligned to its %s",
               p - base, dtype_name(out.dtype()));
  return capture_internal::view_at(arena, (p - base) / esize + out.storage_offset(), out);
}

// NOTE [ A leaf's gradient state ]: keeps the leaves something besides the
// capture still holds (a leaf made inside the step is made anew each run),
// and refuses a step that leaves one of them changed: a replay runs no host
// code, so it would start from the changed state and not change it again.
absl::Status keep_persistent_leaves(std::vector<capture_internal::LeafCondition>& leaves) {
  std::vector<bool> keep;
  {
    const capture_internal::HoldCheck held;
    for (const capture_internal::LeafCondition& c : leaves) keep.push_back(held.elsewhere(c.leaf));
  }   // the check's lock goes before the dropped leaves' references
  std::vector<capture_internal::LeafCondition> kept;
  for (size_t i = 0; i < leaves.size(); ++i) {
    if (!keep[i]) continue;
    const capture_internal::LeafState after = capture_internal::leaf_state(*leaves[i].leaf);
    const capture_internal::LeafState& before = leaves[i].before;
    if (!(after == before)) {
      const char* what = after.has_grad != before.has_grad || after.grad_storage != before.grad_storage ||
                                 after.grad_offset != before.grad_offset
                             ? "its gradient"
                         : after.requires_grad != before.requires_grad ? "requires_grad"
                                                                       : "its post-accumulate hooks";
      return absl::FailedPreconditionError(absl::StrFormat(
          "capture: the step changes %s of the %s (in %s, from kernel #%d) and leaves it changed; a replay runs "
          "no host code, so it cannot change it again. Make the change between steps, or undo it before the "
          "step returns",
          what, capture_internal::owner_str(*leaves[i].leaf), phase_name(leaves[i].phase), leaves[i].kernel));
    }
    kept.push_back(std::move(leaves[i]));
  }
  leaves = std::move(kept);
  return absl::OkStatus();
}

// Runs the step once more with its allocations served from the planned arena
// (`shared` when given, at least stats.arena_bytes; else a new one) and its
// launches matched and taken by the device's Capturer. Fills g.arena,
// g.output_arena, g.executable, g.outputs, g.guards, g.conditions,
// stats.kernels and stats.capture_ms. The capture run computes nothing and
// leaves the host state it touched (lazy zero_grad flags) as it found it.
absl::Status capture_run(const Step& step, const CaptureOptions& options, Graph::Impl& g,
                         const Ref<Storage>& shared) {
  const auto t0 = std::chrono::steady_clock::now();
  g.arena = shared ? shared : Storage::allocate(std::max<int64_t>(g.stats.arena_bytes, 1), g.device);
  ENCORE_CHECK_CODE(g.arena->nbytes() >= g.stats.arena_bytes && g.arena->device() == g.device, kInternal,
                    "capture: a shared arena of %d bytes on %s for a plan of %d bytes on %s", g.arena->nbytes(),
                    g.arena->device().str(), g.stats.arena_bytes, g.device.str());
  g.output_arena = g.stats.output_bytes > 0 ? Storage::allocate(g.stats.output_bytes, g.device) : Ref<Storage>();
  std::unique_ptr<Capturer> capturer = g.device.is_cpu()
                                           ? capture_internal::make_cpu_capturer()
                                           : capture_internal::make_cuda_capturer(g.device, options.programmatic_launch);
  capturer->prepare_arena(*g.arena);
  if (g.output_arena) capturer->prepare_arena(*g.output_arena);
  if (g.executable) capturer->reuse(std::move(g.executable));   // captured before: update it if it still fits
  ArenaPlan arena;
  for (const Ref<Storage>& r : {g.arena, g.output_arena}) {
    if (r) arena.regions.emplace_back(static_cast<char*>(r->data()), static_cast<char*>(r->data()) + r->nbytes());
  }
  for (size_t i = 0; i < g.trace.allocs.size(); ++i) {
    arena.sizes.push_back(g.trace.allocs[i].nbytes);
    char* base = static_cast<char*>((g.in_output_region[i] ? g.output_arena : g.arena)->data());
    arena.addresses.push_back(base + g.offsets[i]);
  }
  CaptureObserver cap(g.trace, arena, *capturer);
  std::vector<Tensor> outputs;
  absl::StatusOr<std::unique_ptr<Executable>> executable = capturer->capture([&] {
    StepObserverScope observe(&cap);
    ArenaScope scope(&arena, g.device);
    outputs = run_step(step);
  });
  for (const capture_internal::HostCondition& c : cap.conditions) capture_internal::set_condition(c, c.before);
  if (!executable.ok()) return executable.status();
  if (!cap.refusal().empty()) return absl::FailedPreconditionError(cap.refusal());
  if (cap.launches() != g.trace.kernels.size() || arena.next != static_cast<int64_t>(arena.sizes.size())) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "capture: the capture run issued %d kernels and %d allocations, the recorded warm-up %d and %d; the step "
        "must issue the same work every time",
        cap.launches(), arena.next, g.trace.kernels.size(), arena.sizes.size()));
  }
  if (absl::Status s = keep_persistent_leaves(cap.leaves); !s.ok()) return s;
  g.outputs.clear();
  for (const Tensor& t : outputs) g.outputs.emplace_back(arena_view(g.output_arena ? g.output_arena : g.arena, t));
  g.executable = *std::move(executable);
  g.guards = std::move(cap.guards);
  for (Guard& guard : g.guards) guard.grad_flags = guard.storage->grad_flag_version();
  g.conditions = std::move(cap.conditions);
  g.leaves = std::move(cap.leaves);
  g.runs_backward = std::any_of(g.trace.kernels.begin(), g.trace.kernels.end(),
                                [](const auto& k) { return k.phase == Phase::kBackward; });
  g.stats.kernels = static_cast<int64_t>(cap.launches());
  g.stats.capture_ms = ms_since(t0);
  g.stats.instantiate_ms = static_cast<double>(capturer->instantiate_ns()) / 1e6;
  g.stats.updated = capturer->updated();
  return absl::OkStatus();
}

// CaptureOptions::inputs, names and verify_every into the graph. Each input
// must be one of the persistent tensors the capture run read.
absl::Status bind(const Step& step, const CaptureOptions& options, Graph::Impl& g) {
  absl::flat_hash_set<const Storage*> touched;
  for (const Guard& guard : g.guards) touched.insert(guard.storage.get());
  for (size_t i = 0; i < options.inputs.size(); ++i) {
    const Tensor& t = *options.inputs[i];
    if (!touched.contains(t.storage())) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "capture: input %d (%s %s) is not read by the step: pass the variables the step reads its batch from",
          i, shape_str(t.shape()), dtype_name(t.dtype())));
    }
    g.input_vars.push_back(options.inputs[i]);
    g.inputs.push_back(t);
  }
  for (const auto& [name, t] : options.names) {
    if (t.defined()) g.names[t.storage()->id()] = {name, t.dtype(), t.storage_offset()};
  }
  if (options.verify_every > 0) {
    g.step = step;
    g.verify_every = options.verify_every;
  }
  return absl::OkStatus();
}

// NOTE [ Nested captures ]: a capture() inside a step that another capture()
// records or captures cannot work: its runs would allocate from the outer
// arena, and its recorded run would run kernels that the outer capture run
// must only take. So it is refused (the outer capture goes on). Profiling
// inside a captured step is refused the same way (profile_eager); a capture
// inside a profiled step works: its scopes hand back to the profiler.
// A Graph replayed inside a recorded or captured step is refused, and so is
// the outer capture: the replay's kernels never pass the stream, so the
// recorder would not see them and the outer graph would not hold them
// (Graph::replay, refuse_replay_inside_capture). A GraphedStep called there
// runs its step eagerly, where the outer capture sees every kernel.

// The Recorder or CaptureObserver (the observers that can refuse a step)
// watching this thread's step, or nullptr.
StepObserver* capture_observer_here() {
  const Stream& cpu = current_stream(kCPU);   // every StepObserverScope installs on it
  if (!cpu.observed_here()) return nullptr;
  StepObserver* o = cpu.observer();
  return dynamic_cast<capture_internal::Refusals*>(o) != nullptr ? o : nullptr;
}

absl::StatusOr<std::unique_ptr<Graph::Impl>> capture_impl(const Step& step, const CaptureOptions& options) {
  if (options.warmup < 1) return absl::InvalidArgumentError("capture: warmup must be at least 1 (the recorded run)");
  if (options.verify_every < 0) {
    return absl::InvalidArgumentError(
        absl::StrFormat("capture: verify_every is %d; it counts replays (0: never verify)", options.verify_every));
  }
  for (size_t i = 0; i < options.inputs.size(); ++i) {
    if (options.inputs[i] == nullptr || !options.inputs[i]->defined()) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "capture: input %d is %s; inputs are the step's variables (&x), holding tensors made before capture()",
          i, options.inputs[i] == nullptr ? "null" : "an undefined tensor"));
    }
  }
  if (capture_observer_here() != nullptr) {
    return absl::FailedPreconditionError(
        "capture: called inside a step that another capture() is recording or capturing; a captured step cannot "
        "capture a step itself: capture each step on its own, outside the other's step");
  }
  auto g = std::make_unique<Graph::Impl>();
  std::vector<Tensor> recorded_outputs;
  ENCORE_RETURN_IF_ERROR(record(step, options, options.warmup - 1, *g, recorded_outputs));
  ENCORE_RETURN_IF_ERROR(plan(options, /*outputs_apart=*/false, *g));
  ENCORE_RETURN_IF_ERROR(capture_run(step, options, *g, Ref<Storage>()));
  ENCORE_RETURN_IF_ERROR(bind(step, options, *g));
  return g;
}

}  // namespace

namespace capture_internal {

Tensor view_at(const Ref<Storage>& storage, int64_t offset, const Tensor& like) {
  auto impl = make_ref<TensorImpl>();
  impl->storage = storage;
  impl->offset = offset;
  impl->shape = like.shape();
  impl->strides = like.strides();
  impl->dtype = like.dtype();
  impl->compute_contiguous();
  return Tensor(std::move(impl));
}

absl::StatusOr<std::unique_ptr<Graph::Impl>> record_and_plan(const Step& step, const CaptureOptions& options,
                                                             std::vector<Tensor>& outputs) {
  if (capture_observer_here() != nullptr) {
    return absl::FailedPreconditionError(
        "capture: a graphed step called inside a step that capture() is recording or capturing; call it outside");
  }
  auto g = std::make_unique<Graph::Impl>();
  absl::Status s = status_of([&] {
    absl::Status r = record(step, options, 0, *g, outputs);
    if (r.ok()) r = plan(options, /*outputs_apart=*/true, *g);
    if (!r.ok()) throw Error(r);
  });
  if (!s.ok()) return s;
  return g;
}

bool inside_capture() { return capture_observer_here() != nullptr; }

absl::Status refuse_replay_inside_capture() {
  StepObserver* o = capture_observer_here();
  if (o == nullptr) return absl::OkStatus();
  // Refused in the enclosing capture too, so that a step that drops this
  // Status is not captured without the inner graph's work.
  constexpr absl::string_view kWhy =
      "the step replays a Graph; a replay runs its kernels without the stream, so neither the recorded "
      "warm-up nor the captured graph would hold them. Write the inner step's code into the step (it is captured "
      "with the rest), or replay the graphs one after the other outside any step";
  if (auto* r = dynamic_cast<capture_internal::Refusals*>(o)) r->refuse(absl::StrCat("capture: ", kWhy));
  return absl::FailedPreconditionError(
      absl::StrCat("replay: called inside a step that capture() is recording or capturing; ", kWhy));
}

absl::Status capture_into(const Step& step, const CaptureOptions& options, Graph::Impl& g,
                          const Ref<Storage>& shared) {
  absl::Status ran;
  absl::Status thrown = status_of([&] {
    ran = capture_run(step, options, g, shared);
    if (ran.ok()) ran = bind(step, options, g);   // names and verify_every (GraphedStep has no bound inputs)
  });
  return thrown.ok() ? ran : thrown;
}

}  // namespace capture_internal

absl::StatusOr<Graph> capture(const std::function<std::vector<Tensor>()>& step, const CaptureOptions& options) {
  absl::StatusOr<std::unique_ptr<Graph::Impl>> impl;
  absl::Status thrown = status_of([&] { impl = capture_impl(step, options); });
  if (!thrown.ok()) return thrown;
  if (!impl.ok()) return impl.status();
  return Graph(std::move(*impl));
}

}  // namespace encore
