// AdamW: Adam with decoupled weight decay. The update is one launch over every
// parameter when they allow it (NOTE [ One AdamW launch ]), else one fused
// kernel per parameter (backend::adamw_update; the element: src/backends/optim_math.h).
#include <cmath>
#include <cstring>
#include <limits>

#include "absl/strings/str_cat.h"
#include "encore/autograd.h"
#include "encore/optim.h"
#include "src/backends/kernels.h"
#include "src/core/phase.h"

namespace encore::optim {
namespace {

// The kernels take eps and weight_decay as f32 arguments: a value past the
// f32 range would become inf there.
AdamWOptions checked(AdamWOptions o) {
  constexpr double kMax = std::numeric_limits<float>::max();
  ENCORE_CHECK(o.beta1 >= 0.0 && o.beta1 < 1.0, "AdamW: beta1 must be in [0, 1), got %g", o.beta1);
  ENCORE_CHECK(o.beta2 >= 0.0 && o.beta2 < 1.0, "AdamW: beta2 must be in [0, 1), got %g", o.beta2);
  // eps = 0 turns every element whose gradient has been 0 so far into 0/0 =
  // NaN at the first step; the kernels add eps in f32, where below ~1.4e-45
  // it is 0 too.
  ENCORE_CHECK(o.eps > 0.0 && o.eps <= kMax && static_cast<float>(o.eps) > 0.0f,
               "AdamW: eps must be finite and > 0 in f32 (e.g. 1e-8), got %g", o.eps);
  ENCORE_CHECK(o.weight_decay >= 0.0 && o.weight_decay <= kMax,
               "AdamW: weight_decay must be finite and >= 0 (as an f32: at most %g), got %g", kMax, o.weight_decay);
  return o;
}

}  // namespace

AdamW::AdamW(std::vector<Tensor> params, AdamWOptions options)
    : Optimizer("AdamW", std::move(params), options.lr),
      options_(checked(options)),
      exp_avg_(params_.size()),
      exp_avg_sq_(params_.size()) {}

// NOTE [ One AdamW launch ]: when every parameter has a dense gradient and
// all share one dtype, step() issues one kernel over all of them (on CUDA one
// kernel node in a captured graph instead of one per parameter). The kernel
// reads a table of the parameters' pointers (backend::AdamWEntry) kept in a
// persistent tensor on their device; it is rebuilt, with a host write, only
// when a pointer changed. Gradients keep their storage across steps
// (NOTE [ Lazy zero_grad ]), so from the second step on it never is, and a
// captured step never contains the rebuild. The element operations are those
// of the per-parameter kernel: the same bits either way.
bool AdamW::can_fuse() const {
  const DType dtype = params_[0].dtype();
  for (const Tensor& p : params_) {
    const Tensor g = p.grad();
    // A gradient on another device than its parameter takes the per-parameter
    // path, which refuses it by name (set_grad checks shape and dtype only).
    if (!g.defined() || !p.is_contiguous() || !g.is_contiguous() || p.dtype() != dtype || g.device() != p.device()) {
      return false;
    }
  }
  return true;
}

void AdamW::update_table() {
  // Storage ids as well as addresses: a gradient freed and replaced by a new
  // storage at the same address (the caching allocator hands the block
  // straight back) must rebuild the read/write lists, which name storages.
  std::vector<uint64_t> key;
  for (size_t i = 0; i < params_.size(); ++i) {
    for (const Tensor& t : {params_[i], params_[i].grad(), exp_avg_[i], exp_avg_sq_[i]}) {
      key.insert(key.end(), {t.storage()->id(), reinterpret_cast<uintptr_t>(t.data_ptr())});
    }
  }
  if (key == table_key_ && table_.defined()) return;
  std::vector<backend::AdamWEntry> rows;
  table_reads_.clear();
  table_writes_.clear();
  int64_t total = 0;
  for (size_t i = 0; i < params_.size(); ++i) {
    const Tensor& p = params_[i];
    const Tensor g = p.grad();
    rows.push_back({static_cast<char*>(p.data_ptr()), static_cast<const char*>(g.data_ptr()),
                    exp_avg_[i].data<float>(), exp_avg_sq_[i].data<float>(), p.numel(), total});
    total += p.numel();
    table_reads_.insert(table_reads_.end(),
                        {p.storage(), g.storage(), exp_avg_[i].storage(), exp_avg_sq_[i].storage()});
    table_writes_.insert(table_writes_.end(), {p.storage(), exp_avg_[i].storage(), exp_avg_sq_[i].storage()});
  }
  static_assert(sizeof(backend::AdamWEntry) % sizeof(int64_t) == 0, "the table is stored as i64 words");
  const int64_t words = static_cast<int64_t>(rows.size() * sizeof(backend::AdamWEntry) / sizeof(int64_t));
  std::vector<int64_t> bits(static_cast<size_t>(words));
  std::memcpy(bits.data(), rows.data(), rows.size() * sizeof(backend::AdamWEntry));
  NoGradGuard no_grad;
  table_ = from_vector<int64_t>(bits, {words}, params_[0].device());   // a host write (see the NOTE)
  table_total_ = total;
  table_key_ = std::move(key);
  table_reads_.insert(table_reads_.end(), {table_.storage(), lr_.storage(), step_.storage()});
}

void AdamW::step() {
  PhaseScope phase(Phase::kOptimizer);   // tags these kernels for profilers (src/core/phase.h)
  bool any_grad = false;
  for (const Tensor& p : params_) any_grad = any_grad || p.grad().defined();
  if (!any_grad) return;   // nothing to update: the step count does not move either
  const Device device = params_[0].device();
  if (!step_.defined()) step_ = zeros({}, kInt64, device);
  // t counts this step before any update reads it (t = 1 on the first step).
  step_.storage()->bump_version();
  backend::increment(step_);
  if (can_fuse()) {
    init_state();
    update_table();
    for (size_t i = 0; i < params_.size(); ++i) {   // NOTE [ Version counter ]: in-place writes
      params_[i].storage()->bump_version();
      exp_avg_[i].storage()->bump_version();
      exp_avg_sq_[i].storage()->bump_version();
    }
    backend::adamw_update_many(table_, static_cast<int64_t>(params_.size()), table_total_, params_[0].dtype(),
                               table_reads_, table_writes_, lr_, step_, options_.beta1, options_.beta2,
                               options_.eps, options_.weight_decay);
    return;
  }
  for (size_t i = 0; i < params_.size(); ++i) {
    const Tensor& p = params_[i];
    const Tensor g = p.grad();
    if (!g.defined()) continue;   // skipped, like PyTorch: its moments stay as they are
    if (!exp_avg_[i].defined()) {
      exp_avg_[i] = zeros(p.shape(), kFloat32, device);
      exp_avg_sq_[i] = zeros(p.shape(), kFloat32, device);
    }
    p.storage()->bump_version();   // NOTE [ Version counter ]: in-place writes
    exp_avg_[i].storage()->bump_version();
    exp_avg_sq_[i].storage()->bump_version();
    backend::adamw_update(p, g, exp_avg_[i], exp_avg_sq_[i], lr_, step_, options_.beta1, options_.beta2,
                          options_.eps, options_.weight_decay);
  }
}

void AdamW::init_state() {
  if (!step_.defined()) step_ = zeros({}, kInt64, params_[0].device());
  for (size_t i = 0; i < params_.size(); ++i) {
    if (exp_avg_[i].defined()) continue;
    exp_avg_[i] = zeros(params_[i].shape(), kFloat32, params_[i].device());
    exp_avg_sq_[i] = zeros(params_[i].shape(), kFloat32, params_[i].device());
  }
}

NamedTensors AdamW::state() const {
  NamedTensors out = Optimizer::state();
  if (step_.defined()) out.emplace_back("step", step_);
  for (size_t i = 0; i < exp_avg_.size(); ++i) {
    if (!exp_avg_[i].defined()) continue;
    out.emplace_back(absl::StrCat("exp_avg.", i), exp_avg_[i]);
    out.emplace_back(absl::StrCat("exp_avg_sq.", i), exp_avg_sq_[i]);
  }
  return out;
}

}  // namespace encore::optim
