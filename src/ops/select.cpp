// Selection: where(cond, a, b) and masked_fill(a, mask, value), each with its
// backward beside its forward. Both backwards are one masked_fill kernel that
// zeroes the gradient where it does not flow, then (only when the input was
// broadcast) sum_to back to the input's shape.
#include <cmath>

#include "encore/ops.h"
#include "src/autograd/function.h"
#include "src/backends/kernels.h"
#include "src/ops/op_utils.h"

namespace encore {

using autograd::Grads;
using autograd::SavedTensor;

namespace {

// Broadcasts `s` into `acc` (dims align right); false when a dim pair clashes.
bool broadcast_into(Shape& acc, absl::Span<const int64_t> s) {
  if (s.size() > acc.size()) acc.insert(acc.begin(), s.size() - acc.size(), 1);
  const size_t lead = acc.size() - s.size();
  for (size_t i = 0; i < s.size(); ++i) {
    int64_t& d = acc[lead + i];
    if (d != s[i] && d != 1 && s[i] != 1) return false;
    if (d == 1) d = s[i];
  }
  return true;
}

void check_mask(const char* op, const char* what, const Tensor& mask, const Tensor& a) {
  ops::check_defined(op, mask, what);
  ENCORE_CHECK(mask.dtype() == kBool, "%s: %s must be bool, got %s %s (input %s %s)", op, what,
               shape_str(mask.shape()), dtype_name(mask.dtype()), shape_str(a.shape()), dtype_name(a.dtype()));
  ENCORE_CHECK(mask.device() == a.device(), "%s: %s %s is on %s but the input %s is on %s", op, what,
               shape_str(mask.shape()), mask.device().str(), shape_str(a.shape()), a.device().str());
}

// A masked-fill value must be representable in an integer dtype (double ->
// integer outside the range is undefined behaviour); floats take anything.
// g with zeros where the gradient does not flow ((mask == fill_when)), summed
// back to `shape` when the input was broadcast.
Tensor masked_grad(const Tensor& g, const Tensor& mask, bool fill_when, DType dtype, const Shape& shape) {
  const Tensor gs = g.dtype() == dtype ? g : g.to(dtype);   // a caller-given root gradient may differ
  Tensor out = empty(gs.shape(), dtype, gs.device());
  backend::masked_fill(out, gs, mask, 0.0, fill_when);
  return out.shape() == shape ? out : sum_to(out, shape);
}

}  // namespace

Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b) {
  ops::check_same("where", a, b);
  check_mask("where", "condition", cond, a);
  Shape shape = cond.shape();
  ENCORE_CHECK(broadcast_into(shape, a.shape()) && broadcast_into(shape, b.shape()),
               "where: shapes %s (condition), %s and %s (%s) cannot be broadcast together", shape_str(cond.shape()),
               shape_str(a.shape()), shape_str(b.shape()), dtype_name(a.dtype()));
  Tensor out = empty(shape, a.dtype(), a.device());
  backend::where(out, cond, a, b);
  if (autograd::any_requires_grad(a, b)) {
    autograd::record("where", {a, b}, out,
                     [sc = SavedTensor(cond, "where"), sa = a.shape(), sb = b.shape(), na = a.requires_grad(),
                      nb = b.requires_grad(), dt = a.dtype()](const Tensor& g) -> Grads {
                       const Tensor& c = sc.get();
                       return {na ? masked_grad(g, c, false, dt, sa) : Tensor(),
                               nb ? masked_grad(g, c, true, dt, sb) : Tensor()};
                     });
  }
  return out;
}

Tensor masked_fill(const Tensor& a, const Tensor& mask, double value) {
  ops::check_defined("masked_fill", a, "input");
  check_mask("masked_fill", "mask", mask, a);
  Shape shape = a.shape();
  ENCORE_CHECK(broadcast_into(shape, mask.shape()) && shape == a.shape(),
               "masked_fill: mask %s cannot be broadcast to the input's shape %s (%s)", shape_str(mask.shape()),
               shape_str(a.shape()), dtype_name(a.dtype()));
  ops::check_scalar_fits("masked_fill", value, a.dtype(), a.shape());
  ops::check_float_fits("masked_fill", value, a.dtype(), a.shape());
  Tensor out = ops::empty_like(a);
  backend::masked_fill(out, a, mask, value);
  if (autograd::any_requires_grad(a)) {
    autograd::record("masked_fill", {a}, out,
                     [sm = SavedTensor(mask, "masked_fill"), shape = a.shape(), dt = a.dtype()](
                         const Tensor& g) -> Grads { return {masked_grad(g, sm.get(), true, dt, shape)}; });
  }
  return out;
}

}  // namespace encore
