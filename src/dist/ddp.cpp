// encore::dist::DistributedDataParallel (include/encore/dist.h).
#include <algorithm>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "encore/autograd.h"
#include "encore/dist.h"
#include "encore/error.h"
#include "src/autograd/backward_observer.h"
#include "src/core/step_observer.h"
#include "src/dist/collectives.h"

namespace encore::dist {

struct DistributedDataParallel::Bucket {
  Tensor buffer;                  // 1-d, the bucket's gradients one after the other
  std::vector<int64_t> params;    // indices into params_
  std::vector<int64_t> hook_ids;  // one per parameter
  int64_t pending = 0;            // gradients still to come in this backward
  bool launched = false;
  int32_t slot = -1;
};

struct DistributedDataParallel::BufferGroup {
  Tensor flat;                     // 1-d, the buffers one after the other; the buffer itself when alone
  std::vector<Tensor> buffers;     // named_buffers() of flat's dtype and device, in order
  std::vector<std::string> names;
  bool in_place = false;           // flat is the one buffer: no copies
};

DistributedDataParallel::DistributedDataParallel(nn::Module& module, std::shared_ptr<ProcessGroup> group,
                                                 DdpOptions options)
    : module_(module), group_(std::move(group)), options_(options), sync_(make_ref<HostFlag>()) {
  sync_->value = true;
  sync_->what = "the gradient synchronization of a DistributedDataParallel";
  sync_->when_true = "synchronized (outside no_sync())";
  sync_->when_false = "no_sync()";
  ENCORE_CHECK(group_ != nullptr, "DistributedDataParallel: the process group is null");
  ENCORE_CHECK(options_.bucket_cap_bytes > 0, "DistributedDataParallel: bucket_cap_bytes is %d; it must be positive",
               options_.bucket_cap_bytes);
  NoGradGuard no_grad;
  params_ = module_.parameters();
  check_reducible();
  check_same_model_on_every_rank();
  // As PyTorch: with nothing to average, no backward would start a round,
  // and the buffers would never follow rank 0 (NOTE [ Buffers follow rank 0 ]).
  // After the agreement above, so that every rank refuses alike.
  ENCORE_CHECK_CODE(std::any_of(params_.begin(), params_.end(), [](const Tensor& p) { return p.requires_grad(); }),
                    kInvalidArgument,
                    "DistributedDataParallel on rank %d: the module has no parameter that requires grad (%d "
                    "parameters, all frozen or none); there is nothing to average. Call the module directly",
                    group_->rank(), params_.size());
  for (const Tensor& p : params_) group_->broadcast(p, 0);
  if (options_.broadcast_buffers) {
    group_buffers();
    sync_buffers();
  }
  // Buckets in reverse registration order: backward produces the last layers' gradients first.
  std::vector<std::vector<int64_t>> layout;
  int64_t bytes = 0;
  for (int64_t i = static_cast<int64_t>(params_.size()) - 1; i >= 0; --i) {
    const Tensor& p = params_[i];
    if (!p.requires_grad()) continue;
    const int64_t nbytes = p.numel() * dtype_size(p.dtype());
    const bool fits = !layout.empty() && bytes + nbytes <= options_.bucket_cap_bytes &&
                      params_[layout.back()[0]].dtype() == p.dtype() &&
                      params_[layout.back()[0]].device() == p.device();
    if (!fits) {
      layout.emplace_back();
      bytes = 0;
    }
    layout.back().push_back(i);
    bytes += nbytes;
  }
  for (size_t b = 0; b < layout.size(); ++b) {
    auto bucket = std::make_unique<Bucket>();
    int64_t numel = 0;
    for (int64_t i : layout[b]) numel += params_[i].numel();
    const Tensor& first = params_[layout[b][0]];
    bucket->buffer = zeros({numel}, first.dtype(), first.device());
    bucket->params = layout[b];
    bucket->slot = dist_internal::reserve_slot(group_->id());
    int64_t offset = 0;
    for (int64_t i : layout[b]) {
      Tensor& p = params_[i];
      Tensor view = bucket->buffer.slice(0, offset, offset + p.numel()).view(p.shape());
      offset += p.numel();
      const Tensor old = p.grad();
      if (old.defined()) view.copy_(old);
      p.set_grad(view);   // gradient_as_bucket_view: backward accumulates into the bucket
      if (!old.defined()) autograd::zero_grad(p);
      const int64_t bi = static_cast<int64_t>(b);
      bucket->hook_ids.push_back(
          autograd::register_post_accumulate_hook(p, [this, bi, i](const Tensor&) { on_gradient(bi, i); }));
    }
    bucket->pending = static_cast<int64_t>(bucket->params.size());
    grads_total_ += bucket->pending;
    buckets_.push_back(std::move(bucket));
  }
  arrived_.assign(params_.size(), false);
  observer_id_ = autograd::add_backward_observer([this](autograd::BackwardEvent e) {
    switch (e) {
      case autograd::BackwardEvent::kBegin: on_backward_begin(); break;
      case autograd::BackwardEvent::kEnd: on_backward_end(); break;
      case autograd::BackwardEvent::kAbort: on_backward_abort(); break;
    }
  });
}

// The CPU all-reduce is MPI's, which sums float32 (collectives.cpp): refuse
// other gradient dtypes here, naming the parameter, rather than inside the
// first backward's hook.
void DistributedDataParallel::check_reducible() const {
  for (size_t i = 0; i < params_.size(); ++i) {
    const Tensor& p = params_[i];
    if (!p.requires_grad() || !p.device().is_cpu() || p.dtype() == kFloat32) continue;
    throw_error(absl::StatusCode::kInvalidArgument,
                absl::StrFormat("DistributedDataParallel on rank %d: parameter '%s' is %s on the CPU, but MPI "
                                "all-reduces float32 gradients only; keep the CPU parameters that require grad in "
                                "float32 (or freeze this one with requires_grad_(false))",
                                group_->rank(), parameter_name(static_cast<int64_t>(i)), dtype_name(p.dtype())));
  }
}

// One BufferGroup per (dtype, device) of the buffers, in named_buffers()
// order; a group of one contiguous buffer broadcasts it in place.
void DistributedDataParallel::group_buffers() {
  for (const auto& [name, buffer] : module_.named_buffers()) {
    const Tensor& b = buffer;   // clang before 16 lets no lambda capture a structured binding
    auto same = [&](const std::unique_ptr<BufferGroup>& g) {
      return g->buffers[0].dtype() == b.dtype() && g->buffers[0].device() == b.device();
    };
    auto it = std::find_if(buffer_groups_.begin(), buffer_groups_.end(), same);
    if (it == buffer_groups_.end()) {
      buffer_groups_.push_back(std::make_unique<BufferGroup>());
      it = buffer_groups_.end() - 1;
    }
    (*it)->buffers.push_back(b);
    (*it)->names.push_back(name);
  }
  for (const auto& g : buffer_groups_) {
    const Tensor& first = g->buffers[0];
    g->in_place = g->buffers.size() == 1 && first.is_contiguous();
    if (g->in_place) {
      g->flat = first.view({first.numel()});
      continue;
    }
    int64_t numel = 0;
    for (const Tensor& b : g->buffers) numel += b.numel();
    g->flat = zeros({numel}, first.dtype(), first.device());
  }
}

// NOTE [ Buffers follow rank 0 ]: PyTorch's DDP broadcasts rank 0's buffers
// before every forward (broadcast_buffers=True), so that batch norm's
// running statistics, which each rank updates from its own batch, do not
// drift apart. Before, this wrapper broadcast them at construction only:
// each rank's statistics followed its own shard, and evaluation or a
// checkpoint gave a different model on every rank, without a word. This
// wrapper never sees the forward (users call the module's own forward or
// loss), so it broadcasts at the end of every synchronized backward (kEnd
// of the backward observer, once the round averaged every gradient):
// rank 0 only sends, so its buffers evolve exactly as under PyTorch, and
// every other rank starts each later forward from rank 0's values, as
// under PyTorch; in addition every rank holds them right after the step.
// kEnd, not kBegin: a backward may read a buffer its forward saved, and
// must read the values the forward used. Where the two placements differ
// (a training-mode forward that no synchronized backward follows, under
// NoGradGuard or no_sync()), PyTorch skips its broadcast too after the
// first such forward (its require_forward_param_sync), and each rank's
// buffers move on their own until the next synchronized step. As
// PyTorch's _broadcast_coalesced, the buffers of one dtype and device go
// in one broadcast: copied into a persistent flat tensor, broadcast, and
// copied back (on rank 0 too, so that every rank records the same kernels
// in a captured step, whose replays repeat all of it).
void DistributedDataParallel::sync_buffers() {
  NoGradGuard no_grad;
  for (const auto& g : buffer_groups_) {
    for (size_t k = 0; k < g->buffers.size(); ++k) {
      const Tensor& b = g->buffers[k];
      ENCORE_CHECK_CODE(b.dtype() == g->flat.dtype() && b.device() == g->flat.device(), kFailedPrecondition,
                        "DistributedDataParallel on rank %d: buffer '%s' is %s on %s, but was %s on %s when the "
                        "wrapper was made; move or convert the module before wrapping it",
                        group_->rank(), g->names[k], dtype_name(b.dtype()), b.device().str(),
                        dtype_name(g->flat.dtype()), g->flat.device().str());
    }
    if (!g->in_place) {
      int64_t offset = 0;
      for (const Tensor& b : g->buffers) {
        g->flat.slice(0, offset, offset + b.numel()).view(b.shape()).copy_(b);
        offset += b.numel();
      }
    }
    dist_internal::launch_collective(group_->id(), dist_internal::CollKind::kBroadcast, g->flat, ReduceOp::kSum, 0,
                                     "ddp.broadcast_buffers");
    if (!g->in_place) {
      int64_t offset = 0;
      for (const Tensor& b : g->buffers) {
        Tensor(b).copy_(g->flat.slice(0, offset, offset + b.numel()).view(b.shape()));
        offset += b.numel();
      }
    }
  }
  if (!buffer_groups_.empty()) counters_.buffer_broadcasts += 1;
}

namespace {

// FNV-1a of a string: the same on every rank (absl::Hash is seeded per process).
uint64_t fnv(const std::string& s, uint64_t h = 0xcbf29ce484222325ull) {
  for (unsigned char c : s) h = (h ^ c) * 0x100000001b3ull;
  return h;
}

// What a rank's buckets and broadcasts depend on, for one tensor: shape,
// dtype, device type (not the index: local ranks differ) and requires_grad.
std::string layout_of(const Tensor& t) {
  return absl::StrFormat("%s %s on %s%s", shape_str(t.shape()), dtype_name(t.dtype()),
                         t.device().is_cpu() ? "cpu" : "cuda", t.requires_grad() ? "" : " (requires_grad false)");
}

}  // namespace

// NOTE [ Same model on every rank ]: the constructor's broadcasts and the
// buckets' all-reduces pair up across ranks only if every rank wraps the same
// parameters (shapes, dtypes, which require grad) and buffers with the same
// options. Before, a rank that froze one more parameter, or whose model had
// another shape, laid out other buckets: the ranks' all-reduces then had
// different counts, and one rank averaged mismatched gradients without an
// error while the other failed with MPI_ERR_TRUNCATE. So the ranks compare a
// fingerprint of the layout first (one gather), and on a difference find the
// first entry that differs (more gathers, every rank alike) and refuse it on
// every rank, as torch's DDP does (_verify_param_shape_across_processes).
void DistributedDataParallel::check_same_model_on_every_rank() {
  std::vector<std::string> entries;
  entries.push_back(absl::StrCat("bucket_cap_bytes ", options_.bucket_cap_bytes, ", broadcast_buffers ",
                                 options_.broadcast_buffers ? "true" : "false"));
  const nn::NamedTensors named = module_.named_parameters();
  for (const auto& [name, p] : named) entries.push_back(absl::StrCat("parameter '", name, "': ", layout_of(p)));
  if (options_.broadcast_buffers) {
    for (const auto& [name, b] : module_.named_buffers()) {
      entries.push_back(absl::StrCat("buffer '", name, "': ", layout_of(b)));
    }
  }
  uint64_t h = fnv(absl::StrCat(entries.size()));
  for (const std::string& e : entries) h = fnv(e, h);
  std::vector<uint64_t> all = group_->all_gather(h);
  if (std::all_of(all.begin(), all.end(), [&](uint64_t v) { return v == all[0]; })) return;
  // Find the first entry that differs: the counts, then entry by entry up to the smallest count.
  const std::vector<uint64_t> counts = group_->all_gather(entries.size());
  const uint64_t n = *std::min_element(counts.begin(), counts.end());
  std::string mine = absl::StrCat(entries.size(), " parameters, buffers and options");
  std::vector<uint64_t> at;
  for (uint64_t i = 0; i < n; ++i) {
    at = group_->all_gather(fnv(entries[i]));
    if (std::any_of(at.begin(), at.end(), [&](uint64_t v) { return v != at[0]; })) {
      mine = entries[i];
      break;
    }
    at.clear();
  }
  const std::vector<uint64_t>& differing = at.empty() ? all : at;
  std::vector<std::string> ranks;
  for (size_t r = 0; r < differing.size(); ++r) {
    if (differing[r] != differing[0]) ranks.push_back(absl::StrCat(r));
  }
  throw_error(absl::StatusCode::kFailedPrecondition,
              absl::StrFormat("DistributedDataParallel on rank %d: the ranks wrap different models: rank(s) %s differ "
                              "from rank 0 (here: %s); every rank must wrap the same parameters (shapes, dtypes, which "
                              "require grad) and buffers with the same DdpOptions, or their all-reduces would not "
                              "match",
                              group_->rank(), absl::StrJoin(ranks, ", "), mine));
}

std::string DistributedDataParallel::parameter_name(int64_t index) const {
  const nn::NamedTensors named = module_.named_parameters();
  return index < static_cast<int64_t>(named.size()) ? named[index].first : absl::StrCat("#", index);
}

DistributedDataParallel::~DistributedDataParallel() {
  autograd::remove_backward_observer(observer_id_);
  // A round an aborted backward left: its all-reduces still use the buckets
  // (the communication thread copies into them), so wait for them first.
  if (round_started()) (void)status_of([&] { drain(); });
  for (const auto& b : buckets_) {
    for (size_t k = 0; k < b->params.size(); ++k) autograd::remove_post_accumulate_hook(params_[b->params[k]], b->hook_ids[k]);
  }
}

// NOTE [ no_sync as host state ]: whether a backward all-reduces is decided
// on the host, in the gradient hooks, so a captured step holds the
// all-reduces or not as its recorded run had them. Before, a step captured
// inside no_sync() (a micro-step of gradient accumulation) replayed outside
// it without any all-reduce, and each rank stepped with its own gradients
// with no error; one captured outside replayed inside still communicated.
// The setting is a HostFlag (NOTE [ Host flags ] in src/core/step_observer.h),
// read by every hook and written by NoSync, so a graph checks it at every
// replay as it does a module's training mode.
DistributedDataParallel::NoSync::NoSync(DistributedDataParallel& ddp) : ddp_(ddp), prev_(ddp.sync_->value) {
  write_host_flag(*ddp.sync_, false);
}
DistributedDataParallel::NoSync::~NoSync() { write_host_flag(*ddp_.sync_, prev_); }

void DistributedDataParallel::on_gradient(int64_t bucket, int64_t param) {
  if (!read_host_flag(*sync_)) return;
  ENCORE_CHECK_CODE(!arrived_[param], kFailedPrecondition,
                    "DistributedDataParallel on rank %d: parameter '%s' received a second gradient in one "
                    "synchronized backward (a backward started inside another, from a hook or a custom backward, "
                    "reached it too); its bucket may already be on its way, so run such backwards under no_sync() "
                    "or outside the synchronized one",
                    group_->rank(), parameter_name(param));
  arrived_[param] = true;
  if (grads_seen_ == 0) counters_.remaining_at_launch.clear();
  ++grads_seen_;
  Bucket& b = *buckets_[bucket];
  if (--b.pending == 0) launch_ready();
}

// Launches the ready buckets in bucket order (every rank issues the same
// collectives in the same order); after the last, waits for all of them.
void DistributedDataParallel::launch_ready() {
  const int64_t n = static_cast<int64_t>(buckets_.size());
  while (next_launch_ < n && buckets_[next_launch_]->pending == 0) {
    Bucket& b = *buckets_[next_launch_];
    dist_internal::launch_start(group_->id(), b.slot, dist_internal::CollKind::kAllReduce, b.buffer,
                                ReduceOp::kAverage, 0, "ddp.all_reduce");
    b.launched = true;
    counters_.launched += 1;
    counters_.remaining_at_launch.push_back(grads_total_ - grads_seen_);
    ++next_launch_;
  }
  if (next_launch_ == n) finish();
}

// NOTE [ An aborted backward ]: a synchronized backward that throws midway
// (a saved tensor changed in place, a hook that threw, memory ran out)
// leaves the round half counted: some gradients arrived, some buckets were
// launched and not waited for. Left so, the next backward would launch
// buckets as soon as last round's missing gradients came, before their
// other gradients, and average stale values: the ranks would drift apart
// with no error. So the wrapper watches each backward as a whole
// (src/autograd/backward_observer.h): kAbort marks the round aborted; the
// next kBegin, before any gradient is accumulated into a bucket, waits for
// the all-reduces the aborted round started (every rank issued the same
// ones if every rank threw at the same point, so they pair up) and starts
// afresh. A loop may therefore catch the error and skip the batch. A
// finish() in between does the same cleanup and then says the backward was
// aborted, since its gradients are not averaged. A rank that throws alone
// leaves the others waiting for collectives it never issues: they fail
// with kDeadlineExceeded and the group is broken. A round that ends
// normally but incomplete (a parameter got no gradient) is refused at kEnd,
// so no optimizer step uses gradients that were never averaged.
void DistributedDataParallel::on_backward_begin() {
  buffers_due_ = false;
  if (round_started()) drain();   // an aborted round that finish() did not clear
}

void DistributedDataParallel::on_backward_end() {
  if (round_started()) finish();   // a parameter got no gradient: finish() names it
  if (buffers_due_) {
    buffers_due_ = false;
    sync_buffers();   // NOTE [ Buffers follow rank 0 ]
  }
}

void DistributedDataParallel::on_backward_abort() {
  buffers_due_ = false;
  if (round_started() && !aborted_) {
    aborted_ = true;
    counters_.aborted_backwards += 1;
  }
}

// Waits for every bucket launched in this round and clears the round, even
// when a wait fails; then rethrows the first failure.
void DistributedDataParallel::drain() {
  absl::Status first;
  for (const auto& b : buckets_) {
    if (!b->launched) continue;
    b->launched = false;
    absl::Status s =
        status_of([&] { dist_internal::launch_wait(group_->id(), b->slot, b->buffer, "ddp.all_reduce"); });
    if (first.ok()) first = s;
  }
  for (const auto& b : buckets_) b->pending = static_cast<int64_t>(b->params.size());
  arrived_.assign(params_.size(), false);
  grads_seen_ = 0;
  next_launch_ = 0;
  aborted_ = false;
  if (!first.ok()) throw Error(first);
}

void DistributedDataParallel::finish() {
  if (!round_started()) return;   // nothing in flight
  std::string missing;
  for (const auto& b : buckets_) {
    for (int64_t i : b->params) {
      if (missing.empty() && !arrived_[i]) missing = parameter_name(i);
    }
  }
  const int64_t seen = grads_seen_;
  const bool aborted = aborted_;
  drain();
  ENCORE_CHECK_CODE(!aborted, kFailedPrecondition,
                    "DistributedDataParallel::finish on rank %d: the last synchronized backward threw after %d of "
                    "the %d parameter gradients (its own error says why); the all-reduces it had started are "
                    "complete and its state is cleared, but its gradients are not averaged: skip this optimizer "
                    "step (the next backward starts afresh)",
                    group_->rank(), seen, grads_total_);
  ENCORE_CHECK_CODE(missing.empty(), kFailedPrecondition,
                    "DistributedDataParallel on rank %d: the synchronized backward produced %d of the %d parameter "
                    "gradients; '%s' got none, so its bucket was never all-reduced; every parameter that requires "
                    "grad must take part in each synchronized backward (freeze unused ones with "
                    "requires_grad_(false))",
                    group_->rank(), seen, grads_total_, missing);
  buffers_due_ = !buffer_groups_.empty();   // the gradients are averaged: the buffers follow at kEnd
}

std::vector<std::vector<int64_t>> DistributedDataParallel::bucket_parameters() const {
  std::vector<std::vector<int64_t>> out;
  for (const auto& b : buckets_) out.push_back(b->params);
  return out;
}

}  // namespace encore::dist
