// clip_grad_norm: global L2 norm of all gradients, and scaling to max_norm,
// entirely in kernels so that a captured step can contain it.
//
// Three kernel kinds: one sum of squares per gradient into its slot of a [P]
// f32 tensor; one kernel turning the slots into the norm and the scale; one
// in-place scale per gradient that reads the scale from device memory.
#include <cmath>

#include "absl/container/flat_hash_map.h"

#include "encore/optim.h"
#include "src/backends/kernels.h"
#include "src/core/phase.h"

namespace encore::optim {
namespace {

// The defined gradients of params, checked: float, one device, each listed
// once (a parameter given twice, or two whose gradients view the same memory,
// would count it twice in the norm and scale it twice), and writable in place (no
// broadcast dims, which would scale one element several times).
std::vector<Tensor> grads_to_clip(const std::vector<Tensor>& params) {
  std::vector<Tensor> grads;
  // Where a gradient starts (its storage and offset) -> index of its first parameter.
  absl::flat_hash_map<std::pair<const Storage*, int64_t>, size_t> first_with;
  for (size_t i = 0; i < params.size(); ++i) {
    ENCORE_CHECK(params[i].defined(), "clip_grad_norm: parameter %d is an undefined tensor", i);
    Tensor g = params[i].grad();
    if (!g.defined()) continue;
    const auto [first, inserted] = first_with.try_emplace(std::pair(g.storage(), g.storage_offset()), i);
    ENCORE_CHECK(inserted,
                 "clip_grad_norm: parameter %d (shape %s) has the gradient of parameter %d (the same parameter "
                 "listed twice, or two gradients viewing the same memory): it would be counted and scaled twice; "
                 "list each parameter once",
                 i, shape_str(params[i].shape()), first->second);
    ENCORE_CHECK(is_floating(g.dtype()), "clip_grad_norm: gradient of parameter %d (shape %s, %s) is not float", i,
                 shape_str(g.shape()), dtype_name(g.dtype()));
    ENCORE_CHECK(grads.empty() || g.device() == grads[0].device(),
                 "clip_grad_norm: gradient of parameter %d (shape %s) is on %s, others on %s", i,
                 shape_str(g.shape()), g.device().str(), grads[0].device().str());
    for (int64_t d = 0; d < g.dim(); ++d) {
      ENCORE_CHECK(g.strides()[d] != 0 || g.shape()[d] <= 1,
                   "clip_grad_norm: gradient of parameter %d (shape %s, %s) is a broadcast view and cannot be "
                   "scaled in place; set a contiguous gradient",
                   i, shape_str(g.shape()), dtype_name(g.dtype()));
    }
    grads.push_back(std::move(g));
  }
  return grads;
}

}  // namespace

Tensor clip_grad_norm(const std::vector<Tensor>& params, double max_norm) {
  PhaseScope phase(Phase::kOptimizer);   // tags these kernels for profilers (src/core/phase.h)
  ENCORE_CHECK(std::isfinite(max_norm) && max_norm >= 0.0, "clip_grad_norm: max_norm must be finite and >= 0, got %g",
               max_norm);
  std::vector<Tensor> grads = grads_to_clip(params);
  if (grads.empty()) return zeros({}, kFloat32, params.empty() ? kCPU : params[0].device());
  const Device device = grads[0].device();
  for (const Tensor& g : grads) {
    ENCORE_CHECK(g.device() == device, "clip_grad_norm: gradients on %s and %s; clip each device's separately",
                 device.str(), g.device().str());
  }
  const int64_t n = static_cast<int64_t>(grads.size());
  Tensor partial = empty({n}, kFloat32, device);   // slot k: the L2 norm of grads[k]
  Tensor norm = empty({}, kFloat32, device);
  Tensor scale = empty({}, kFloat32, device);
  for (int64_t k = 0; k < n; ++k) backend::sum_of_squares(grads[k], partial, k);
  backend::clip_coefficient(partial, norm, scale, max_norm);
  for (const Tensor& g : grads) {
    g.storage()->bump_version();   // NOTE [ Version counter ]: possibly written in place
    backend::scale_in_place(g, scale);
  }
  return norm;
}

}  // namespace encore::optim
