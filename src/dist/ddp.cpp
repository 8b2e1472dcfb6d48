// encore::dist::DistributedDataParallel (include/encore/dist.h).
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "encore/autograd.h"
#include "encore/dist.h"
#include "encore/error.h"
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

DistributedDataParallel::DistributedDataParallel(nn::Module& module, std::shared_ptr<ProcessGroup> group,
                                                 DdpOptions options)
    : module_(module), group_(std::move(group)), options_(options) {
  ENCORE_CHECK(group_ != nullptr, "DistributedDataParallel: the process group is null");
  ENCORE_CHECK(options_.bucket_cap_bytes > 0, "DistributedDataParallel: bucket_cap_bytes is %d; it must be positive",
               options_.bucket_cap_bytes);
  NoGradGuard no_grad;
  params_ = module_.parameters();
  check_reducible();
  for (const Tensor& p : params_) group_->broadcast(p, 0);
  if (options_.broadcast_buffers) {
    for (const auto& [name, b] : module_.named_buffers()) group_->broadcast(b, 0);
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

std::string DistributedDataParallel::parameter_name(int64_t index) const {
  const nn::NamedTensors named = module_.named_parameters();
  return index < static_cast<int64_t>(named.size()) ? named[index].first : absl::StrCat("#", index);
}

DistributedDataParallel::~DistributedDataParallel() {
  for (const auto& b : buckets_) {
    for (size_t k = 0; k < b->params.size(); ++k) autograd::remove_post_accumulate_hook(params_[b->params[k]], b->hook_ids[k]);
  }
}

void DistributedDataParallel::on_gradient(int64_t bucket, int64_t param) {
  if (!sync_) return;
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

void DistributedDataParallel::finish() {
  if (grads_seen_ == 0 && next_launch_ == 0) return;   // nothing in flight
  std::string missing;
  for (const auto& b : buckets_) {
    if (b->launched) {
      dist_internal::launch_wait(group_->id(), b->slot, b->buffer, "ddp.all_reduce");
    } else if (missing.empty() && b->pending > 0) {
      for (int64_t i : b->params) {
        if (!arrived_[i]) {
          missing = parameter_name(i);
          break;
        }
      }
    }
  }
  for (const auto& b : buckets_) {
    b->launched = false;
    b->pending = static_cast<int64_t>(b->params.size());
  }
  arrived_.assign(params_.size(), false);
  const int64_t seen = grads_seen_;
  grads_seen_ = 0;
  next_launch_ = 0;
  ENCORE_CHECK_CODE(missing.empty(), kFailedPrecondition,
                    "DistributedDataParallel::finish on rank %d: backward produced %d of the %d parameter gradients; "
                    "'%s' got none, so its bucket was never all-reduced; every parameter that requires grad must "
                    "take part in each synchronized backward",
                    group_->rank(), seen, grads_total_, missing);
}

std::vector<std::vector<int64_t>> DistributedDataParallel::bucket_parameters() const {
  std::vector<std::vector<int64_t>> out;
  for (const auto& b : buckets_) out.push_back(b->params);
  return out;
}

}  // namespace encore::dist
