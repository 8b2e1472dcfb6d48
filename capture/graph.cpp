// Graph: replay and the read-only view of what capture() recorded
// (include/encore/capture.h, capture/graph_impl.h).
#include <algorithm>
#include <cstring>

#include "capture/graph_impl.h"
#include "capture/launch_match.h"
#include "encore/error.h"
#include "absl/functional/function_ref.h"
#include "absl/strings/str_format.h"
#include "src/core/grad_mode.h"
#include "src/core/phase.h"
#include "src/core/step_observer.h"

namespace encore {

Graph::Graph(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Graph::Graph(Graph&&) noexcept = default;
Graph& Graph::operator=(Graph&&) noexcept = default;
Graph::~Graph() = default;

namespace {
constexpr char kMovedFrom[] = "this Graph was moved from (std::move); use the Graph it was moved into";
}  // namespace

absl::Status Graph::replay() {
  if (!impl_) return absl::FailedPreconditionError(absl::StrCat("replay: ", kMovedFrom));
  if (absl::Status s = impl_->check_inputs(); !s.ok()) return s;
  return impl_->replay_once().status;
}

absl::Status Graph::replay(absl::Span<const Tensor> data) {
  if (!impl_) return absl::FailedPreconditionError(absl::StrCat("replay: ", kMovedFrom));
  if (absl::Status s = capture_internal::refuse_replay_inside_capture(); !s.ok()) return s;   // before any copy
  const std::vector<Tensor>& inputs = impl_->inputs;
  if (data.size() != inputs.size()) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "replay: given %d tensors for the graph's %d inputs (CaptureOptions::inputs)", data.size(), inputs.size()));
  }
  for (size_t i = 0; i < data.size(); ++i) {
    if (!data[i].defined() || data[i].shape() != inputs[i].shape() || data[i].dtype() != inputs[i].dtype() ||
        data[i].device() != inputs[i].device()) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "replay: input %d is %s, the step was captured with %s %s %s", i,
          data[i].defined() ? absl::StrCat(shape_str(data[i].shape()), " ", std::string(dtype_name(data[i].dtype())),
                                           " ", data[i].device().str())
                            : std::string("undefined"),
          shape_str(inputs[i].shape()), dtype_name(inputs[i].dtype()), inputs[i].device().str()));
    }
  }
  // The data goes into the captured tensors: what the variables hold now no longer matters.
  if (absl::Status s = impl_->check_guards(); !s.ok()) return s;
  absl::Status copied = status_of([&] {
    for (size_t i = 0; i < data.size(); ++i) {
      Tensor dst = inputs[i];
      dst.copy_(data[i].detach());
    }
  });
  if (!copied.ok()) return copied;
  return impl_->replay_once().status;
}

std::vector<FrozenValue> Graph::frozen() const {
  std::vector<FrozenValue> out;
  const std::vector<capture_internal::KernelRecord>& kernels = internals().trace.kernels;
  for (size_t k = 0; k < kernels.size(); ++k) {
    for (auto& [name, value] : capture_internal::frozen_values(kernels[k])) {
      out.push_back({k, kernels[k].op, phase_name(kernels[k].phase), std::move(name), std::move(value)});
    }
  }
  return out;
}

const Tensor& Graph::output(size_t i) const {
  ENCORE_CHECK(i < internals().outputs.size(), "Graph::output: index %d out of range (%d outputs)", i,
               impl_->outputs.size());
  ENCORE_CHECK_CODE(impl_->replayed, kFailedPrecondition,
                    "Graph::output: no replay has run yet, so output %d holds nothing (capture() records the "
                    "step; its capture run computes nothing): call replay() first",
                    i);
  return impl_->outputs[i].get();
}
size_t Graph::num_outputs() const { return internals().outputs.size(); }
const CaptureStats& Graph::stats() const { return internals().stats; }
const std::vector<planner::Buffer>& Graph::buffers() const { return internals().buffers; }
absl::Status Graph::dump_dot(const std::string& path) const {
  if (!impl_) return absl::FailedPreconditionError(absl::StrCat("dump_dot: ", kMovedFrom));
  return impl_->executable->dump_dot(path, impl_->trace);
}
Graph::Impl& Graph::internals() const {
  ENCORE_CHECK_CODE(impl_ != nullptr, kFailedPrecondition, "Graph: %s", kMovedFrom);
  return *impl_;
}

