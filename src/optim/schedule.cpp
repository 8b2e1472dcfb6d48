// WarmupCosine: linear warm-up then cosine decay, written into an
// optimizer's lr tensor between steps.
#include <cmath>
#include <limits>
#include <numbers>

#include "encore/optim.h"

namespace encore::optim {
namespace {

WarmupCosineOptions checked(WarmupCosineOptions o) {
  // Every lr(s) is written into the optimizer's f32 lr tensor (set_lr).
  ENCORE_CHECK(o.base_lr > 0.0 && o.base_lr <= std::numeric_limits<float>::max(),
               "WarmupCosine: base_lr must be finite and > 0 (as an f32: at most %g), got %g",
               double{std::numeric_limits<float>::max()}, o.base_lr);
  ENCORE_CHECK(o.min_lr >= 0.0 && o.min_lr <= o.base_lr,
               "WarmupCosine: min_lr (%g) must be in [0, base_lr] with base_lr %g", o.min_lr, o.base_lr);
  ENCORE_CHECK(o.total_steps > 0, "WarmupCosine: total_steps must be > 0, got %d", o.total_steps);
  ENCORE_CHECK(o.warmup_steps >= 0 && o.warmup_steps <= o.total_steps,
               "WarmupCosine: warmup_steps (%d) must be in [0, total_steps] with total_steps %d", o.warmup_steps,
               o.total_steps);
  return o;
}

}  // namespace

WarmupCosine::WarmupCosine(Optimizer& opt, WarmupCosineOptions options) : opt_(opt), options_(checked(options)) {
  opt_.set_lr(lr_at(0));
}

// The counter moves only once the optimizer took the new rate: a refused
// write (set_lr inside a captured step) leaves the schedule where it was.
void WarmupCosine::step() {
  ENCORE_CHECK_CODE(step_ < std::numeric_limits<int64_t>::max(), kOutOfRange,
                    "WarmupCosine: step() at step %d (INT64_MAX, from set_step) would overflow the step counter",
                    step_);
  opt_.set_lr(lr_at(step_ + 1));
  ++step_;
}

void WarmupCosine::set_step(int64_t step) {
  ENCORE_CHECK(step >= 0, "WarmupCosine: set_step needs step >= 0, got %d", step);
  opt_.set_lr(lr_at(step));
  step_ = step;
}

double WarmupCosine::lr_at(int64_t step) const {
  ENCORE_CHECK(step >= 0, "WarmupCosine: lr_at needs step >= 0, got %d", step);
  const auto& [base, floor, warmup, total] = options_;
  if (step < warmup) return base * static_cast<double>(step + 1) / static_cast<double>(warmup);
  if (step >= total) return floor;
  // Progress through the cosine in [0, 1): 0 at the end of warm-up.
  const double progress = static_cast<double>(step - warmup) / static_cast<double>(total - warmup);
  return floor + (base - floor) * 0.5 * (1.0 + std::cos(std::numbers::pi * progress));
}

}  // namespace encore::optim
