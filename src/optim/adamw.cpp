// AdamW: Adam with decoupled weight decay. The update itself is one fused
// kernel per parameter (src/backends/cpu/optim.cpp, adamw_kernel).
#include <cmath>

#include "absl/strings/str_cat.h"
#include "encore/optim.h"
#include "src/backends/kernels.h"
#include "src/core/phase.h"

namespace encore::optim {
namespace {

AdamWOptions checked(AdamWOptions o) {
  ENCORE_CHECK(o.beta1 >= 0.0 && o.beta1 < 1.0, "AdamW: beta1 must be in [0, 1), got %g", o.beta1);
  ENCORE_CHECK(o.beta2 >= 0.0 && o.beta2 < 1.0, "AdamW: beta2 must be in [0, 1), got %g", o.beta2);
  ENCORE_CHECK(std::isfinite(o.eps) && o.eps >= 0.0, "AdamW: eps must be finite and >= 0, got %g", o.eps);
  ENCORE_CHECK(std::isfinite(o.weight_decay) && o.weight_decay >= 0.0,
               "AdamW: weight_decay must be finite and >= 0, got %g", o.weight_decay);
  return o;
}

}  // namespace

AdamW::AdamW(std::vector<Tensor> params, AdamWOptions options)
    : Optimizer("AdamW", std::move(params), options.lr),
      options_(checked(options)),
      exp_avg_(params_.size()),
      exp_avg_sq_(params_.size()) {}

void AdamW::step() {
  PhaseScope phase(Phase::kOptimizer);   // tags these kernels for profilers (src/core/phase.h)
  bool any_grad = false;
  for (const Tensor& p : params_) any_grad = any_grad || p.grad().defined();
  if (!any_grad) return;   // nothing to update: the step count does not move either
  const Device device = params_[0].device();
  if (!step_.defined()) step_ = zeros({}, kInt64, device);
  // t counts this step before any update reads it (t = 1 on the first step).
  step_.storage()->bump_version();
  ENCORE_KERNEL(step_.device(), increment, step_);
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
    ENCORE_KERNEL(p.device(), adamw_update, p, g, exp_avg_[i], exp_avg_sq_[i], lr_, step_, options_.beta1,
                  options_.beta2, options_.eps, options_.weight_decay);
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