// ---- Graph::Impl ----

namespace capture_internal {
std::string owner_str(const TensorImpl& owner) {
  return absl::StrFormat("%s %s parameter", shape_str(owner.shape), dtype_name(owner.dtype));
}

LeafState leaf_state(const TensorImpl& leaf) {
  const AutogradMeta* m = leaf.autograd.get();
  LeafState st;
  if (m == nullptr) return st;
  st.has_grad = m->grad.defined();
  if (st.has_grad) {
    st.grad_storage = m->grad.storage()->id();
    st.grad_offset = m->grad.storage_offset();
  }
  st.requires_grad = m->requires_grad;
  st.hooks_key = m->hooks_key;
  return st;
}
}  // namespace capture_internal

namespace {
using capture_internal::owner_str;

// NOTE [ Host state as a precondition ]: a HostFlag (a module's training mode) as the graph needs it.
absl::Status check_flag(const capture_internal::HostCondition& c, const capture_internal::HoldCheck& held) {
  const HostFlag& f = *c.flag;
  if (!held.elsewhere(c.flag)) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "replay: the owner of %s, which the captured step reads (in %s, from kernel #%d), was destroyed since "
        "capture; capture again with the objects the step uses now",
        f.what, phase_name(c.phase), c.kernel));
  }
  if (!c.has_pre || f.value == c.pre) return absl::OkStatus();
  return absl::FailedPreconditionError(absl::StrFormat(
      "replay: the captured step read %s as %s (in %s, from kernel #%d), but it is %s now: an eager step would "
      "launch other kernels. Set it back before replay(), or capture a graph for each setting (GraphedStep: a "
      "key per setting)",
      f.what, c.pre ? f.when_true : f.when_false, phase_name(c.phase), c.kernel,
      f.value ? f.when_true : f.when_false));
}

// NOTE [ Host state as a precondition ]: the lazy zero_grad flag as the graph needs it.
absl::Status check_condition(const capture_internal::HostCondition& c, const capture_internal::HoldCheck& held) {
  if (c.flag) return check_flag(c, held);
  if (!held.elsewhere(c.owner)) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "replay: the %s whose gradient the captured step uses (in %s, from kernel #%d) was freed or replaced "
        "since capture; keep it alive, refill it in place with copy_(), and capture again after changing it",
        owner_str(*c.owner), phase_name(c.phase), c.kernel));
  }
  if (!c.has_pre || c.owner->autograd == nullptr || c.owner->autograd->grad_zero_pending_ == c.pre) {
    return absl::OkStatus();
  }
  if (c.pre) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "replay: the captured step overwrites the gradient of a %s (in %s, from kernel #%d) because zero_grad() "
        "was pending when it was captured, but no zero_grad() is pending now: an eager step would add to the "
        "gradient. Reading .grad() after zero_grad() (to log it, say) fills in the zeros and ends the pending "
        "zero_grad(), as does set_grad(). Call zero_grad() before every replay() as before capture (again after "
        "reading gradients), or inside the captured step, at its start",
        owner_str(*c.owner), phase_name(c.phase), c.kernel));
  }
  return absl::FailedPreconditionError(absl::StrFormat(
      "replay: the captured step adds to the gradient of a %s (in %s, from kernel #%d) because no zero_grad() "
      "was pending when it was captured, but zero_grad() was called since: an eager step would overwrite the "
      "gradient. Call zero_grad() inside the captured step (for accumulation over several graphs, in the first "
      "micro-batch's graph), not between replays",
      owner_str(*c.owner), phase_name(c.phase), c.kernel));
}

// requires_grad_() changed a tensor the step uses since capture (counted per
// storage); it matters only to a step that runs backward.
bool requires_grad_changed(const capture_internal::Guard& g, bool runs_backward) {
  return runs_backward && g.storage->grad_flag_version() != g.grad_flags;
}

