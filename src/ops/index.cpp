// Index ops: gather, index_select, scatter_add, topk, multinomial. The
// backward of gather, index_select and topk is one deterministic
// scatter_add into zeros (no atomics: NOTE [ Index geometry ] in
// src/backends/kernel_table.h); scatter_add's is the gradient itself and
// a gather.
#include <cmath>
#include <vector>

#include "encore/ops.h"
#include "src/autograd/function.h"
#include "src/backends/kernels.h"
#include "src/ops/op_utils.h"

namespace encore {

using autograd::Grads;
using autograd::SavedTensor;

namespace {

void check_index_tensor(const char* op, const Tensor& index, const Tensor& input) {
  ops::check_defined(op, index, "index");
  ENCORE_CHECK(index.dtype() == kInt32 || index.dtype() == kInt64,
               "%s: index must be i32 or i64, got %s %s (input %s %s)", op, shape_str(index.shape()),
               dtype_name(index.dtype()), shape_str(input.shape()), dtype_name(input.dtype()));
  ENCORE_CHECK(index.device() == input.device(), "%s: input %s on %s but index %s on %s", op,
               shape_str(input.shape()), input.device().str(), shape_str(index.shape()), index.device().str());
}

// NOTE [ Index checks ]: every index in [0, size), read on the host in eager CPU steps.
void check_index_values(const char* op, const Tensor& index, int64_t size, int64_t dim, const Tensor& input) {
  if (!ops::host_checks_allowed(index)) return;
  const std::vector<int64_t> ids = index.to_vector<int64_t>();
  for (size_t i = 0; i < ids.size(); ++i) {
    ENCORE_CHECK(ids[i] >= 0 && ids[i] < size,
                 "%s: index %d (at flat position %d) is out of range for size %d of dim %d (input %s %s)", op,
                 ids[i], i, size, dim, shape_str(input.shape()), dtype_name(input.dtype()));
  }
}

// index.dim() == t.dim() and index.size(d) <= t.size(d) for every d (but dim when skip_dim).
void check_index_fits(const char* op, const Tensor& index, const Tensor& t, const char* what, int64_t dim,
                      bool skip_dim) {
  bool fits = index.dim() == t.dim();
  for (int64_t d = 0; fits && d < t.dim(); ++d) fits = (skip_dim && d == dim) || index.size(d) <= t.size(d);
  ENCORE_CHECK(fits, "%s: index %s does not fit %s %s (%s) %s dim %d: it needs the same number of dims and "
               "no larger size", op, shape_str(index.shape()), what, shape_str(t.shape()), dtype_name(t.dtype()),
               skip_dim ? "outside" : "in every dim, along", dim);
}

// zeros(shape) with g scattered along dim at index (the backward of the
// gathers). f16/bf16 scatter into f32 and round once: the kernel rounds to
// its dtype at each add, where a repeated index loses most of its sum (bf16
// ones stop at 256).
Tensor scatter_into_zeros(const Tensor& g, const Shape& shape, DType dtype, int64_t dim, const Tensor& index) {
  const DType acc = ops::sum_dtype(dtype);
  Tensor out = zeros(shape, acc, g.device());
  backend::scatter_add(out, dim, index, g.dtype() == acc ? g : g.to(acc));
  return acc == dtype ? out : out.to(dtype);
}

// index_select's index viewed with the input's dims: [K] at dim, expanded.
Tensor expand_index(const Tensor& index, const Shape& out_shape, int64_t dim) {
  Shape view_shape(out_shape.size(), 1);
  if (!out_shape.empty()) view_shape[dim] = out_shape[dim];
  return index.reshape({index.numel()}).view(view_shape).expand(out_shape);
}

}  // namespace

Tensor gather(const Tensor& input, int64_t dim, const Tensor& index) {
  constexpr const char* kOp = "gather";
  ops::check_defined(kOp, input, "input");
  check_index_tensor(kOp, index, input);
  dim = ops::normalize_dim(kOp, dim, input.dim());
  check_index_fits(kOp, index, input, "input", dim, /*skip_dim=*/true);
  const int64_t size = input.dim() == 0 ? 1 : input.size(dim);
  check_index_values(kOp, index, size, dim, input);
  Tensor out = empty_for(kOp, index.shape(), input.dtype(), input.device());
  backend::gather(out, input.detach(), dim, index.detach());
  if (autograd::any_requires_grad(input)) {
    ops::check_float(kOp, input);
    autograd::record(kOp, {input}, out,
                     [si = SavedTensor(index, kOp), shape = input.shape(), dt = input.dtype(), dim](
                         const Tensor& g) -> Grads { return {scatter_into_zeros(g, shape, dt, dim, si.get())}; });
  }
  return out;
}

Tensor index_select(const Tensor& input, int64_t dim, const Tensor& index) {
  constexpr const char* kOp = "index_select";
  ops::check_defined(kOp, input, "input");
  check_index_tensor(kOp, index, input);
  ENCORE_CHECK(index.dim() <= 1, "index_select: index must be 0-d or 1-d, got %s (input %s %s)",
               shape_str(index.shape()), shape_str(input.shape()), dtype_name(input.dtype()));
  dim = ops::normalize_dim(kOp, dim, input.dim());
  ENCORE_CHECK(input.dim() > 0 || index.numel() == 1,
               "index_select: a 0-d input takes one index, got %s (input %s)", shape_str(index.shape()),
               dtype_name(input.dtype()));
  const int64_t size = input.dim() == 0 ? 1 : input.size(dim);
  check_index_values(kOp, index, size, dim, input);
  Shape out_shape = input.shape();
  if (!out_shape.empty()) out_shape[dim] = index.numel();
  const Tensor idx = expand_index(index.detach(), out_shape, dim);
  Tensor out = empty_for(kOp, out_shape, input.dtype(), input.device());
  backend::gather(out, input.detach(), dim, idx);
  if (autograd::any_requires_grad(input)) {
    ops::check_float(kOp, input);
    autograd::record(kOp, {input}, out,
                     [si = SavedTensor(index, kOp), shape = input.shape(), out_shape, dt = input.dtype(), dim](
                         const Tensor& g) -> Grads {
                       return {scatter_into_zeros(g, shape, dt, dim, expand_index(si.get(), out_shape, dim))};
                     });
  }
  return out;
}

Tensor scatter_add(const Tensor& input, int64_t dim, const Tensor& index, const Tensor& src) {
  constexpr const char* kOp = "scatter_add";
  ops::check_defined(kOp, input, "input");
  ops::check_defined(kOp, src, "src");
  ops::check_same(kOp, input, src);
  ops::check_arithmetic(kOp, input);
  check_index_tensor(kOp, index, input);
  dim = ops::normalize_dim(kOp, dim, input.dim());
  check_index_fits(kOp, index, input, "input", dim, /*skip_dim=*/true);
  check_index_fits(kOp, index, src, "src", dim, /*skip_dim=*/false);
  const int64_t size = input.dim() == 0 ? 1 : input.size(dim);
  check_index_values(kOp, index, size, dim, input);
  // f16/bf16 add in f32 and round once, as scatter_into_zeros.
  const DType acc = ops::sum_dtype(input.dtype());
  Tensor out = empty(input.shape(), acc, input.device());
  backend::copy(out, input.detach());
  backend::scatter_add(out, dim, index.detach(), acc == src.dtype() ? src.detach() : src.detach().to(acc));
  if (acc != input.dtype()) out = out.to(input.dtype());
  if (autograd::any_requires_grad(input, src)) {
    autograd::record(kOp, {input, src}, out,
                     [si = SavedTensor(index, kOp), src_shape = src.shape(), dim, ni = input.requires_grad(),
                      ns = src.requires_grad()](const Tensor& g) -> Grads {
                       Tensor gs;
                       if (ns) {
                         const Tensor& idx = si.get();
                         gs = gather(g, dim, idx);
                         if (gs.shape() != src_shape) {   // src larger than index: zeros elsewhere
                           Tensor full = zeros(src_shape, gs.dtype(), gs.device());
                           Tensor part = full;
                           for (int64_t d = 0; d < idx.dim(); ++d) part = part.slice(d, 0, idx.size(d));
                           backend::copy(part, gs);
                           gs = full;
                         }
                       }
                       return {ni ? g : Tensor(), gs};
                     });
  }
  return out;
}

std::pair<Tensor, Tensor> topk(const Tensor& input, int64_t k, int64_t dim, bool largest, bool sorted) {
  constexpr const char* kOp = "topk";
  (void)sorted;   // the result is always sorted, which sorted=false allows
  ops::check_defined(kOp, input, "input");
  ops::check_arithmetic(kOp, input);
  dim = ops::normalize_dim(kOp, dim, input.dim());
  const int64_t n = input.dim() == 0 ? 1 : input.size(dim);
  ENCORE_CHECK(k >= 0 && k <= n, "topk: k = %d is out of range for size %d of dim %d (input %s %s)", k, n, dim,
               shape_str(input.shape()), dtype_name(input.dtype()));
  ENCORE_CHECK(input.dim() > 0 || k == 1, "topk: a 0-d input takes k = 1, got k = %d (%s)", k,
               dtype_name(input.dtype()));
  int64_t outer = 1, inner = 1;
  for (int64_t d = 0; d < input.dim(); ++d) {
    if (d < dim) outer *= input.size(d);
    if (d > dim) inner *= input.size(d);
  }
  Shape out_shape = input.shape();
  if (!out_shape.empty()) out_shape[dim] = k;
  Tensor values = empty(out_shape, input.dtype(), input.device());
  Tensor indices = empty(out_shape, kInt64, input.device());
  backend::topk(values, indices, input.detach().contiguous(), outer, n, inner, k, largest);
  if (autograd::any_requires_grad(input)) {
    ops::check_float(kOp, input);
    autograd::record(kOp, {input}, values,
                     [si = SavedTensor(indices, kOp), shape = input.shape(), dt = input.dtype(), dim](
                         const Tensor& g) -> Grads { return {scatter_into_zeros(g, shape, dt, dim, si.get())}; });
  }
  return {values, indices};
}

Tensor multinomial(const Tensor& probs, int64_t num_samples, bool replacement, Generator* generator) {
  constexpr const char* kOp = "multinomial";
  ops::check_defined(kOp, probs, "probs");
  ops::check_float(kOp, probs);
  ENCORE_CHECK(probs.dim() == 1 || probs.dim() == 2, "multinomial: probs must be 1-d or 2-d, got %s (%s)",
               shape_str(probs.shape()), dtype_name(probs.dtype()));
  const int64_t classes = probs.size(-1), rows = probs.dim() == 2 ? probs.size(0) : 1;
  ENCORE_CHECK(num_samples > 0, "multinomial: num_samples must be positive, got %d (probs %s)", num_samples,
               shape_str(probs.shape()));
  ENCORE_CHECK(classes > 0, "multinomial: probs %s has no categories", shape_str(probs.shape()));
  ENCORE_CHECK(replacement || num_samples <= classes,
               "multinomial: cannot draw %d samples without replacement from %d categories (probs %s)",
               num_samples, classes, shape_str(probs.shape()));
  Generator& g = generator != nullptr ? *generator : default_generator(probs.device());
  ENCORE_CHECK(g.device() == probs.device(), "multinomial: generator on %s cannot draw for probs %s on %s",
               g.device().str(), shape_str(probs.shape()), probs.device().str());
  const Tensor p = probs.detach().reshape({rows, classes}).contiguous();
  if (ops::host_checks_allowed(p)) {   // NOTE [ Index checks ], for the distribution
    const std::vector<float> v = p.to(kFloat32).to_vector<float>();
    for (int64_t r = 0; r < rows; ++r) {
      double total = 0;
      int64_t positive = 0;
      for (int64_t c = 0; c < classes; ++c) {
        const float w = v[r * classes + c];
        ENCORE_CHECK(std::isfinite(w) && w >= 0, "multinomial: probs[%d][%d] = %g is not a finite, non-negative "
                     "weight (probs %s %s)", r, c, w, shape_str(probs.shape()), dtype_name(probs.dtype()));
        total += w;
        positive += w > 0;
      }
      ENCORE_CHECK(total > 0, "multinomial: row %d of probs %s sums to 0", r, shape_str(probs.shape()));
      ENCORE_CHECK(replacement || positive >= num_samples,
                   "multinomial: row %d of probs %s has %d non-zero categories, fewer than the %d samples drawn "
                   "without replacement", r, shape_str(probs.shape()), positive, num_samples);
    }
  }
  Tensor out = empty_for(kOp, {rows, num_samples}, kInt64, probs.device());   // refuses sizes past 2^63 naming the op
  backend::multinomial(out, p, num_samples, replacement, g.state());
  return probs.dim() == 1 ? out.view({num_samples}) : out;
}

}  // namespace encore
