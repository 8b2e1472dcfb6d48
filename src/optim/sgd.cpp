// SGD with momentum, Nesterov momentum and L2 weight decay (PyTorch semantics).
#include <cmath>
#include <limits>

#include "absl/strings/str_cat.h"
#include "encore/optim.h"
#include "src/backends/kernels.h"
#include "src/core/phase.h"

namespace encore::optim {
namespace {

// The kernels take momentum and weight_decay as f32 arguments: a value past
// the f32 range would become inf there.
SgdOptions checked(SgdOptions o) {
  constexpr double kMax = std::numeric_limits<float>::max();
  ENCORE_CHECK(o.momentum >= 0.0 && o.momentum <= kMax,
               "SGD: momentum must be finite and >= 0 (as an f32: at most %g), got %g", kMax, o.momentum);
  ENCORE_CHECK(o.weight_decay >= 0.0 && o.weight_decay <= kMax,
               "SGD: weight_decay must be finite and >= 0 (as an f32: at most %g), got %g", kMax, o.weight_decay);
  ENCORE_CHECK(!o.nesterov || o.momentum > 0.0, "SGD: nesterov needs momentum > 0, got momentum %g", o.momentum);
  return o;
}

}  // namespace

SGD::SGD(std::vector<Tensor> params, SgdOptions options)
    : Optimizer("SGD", std::move(params), options.lr), options_(checked(options)), momentum_(params_.size()) {}

void SGD::step() {
  PhaseScope phase(Phase::kOptimizer);   // tags these kernels for profilers (src/core/phase.h)
  for (size_t i = 0; i < params_.size(); ++i) {
    const Tensor& p = params_[i];
    const Tensor g = p.grad();
    if (!g.defined()) continue;   // no gradient this step: skipped, like PyTorch
    if (options_.momentum > 0.0 && !momentum_[i].defined()) {
      // Zero-initialised: the first momentum step then gives buf = d exactly.
      momentum_[i] = zeros(p.shape(), kFloat32, p.device());
    }
    p.storage()->bump_version();   // NOTE [ Version counter ]: an in-place write
    if (momentum_[i].defined()) momentum_[i].storage()->bump_version();
    backend::sgd_update(p, g, momentum_[i], lr_, options_.momentum, options_.nesterov, options_.weight_decay);
  }
}

void SGD::init_state() {
  if (options_.momentum <= 0.0) return;   // plain SGD keeps no state
  for (size_t i = 0; i < params_.size(); ++i) {
    if (!momentum_[i].defined()) momentum_[i] = zeros(params_[i].shape(), kFloat32, params_[i].device());
  }
}

NamedTensors SGD::state() const {
  NamedTensors out = Optimizer::state();
  for (size_t i = 0; i < momentum_.size(); ++i) {
    if (momentum_[i].defined()) out.emplace_back(absl::StrCat("momentum.", i), momentum_[i]);
  }
  return out;
}

}  // namespace encore::optim