// NOTE [ A leaf's gradient state ] (src/core/step_observer.h) as the graph needs it.
// `name` names the leaf, only when a check fails: "parameter 'fc.weight'"
// (CaptureOptions::names) or "[5, 12] f32 parameter".
absl::Status check_leaf(const capture_internal::LeafCondition& c, const capture_internal::HoldCheck& held,
                        bool runs_backward, absl::FunctionRef<std::string()> name) {
  if (!held.elsewhere(c.leaf)) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "replay: the %s whose gradient the captured step uses (in %s, from kernel #%d) was freed or replaced "
        "since capture; keep it alive, refill it in place with copy_(), and capture again after changing it",
        name(), phase_name(c.phase), c.kernel));
  }
  const capture_internal::LeafState now = capture_internal::leaf_state(*c.leaf), &then = c.before;
  if (now.has_grad && !then.has_grad) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "replay: the %s had no gradient when the step was captured (in %s, from kernel #%d), so the captured "
        "step skips it (optimizers and zero_grad() skip a parameter without a gradient), but it has one now: an "
        "eager step would update it. Capture again now that it has a gradient (e.g. after an eager step that "
        "reaches every parameter)",
        name(), phase_name(c.phase), c.kernel));
  }
  if (!now.has_grad && then.has_grad) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "replay: the captured step uses the gradient of the %s (in %s, from kernel #%d), which has none now "
        "(set_grad(Tensor()) since capture?); capture again after dropping gradients",
        name(), phase_name(c.phase), c.kernel));
  }
  if (now.grad_storage != then.grad_storage || now.grad_offset != then.grad_offset) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "replay: the gradient of the %s was replaced since capture (set_grad(); the captured step uses it in %s, "
        "from kernel #%d): the captured step reads and writes the old one, an eager step the new one. Write "
        "into the gradient in place instead, or capture again",
        name(), phase_name(c.phase), c.kernel));
  }
  if (runs_backward && now.requires_grad != then.requires_grad) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "replay: requires_grad of the %s changed since capture (requires_grad_(); the captured step uses it in "
        "%s, from kernel #%d): the captured step computes the gradients it computed then, an eager step would "
        "compute others. Capture again after freezing or unfreezing parameters",
        name(), phase_name(c.phase), c.kernel));
  }
  if (runs_backward && c.accumulates && now.hooks_key != then.hooks_key) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "replay: post-accumulate hooks of the %s were registered or removed since capture (the captured step "
        "accumulates its gradient in %s, from kernel #%d): the captured step runs the hooks it ran then, an "
        "eager step would run the ones it has now. Capture again after changing hooks",
        name(), phase_name(c.phase), c.kernel));
  }
  return absl::OkStatus();
}

// ---- NOTE [ Shadow verification ] ----
// Every verify_every-th replay checks itself against the eager step: the
// state the step touches (every persistent storage the capture run read or
// wrote, byte for byte, and the lazy zero_grad flags) is saved, the graph
// replays, its results are saved, the state before is put back, the step
// runs eagerly, and the two results are compared. The eager step's state
// stays (the outputs are overwritten with its values), so a verified replay
// trains exactly as eager even when the comparison fails.

// The bytes of a whole storage as a tensor that copies them unchanged.
Tensor byte_view(const Ref<Storage>& s) {
  auto impl = make_ref<TensorImpl>();
  impl->storage = s;
  impl->dtype = s->nbytes() % 4 == 0 ? kInt32 : kBool;   // copies of one dtype move bytes (bool: 0 or 1)
  impl->shape = {s->nbytes() / dtype_size(impl->dtype)};
  impl->strides = {1};
  impl->compute_contiguous();
  return Tensor(std::move(impl));
}

std::vector<unsigned char> read_bytes(const Tensor& t) {
  const Tensor h = t.to(kCPU).contiguous();   // waits for the device's stream
  const auto* p = static_cast<const unsigned char*>(h.data_ptr());
  return {p, p + h.numel() * dtype_size(h.dtype())};
}

void write_bytes(const Ref<Storage>& s, const std::vector<unsigned char>& bytes) {
  if (s->device().is_cpu()) {
    std::memcpy(s->data(), bytes.data(), bytes.size());
    return;
  }
  Tensor view = byte_view(s);
  Tensor host = empty(view.shape(), view.dtype());
  std::memcpy(host.data_ptr(), bytes.data(), bytes.size());
  view.copy_(host);
}

