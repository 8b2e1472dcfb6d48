// Reductions: sum, mean, var, max/argmax and sum_to, each backward beside its
// forward.
//
// Conventions (PyTorch's):
//  - dims may be negative; a dim may not repeat; empty dims reduce all dims
//    (a 0-d result unless keepdim). A 0-d input accepts dim 0 or -1 and
//    reduces nothing.
//  - sum of integer or bool tensors accumulates in 64 bits and returns i64
//    (wrapping on overflow); mean and var need float tensors.
//  - Over an empty set of elements sum gives 0, mean and var NaN.
//  - var divides by max(0, count - correction): when correction >= count that
//    is 0, so the result is inf (or NaN when every deviation is 0, e.g. a
//    single element with correction 1).
//  - max over an empty dim is an error. Its backward (max(dim) and max())
//    sends the gradient to the first maximal element only, the one whose
//    index max(dim) reports. (PyTorch's max() splits it evenly among ties;
//    first-index keeps both forms consistent and needs only the saved index.)
#include <algorithm>

#include "encore/ops.h"
#include "src/autograd/function.h"
#include "src/backends/kernels.h"
#include "src/ops/op_utils.h"

namespace encore {

using autograd::Grads;
using autograd::SavedTensor;

namespace {

// The dims one call reduces, checked, and the shapes they give.
struct ReducedDims {
  backend::DimMask mask = 0;
  std::vector<int64_t> dims;   // normalised, ascending
  Shape out_shape;             // keepdim applied
  Shape keep_shape;            // reduced dims as 1: the output gradient viewed against the input
  int64_t count = 1;           // input elements per output element
};

ReducedDims resolve_dims(const char* op, const Tensor& a, absl::Span<const int64_t> dims, bool keepdim) {
  ops::check_defined(op, a, "input");
  const int64_t nd = a.dim();
  ENCORE_CHECK(nd <= kMaxDims, "%s: %d dims exceed the limit of %d (shape %s)", op, nd, kMaxDims,
               shape_str(a.shape()));
  const int64_t range = std::max<int64_t>(nd, 1);   // a 0-d tensor accepts dim 0 and -1
  backend::DimMask seen = 0;
  for (int64_t d : dims) {
    ENCORE_CHECK(d >= -range && d < range, "%s: dim %d is out of range for input of shape %s (%s)", op, d,
                 shape_str(a.shape()), dtype_name(a.dtype()));
    const int64_t n = d < 0 ? d + range : d;
    ENCORE_CHECK(!(seen & backend::dim_bit(n)), "%s: dim %d appears more than once in dims %s (input shape %s)", op,
                 n, shape_str(dims), shape_str(a.shape()));
    seen |= backend::dim_bit(n);
  }
  ReducedDims r;
  r.mask = dims.empty() ? backend::dim_bit(nd) - 1 : seen;
  if (nd == 0) r.mask = 0;
  for (int64_t d = 0; d < nd; ++d) {
    const int64_t size = a.shape()[d];
    if (r.mask & backend::dim_bit(d)) {
      r.dims.push_back(d);
      r.count *= size;   // fits: NOTE [ Shapes whose nonzero dims fit ] in src/core/tensor.cpp
      r.keep_shape.push_back(1);
      if (keepdim) r.out_shape.push_back(1);
    } else {
      r.keep_shape.push_back(size);
      r.out_shape.push_back(size);
    }
  }
  return r;
}

// The gradient of max: g (the values' shape) placed at the saved indices of
// dim `dim` of an input of `shape`, zero elsewhere. dim < 0: indices are flat
// (max over all elements).
Tensor max_scatter(const Tensor& g, const Tensor& indices, const Shape& shape, int64_t dim) {
  int64_t outer = 1, n = numel_of(shape), inner = 1;
  if (dim >= 0 && !shape.empty()) {
    n = shape[dim];
    for (int64_t d = 0; d < dim; ++d) outer *= shape[d];
    for (int64_t d = dim + 1; d < static_cast<int64_t>(shape.size()); ++d) inner *= shape[d];
  }
  Tensor grad = empty(shape, g.dtype(), g.device());
  backend::max_backward(grad, g.contiguous(), indices.contiguous(), outer, n, inner);
  return grad;
}

void check_max_input(const char* op, const Tensor& a) {
  ENCORE_CHECK(a.dtype() != kBool, "%s: bool tensor %s is not supported (convert with .to(kInt32))", op,
               shape_str(a.shape()));
}

// max(dim) and argmax: checks, and the indices output.
ReducedDims max_forward(const char* op, const Tensor& a, int64_t dim, bool keepdim, Tensor* indices) {
  ReducedDims r = resolve_dims(op, a, {dim}, keepdim);
  check_max_input(op, a);
  ENCORE_CHECK(r.count > 0, "%s: cannot reduce over dim %d of size 0 (input shape %s, %s)", op, dim,
               shape_str(a.shape()), dtype_name(a.dtype()));
  *indices = empty(r.out_shape, kInt64, a.device());
  return r;
}

}  // namespace

Tensor sum(const Tensor& a, std::vector<int64_t> dims, bool keepdim) {
  const ReducedDims r = resolve_dims("sum", a, dims, keepdim);
  Tensor out = empty(r.out_shape, is_floating(a.dtype()) ? a.dtype() : kInt64, a.device());
  backend::sum(out, a, r.mask);
  if (autograd::any_requires_grad(a)) {
    autograd::record("sum", {a}, out, [keep = r.keep_shape, shape = a.shape()](const Tensor& g) -> Grads {
      return {g.reshape(keep).expand(shape)};
    });
  }
  return out;
}

Tensor mean(const Tensor& a, std::vector<int64_t> dims, bool keepdim) {
  const ReducedDims r = resolve_dims("mean", a, dims, keepdim);
  ops::check_float("mean", a);
  Tensor out = empty(r.out_shape, a.dtype(), a.device());
  backend::mean(out, a, r.mask);
  if (autograd::any_requires_grad(a)) {
    autograd::record("mean", {a}, out,
                     [keep = r.keep_shape, shape = a.shape(), count = r.count](const Tensor& g) -> Grads {
                       return {mul(g, 1.0 / static_cast<double>(count)).reshape(keep).expand(shape)};
                     });
  }
  return out;
}

Tensor var(const Tensor& a, std::vector<int64_t> dims, int64_t correction, bool keepdim) {
  const ReducedDims r = resolve_dims("var", a, dims, keepdim);
  ops::check_float("var", a);
  // Two passes: the mean (f32, one per output), then the squared deviations from it.
  Tensor mean_f32 = empty({numel_of(r.out_shape)}, kFloat32, a.device());
  backend::mean(mean_f32, a, r.mask);
  Tensor out = empty(r.out_shape, a.dtype(), a.device());
  backend::var(out, a, mean_f32, r.mask, correction);
  if (autograd::any_requires_grad(a)) {
    // d var / d x = 2 (x - mean) / max(0, count - correction), in f32 for
    // f16/bf16 (as the forward) and rounded once: centred on a mean rounded
    // to f16, [100, 100.0625, 100.125, 100.1875] got the gradient
    // [-0.0833, -0.0417, 0, 0.0417], not [-0.0625, -0.0208, 0.0208, 0.0625].
    // In double: count - correction overflows int64 for extreme corrections (ops_fuzz).
    const double divisor = std::max(0.0, static_cast<double>(r.count) - static_cast<double>(correction));
    autograd::record("var", {a}, out,
                     [sa = SavedTensor(a, "var"), dims = r.dims, keep = r.keep_shape, divisor](const Tensor& g) -> Grads {
                       const Tensor& xs = sa.get();
                       const DType dt = ops::sum_dtype(xs.dtype());
                       const Tensor x = xs.to(dt);   // xs itself when dt is its dtype
                       Tensor centered = sub(x, mean(x, dims, /*keepdim=*/true));
                       return {mul(centered, mul(g.to(dt).reshape(keep), 2.0 / divisor)).to(xs.dtype())};
                     });
  }
  return out;
}

std::pair<Tensor, Tensor> max(const Tensor& a, int64_t dim, bool keepdim) {
  Tensor indices;
  const ReducedDims r = max_forward("max", a, dim, keepdim, &indices);
  Tensor values = empty(r.out_shape, a.dtype(), a.device());
  backend::max(values, indices, a, r.mask);
  if (autograd::any_requires_grad(a)) {
    const int64_t d = r.dims.empty() ? -1 : r.dims[0];   // none for a 0-d input: flat
    autograd::record("max", {a}, values,
                     [si = SavedTensor(indices, "max"), shape = a.shape(), d](const Tensor& g) -> Grads {
                       return {max_scatter(g, si.get(), shape, d)};
                     });
  }
  return {values, indices};
}

Tensor max(const Tensor& a) {
  const ReducedDims r = resolve_dims("max", a, {}, false);
  check_max_input("max", a);
  ENCORE_CHECK(a.numel() > 0, "max: cannot take the max of an empty tensor (shape %s, %s)", shape_str(a.shape()),
               dtype_name(a.dtype()));
  Tensor values = empty({}, a.dtype(), a.device());
  Tensor indices = empty({}, kInt64, a.device());   // flat index of the first maximum
  backend::max(values, indices, a, r.mask);
  if (autograd::any_requires_grad(a)) {
    autograd::record("max", {a}, values,
                     [si = SavedTensor(indices, "max"), shape = a.shape()](const Tensor& g) -> Grads {
                       return {max_scatter(g, si.get(), shape, -1)};
                     });
  }
  return values;
}

Tensor argmax(const Tensor& a, int64_t dim, bool keepdim) {
  Tensor indices;
  const ReducedDims r = max_forward("argmax", a, dim, keepdim, &indices);
  backend::max(Tensor(), indices, a, r.mask);
  return indices;
}

Tensor sum_to(const Tensor& a, absl::Span<const int64_t> shape) {
  ops::check_defined("sum_to", a, "input");
  if (absl::Span<const int64_t>(a.shape()) == shape) return a;   // the common case: no copy, no launch
  // Reduce the leading dims a has beyond `shape`, and the dims where shape has 1 and a does not.
  const int64_t lead = a.dim() - static_cast<int64_t>(shape.size());
  bool ok = lead >= 0;
  backend::DimMask mask = 0;
  for (int64_t d = 0; ok && d < a.dim(); ++d) {
    const int64_t target = d < lead ? 1 : shape[d - lead];
    if (d < lead || (target == 1 && a.shape()[d] != 1)) {
      mask |= backend::dim_bit(d);
    } else {
      ok = target == a.shape()[d];
    }
  }
  ENCORE_CHECK(ok, "sum_to: shape %s is not broadcastable to the input shape %s (%s)", shape_str(shape),
               shape_str(a.shape()), dtype_name(a.dtype()));
  ENCORE_CHECK(a.dtype() != kBool, "sum_to: bool tensor %s cannot be summed to %s", shape_str(a.shape()),
               shape_str(shape));
  bool only_ones = true;   // only size-1 dims to drop: a view, no launch
  for (int64_t d = 0; d < a.dim(); ++d) only_ones = only_ones && (!(mask & backend::dim_bit(d)) || a.shape()[d] == 1);
  if (only_ones) return a.reshape(Shape(shape.begin(), shape.end()));
  // Same dtype as a (integers accumulate in 64 bits, then wrap to a's type).
  Tensor out = empty(Shape(shape.begin(), shape.end()), a.dtype(), a.device());
  backend::sum(out, a, mask);
  if (autograd::any_requires_grad(a)) {
    autograd::record("sum_to", {a}, out, [in_shape = a.shape()](const Tensor& g) -> Grads {
      return {g.expand(in_shape)};
    });
  }
  return out;
}

}  // namespace encore
