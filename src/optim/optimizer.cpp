// Optimizer: parameter checks, the learning-rate tensor and zero_grad().
#include <cmath>
#include <limits>

#include "absl/container/flat_hash_set.h"
#include "encore/autograd.h"
#include "encore/optim.h"
#include "src/core/phase.h"
#include "src/core/stream.h"

namespace encore::optim {
namespace {

// Every parameter: defined, float, a leaf that requires grad, on one device,
// listed once. Messages name the index, the shape and the dtype.
void check_params(const char* name, const std::vector<Tensor>& params) {
  ENCORE_CHECK(!params.empty(), "%s: got an empty parameter list", name);
  absl::flat_hash_set<const TensorImpl*> seen;
  for (size_t i = 0; i < params.size(); ++i) {
    const Tensor& p = params[i];
    ENCORE_CHECK(p.defined(), "%s: parameter %d is an undefined tensor", name, i);
    const std::string shape = shape_str(p.shape());
    const std::string_view dtype = dtype_name(p.dtype());
    ENCORE_CHECK(is_floating(p.dtype()), "%s: parameter %d (shape %s, %s) is not a float tensor (f32, f16, bf16)",
                 name, i, shape, dtype);
    ENCORE_CHECK(p.is_leaf(),
                 "%s: parameter %d (shape %s, %s) is not a leaf: it was computed by an op; pass the leaf "
                 "tensors you created, or detach() it and call requires_grad_()",
                 name, i, shape, dtype);
    ENCORE_CHECK(p.requires_grad(), "%s: parameter %d (shape %s, %s) does not require grad; call requires_grad_()",
                 name, i, shape, dtype);
    ENCORE_CHECK(p.device() == params[0].device(), "%s: parameter %d (shape %s) is on %s but parameter 0 is on %s",
                 name, i, shape, p.device().str(), params[0].device().str());
    ENCORE_CHECK(seen.insert(p.impl()).second, "%s: parameter %d (shape %s, %s) appears more than once", name, i,
                 shape, dtype);
  }
}

// lr lives in an f32 tensor: a value past the f32 range would become inf there.
void check_lr(const char* name, double lr) {
  ENCORE_CHECK(lr >= 0.0 && lr <= std::numeric_limits<float>::max(),
               "%s: lr must be finite and >= 0 (as an f32: at most %g), got %g", name,
               double{std::numeric_limits<float>::max()}, lr);
}

}  // namespace

Optimizer::Optimizer(const char* name, std::vector<Tensor> params, double lr)
    : name_(name), params_(std::move(params)) {
  check_params(name_, params_);
  check_lr(name_, lr);
  lr_ = full({}, lr, kFloat32, params_[0].device());
}

void Optimizer::zero_grad() {
  PhaseScope phase(Phase::kOptimizer);   // tags these kernels for profilers (src/core/phase.h)
  NoGradGuard no_grad;
  // Lazily (NOTE [ Lazy zero_grad ]): the storage (and a captured graph's
  // pointer) stays; the next backward overwrites it instead of adding to zeros.
  for (const Tensor& p : params_) autograd::zero_grad(p);
}

void Optimizer::set_lr(double lr) {
  check_lr(name_, lr);
  // A host value written by a kernel: observers (capture) refuse it inside a
  // step, where a recorded fill would freeze this value; no wait for the GPU.
  current_stream(lr_.device()).host_write("set_lr");
  NoGradGuard no_grad;
  lr_.fill_(lr);
}

double Optimizer::get_lr() const { return lr_.item<float>(); }

NamedTensors Optimizer::state() const { return {{"lr", lr_}}; }

}  // namespace encore::optim