// The first byte where a and b differ, or -1.
int64_t first_difference(const std::vector<unsigned char>& a, const std::vector<unsigned char>& b) {
  if (a.size() != b.size()) return 0;
  auto [pa, pb] = std::mismatch(a.begin(), a.end(), b.begin());
  return pa == a.end() ? -1 : pa - a.begin();
}

std::string element_string(const std::vector<unsigned char>& bytes, int64_t element, DType dtype) {
  const ArgField f{"", -1, 0, static_cast<uint8_t>(dtype_size(dtype)), ArgKind::kBits, false, dtype};
  return arg_value_string(f, bytes.data() + element * dtype_size(dtype));
}

}  // namespace

namespace capture_internal {

bool condition_value(const HostCondition& c) {
  if (c.flag) return c.flag->value;
  return c.owner->autograd != nullptr && c.owner->autograd->grad_zero_pending_;
}

void set_condition(const HostCondition& c, bool value) {
  if (c.flag) {
    c.flag->value = value;
  } else if (c.owner->autograd != nullptr) {
    c.owner->autograd->grad_zero_pending_ = value;
  }
}

}  // namespace capture_internal

using capture_internal::condition_value;

capture_internal::ReplayResult Graph::Impl::replay_verified() {
  // The state before.
  std::vector<std::vector<unsigned char>> before;
  for (const capture_internal::Guard& g : guards) before.push_back(read_bytes(byte_view(g.storage.ref())));
  std::vector<bool> flags_before;
  for (const capture_internal::HostCondition& c : conditions) flags_before.push_back(condition_value(c));
  // The replay, and its results. One that met bad data is not compared: the
  // eager step refuses that data on the host (NOTE [ Index checks ]).
  if (capture_internal::ReplayResult r = run_executable(); !r.status.ok()) return r;
  std::vector<std::vector<unsigned char>> replayed_state, replayed_outputs;
  for (const capture_internal::Guard& g : guards) replayed_state.push_back(read_bytes(byte_view(g.storage.ref())));
  for (const capture_internal::HeldTensor& t : outputs) replayed_outputs.push_back(read_bytes(t.get()));
  std::vector<bool> replayed_flags;
  for (const capture_internal::HostCondition& c : conditions) replayed_flags.push_back(condition_value(c));
  // The eager step from the same state.
  for (size_t i = 0; i < guards.size(); ++i) write_bytes(guards[i].storage.ref(), before[i]);
  for (size_t i = 0; i < conditions.size(); ++i) capture_internal::set_condition(conditions[i], flags_before[i]);
  std::vector<Tensor> eager;
  if (absl::Status s = status_of([&] { eager = step(); }); !s.ok()) {
    return {absl::Status(s.code(), absl::StrCat("replay verification: the eager step failed: ", s.message())),
            /*ran=*/true};
  }
  // Compare: outputs, then the persistent state, then the flags.
  std::string diff;
  if (eager.size() != outputs.size()) {
    diff = absl::StrFormat("the eager step returned %d outputs, the graph %d", eager.size(), outputs.size());
  }
  for (size_t i = 0; i < outputs.size() && diff.empty(); ++i) {
    const Tensor& e = eager[i];
    const Tensor& out = outputs[i].get();
    if (e.shape() != out.shape() || e.dtype() != out.dtype()) {
      diff = absl::StrFormat("output %d is %s %s eagerly, %s %s in the graph", i, shape_str(e.shape()),
                             dtype_name(e.dtype()), shape_str(out.shape()), dtype_name(out.dtype()));
      break;
    }
    const std::vector<unsigned char> bytes = read_bytes(e);
    if (const int64_t at = first_difference(replayed_outputs[i], bytes); at >= 0) {
      const int64_t element = at / dtype_size(e.dtype());
      diff = absl::StrFormat("output %d differs from the eager step at element %d: replay %s, eager %s", i, element,
                             element_string(replayed_outputs[i], element, e.dtype()),
                             element_string(bytes, element, e.dtype()));
    }
  }
  for (size_t i = 0; i < guards.size() && diff.empty(); ++i) {
    const std::vector<unsigned char> bytes = read_bytes(byte_view(guards[i].storage.ref()));
    const int64_t at = first_difference(replayed_state[i], bytes);
    if (at < 0) continue;
    auto it = names.find(guards[i].storage->id());
    if (it != names.end()) {
      const int64_t esize = dtype_size(it->second.dtype);
      diff = absl::StrFormat("'%s' differs from the eager step at element %d: replay %s, eager %s", it->second.name,
                             at / esize - it->second.offset, element_string(replayed_state[i], at / esize, it->second.dtype),
                             element_string(bytes, at / esize, it->second.dtype));
    } else {
      diff = absl::StrFormat("%s differs from the eager step at byte %d: replay 0x%02x, eager 0x%02x",
                             describe(*guards[i].storage, guards[i].first_op), at, replayed_state[i][at], bytes[at]);
    }
  }
  for (size_t i = 0; i < conditions.size() && diff.empty(); ++i) {
    if (condition_value(conditions[i]) == replayed_flags[i]) continue;
    if (conditions[i].flag) {
      const HostFlag& f = *conditions[i].flag;
      diff = absl::StrFormat("%s is %s after the replay, %s after the eager step", f.what,
                             replayed_flags[i] ? f.when_true : f.when_false,
                             condition_value(conditions[i]) ? f.when_true : f.when_false);
    } else {
      diff = absl::StrFormat("the lazy zero_grad flag of a %s is %s after the replay, %s after the eager step",
                             owner_str(*conditions[i].owner), replayed_flags[i] ? "set" : "clear",
                             condition_value(conditions[i]) ? "set" : "clear");
    }
  }
  for (size_t i = 0; i < outputs.size() && i < eager.size(); ++i) {
    if (outputs[i].get().storage() != eager[i].storage() && outputs[i].get().shape() == eager[i].shape()) {
      Tensor out = outputs[i].get();
      out.copy_(eager[i].detach());
    }
  }
  if (diff.empty()) return {absl::OkStatus(), /*ran=*/true};
  return {absl::InternalError(absl::StrCat(
              absl::StrFormat("replay verification (replay #%d): ", replays), diff,
              ". The state is now the eager step's. The step depends on something capture() cannot see (host "
              "state that is not a tensor, such as a counter or a file), or encore replayed it wrongly: please "
              "report it")),
          /*ran=*/true};
}

capture_internal::ReplayResult Graph::Impl::replay_once() {
  if (absl::Status s = capture_internal::refuse_replay_inside_capture(); !s.ok()) return {s, /*ran=*/false};
  if (absl::Status s = check_guards(); !s.ok()) return {s, /*ran=*/false};
  if (verify_every > 0 && (replays + 1) % verify_every == 0) return replay_verified();
  return run_executable();
}

capture_internal::ReplayResult Graph::Impl::run_executable() {
  capture_internal::ReplayResult r = executable->replay();
  if (r.ran) {
    ++replays;
    finish_replay();
  }
  return r;
}

// NOTE [ A replay that ran ] (capture/executable.h): also after bad data, a
// replay whose kernels ran leaves the host as the step does; otherwise
// output() would deny a value the arena holds and the next replay's
// preconditions would see the state from before a step that happened.
void Graph::Impl::finish_replay() {
  replayed = true;
  apply_postconditions();
}

absl::Status Graph::Impl::check_inputs() const {
  for (size_t i = 0; i < input_vars.size(); ++i) {
    if (input_vars[i]->defined() && input_vars[i]->impl() == inputs[i].impl()) continue;
    return absl::FailedPreconditionError(absl::StrFormat(
        "replay: input %d was rebound to another tensor since capture (x = next instead of x.copy_(next)); the "
        "graph reads the tensor it held at capture, so this replay would train on old data. Refill it in place "
        "with copy_(), or pass the new data: graph.replay({x, y})",
        i));
  }
  return absl::OkStatus();
}

std::string Graph::Impl::describe(const Storage& s, const char* first_op) const {
  if (auto it = names.find(s.id()); it != names.end()) return absl::StrCat("'", it->second.name, "'");
  return absl::StrFormat("a %d-byte tensor first used by '%s'", s.nbytes(), first_op);
}

void Graph::Impl::apply_postconditions() const {
  for (const capture_internal::HostCondition& c : conditions) {
    if (!c.has_post) continue;
    if (c.flag) {
      write_host_flag(*c.flag, c.post);
    } else if (c.owner->autograd != nullptr) {
      write_grad_zero_pending(*c.owner, c.post);
    }
  }
}

bool Graph::Impl::gradient_state_changed() const {
  const capture_internal::HoldCheck held;
  const bool leaf = std::any_of(leaves.begin(), leaves.end(), [&](const capture_internal::LeafCondition& c) {
    return held.elsewhere(c.leaf) && !check_leaf(c, held, runs_backward, [] { return std::string(); }).ok();
  });
  const bool read = std::any_of(guards.begin(), guards.end(), [&](const capture_internal::Guard& g) {
    return held.elsewhere(g.storage) && requires_grad_changed(g, runs_backward);
  });
  return leaf || read;
}

absl::Status Graph::Impl::check_guards() const {
  // NOTE [ Grad mode ] (src/core/grad_mode.h).
  if (runs_backward && !grad_mode_internal::enabled) {
    return absl::FailedPreconditionError(
        "replay: the captured step runs backward, but grad mode is off on this thread (inside a NoGradGuard): "
        "an eager step would record no graph and its backward() would fail. Replay outside the NoGradGuard");
  }
  // NOTE [ Counting the graphs' own references ] in capture/held.h. The
  // conditions first: a freed parameter is named as one.
  const capture_internal::HoldCheck held;
  for (const capture_internal::LeafCondition& c : leaves) {
    const auto name = [&] {
      const auto named = names.find(c.leaf->storage->id());
      return named != names.end() && named->second.offset == c.leaf->offset
                 ? absl::StrCat("parameter '", named->second.name, "'")
                 : owner_str(*c.leaf);
    };
    if (absl::Status s = check_leaf(c, held, runs_backward, name); !s.ok()) return s;
  }
  for (const capture_internal::HostCondition& c : conditions) {
    if (absl::Status s = check_condition(c, held); !s.ok()) return s;
  }
  for (const capture_internal::Guard& g : guards) {
    // Nothing but graphs holding it means the tensor was freed or its handle
    // now points at other storage.
    if (!held.elsewhere(g.storage)) {
      return absl::FailedPreconditionError(absl::StrFormat(
          "replay: a %d-byte tensor that the captured step uses (first by '%s') was freed or replaced since "
          "capture (a parameter or static input reassigned, moved or dropped?); keep it alive, refill it "
          "in place with copy_(), and capture again after changing it",
          g.storage->nbytes(), g.first_op));
    }
    if (requires_grad_changed(g, runs_backward)) {
      return absl::FailedPreconditionError(absl::StrFormat(
          "replay: requires_grad of %s changed since capture (requires_grad_()); the captured step computes the "
          "gradients it computed then, an eager step would compute others. Capture again after freezing or "
          "unfreezing parameters",
          describe(*g.storage, g.first_op)));
    }
  }
  return absl::OkStatus();
}

absl::Status Graph::Impl::replay_timed(std::vector<int64_t>& stamps) {
  if (absl::Status s = capture_internal::refuse_replay_inside_capture(); !s.ok()) return s;
  if (absl::Status s = check_guards(); !s.ok()) return s;
  capture_internal::ReplayResult r = executable->replay_timed(stamps);
  if (r.ran) finish_replay();
  return r.status;
}

const char* Graph::Impl::node_op(size_t i) const { return trace.kernels.at(i).op; }
const char* Graph::Impl::node_phase(size_t i) const { return phase_name(trace.kernels.at(i).phase); }
const std::vector<int64_t>& Graph::Impl::node_read_bytes(size_t i) const { return trace.kernels.at(i).read_bytes; }
const std::vector<int64_t>& Graph::Impl::node_write_bytes(size_t i) const { return trace.kernels.at(i).write_bytes; }

std::vector<int32_t> Graph::Impl::node_temporaries(size_t i) const {
  const capture_internal::KernelRecord& k = trace.kernels.at(i);
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

}  // namespace encore
