// Matrix products: matmul (NumPy rules) and linear (x W^T + b), each with its
// backward beside it. Both run on backend::matmul (src/backends/kernels.h):
// transposes are views passed to BLAS with a transpose flag, never copies, and
// gradients over broadcast batch dims are summed inside the GEMM
// (NOTE [ Matmul accumulation ]).
#include <algorithm>
#include <string>

#include "encore/ops.h"
#include "src/autograd/function.h"
#include "src/backends/kernels.h"
#include "src/ops/op_utils.h"

namespace encore {

using autograd::Grads;
using autograd::SavedTensor;

namespace {

// "matmul: shapes [2, 3] and [4, 5] (f32, f32)": the start of every matmul error.
std::string matmul_prefix(const Tensor& a, const Tensor& b) {
  return absl::StrFormat("matmul: shapes %s and %s (%s, %s)", shape_str(a.shape()), shape_str(b.shape()),
                         dtype_name(a.dtype()), dtype_name(b.dtype()));
}

void check_matmul(const Tensor& a, const Tensor& b) {
  ops::check_defined("matmul", a, "first operand");
  ops::check_defined("matmul", b, "second operand");
  const std::string what = matmul_prefix(a, b);
  ENCORE_CHECK(a.dtype() == b.dtype(), "%s: dtypes differ (convert one with .to(dtype))", what);
  ENCORE_CHECK(a.device() == b.device(), "%s: devices %s and %s differ", what, a.device().str(), b.device().str());
  ENCORE_CHECK(is_floating(a.dtype()), "%s: integer and bool matmul is not supported; convert with .to(kFloat32)",
               what);
  ENCORE_CHECK(a.dim() >= 1 && b.dim() >= 1, "%s: both operands need at least 1 dim (use mul for scalars)", what);
  const int64_t ka = a.size(-1), kb = b.dim() == 1 ? b.size(0) : b.size(-2);
  ENCORE_CHECK(ka == kb, "%s: inner dims %d and %d differ", what, ka, kb);
}

// NumPy's promotion of 1-D operands: a [k] -> [1, k], b [k] -> [k, 1]. The
// tensors are views for kernels (callers pass detached tensors: no autograd).
Shape promoted_a(const Shape& a) { return a.size() == 1 ? Shape{1, a[0]} : a; }
Shape promoted_b(const Shape& b) { return b.size() == 1 ? Shape{b[0], 1} : b; }
Tensor promote_a(const Tensor& a) { return a.dim() == 1 ? a.unsqueeze(0) : a; }
Tensor promote_b(const Tensor& b) { return b.dim() == 1 ? b.unsqueeze(1) : b; }

// The shapes of a product of promoted operands.
struct MatmulShapes {
  Shape out;      // [batch.., n, m]
  Shape result;   // out less the dims that 1-D operands added: what matmul returns
};

MatmulShapes matmul_shapes(const Tensor& a, const Tensor& b) {
  const Shape ap = promoted_a(a.shape()), bp = promoted_b(b.shape());
  const absl::Span<const int64_t> ba(ap.data(), ap.size() - 2), bb(bp.data(), bp.size() - 2);
  // Batch dims broadcast like NumPy, aligned from the right.
  const size_t nb = std::max(ba.size(), bb.size());
  Shape batch(nb);
  for (size_t i = 0; i < nb; ++i) {
    const int64_t da = i + ba.size() < nb ? 1 : ba[i + ba.size() - nb];
    const int64_t db = i + bb.size() < nb ? 1 : bb[i + bb.size() - nb];
    ENCORE_CHECK(da == db || da == 1 || db == 1, "%s: batch dims %s and %s cannot be broadcast",
                 matmul_prefix(a, b), shape_str(ba), shape_str(bb));
    batch[i] = da == 1 ? db : da;
  }
  MatmulShapes s;
  s.out = batch;
  s.out.push_back(ap[ap.size() - 2]);
  s.out.push_back(bp.back());
  ENCORE_CHECK(static_cast<int64_t>(s.out.size()) <= kMaxDims, "%s: the product would have %d dims (max %d)",
               matmul_prefix(a, b), s.out.size(), kMaxDims);
  s.result = batch;
  if (a.dim() > 1) s.result.push_back(ap[ap.size() - 2]);
  if (b.dim() > 1) s.result.push_back(bp.back());
  return s;
}

// True when every dim of t but the last collapses into one strided dim, so
// that t.view({N, t.size(-1)}) shares t's memory (no copy).
bool rows_fold(const Tensor& t) {
  if (t.numel() == 0) return true;
  int64_t expect = -1;   // the stride the next outer non-unit dim must have
  for (int64_t d = t.dim() - 2; d >= 0; --d) {
    const int64_t size = t.shape()[d];
    if (size == 1) continue;
    if (expect >= 0 && t.strides()[d] != expect) return false;
    expect = t.strides()[d] * size;
  }
  return true;
}

// t [.., c] as [N, c]: a view when possible, else a contiguous copy. No autograd.
Tensor as_rows(const Tensor& t) {
  const int64_t rows = numel_of(absl::MakeConstSpan(t.shape().data(), t.dim() - 1));
  return t.detach().reshape({rows, t.size(-1)});
}

// One GEMM instead of a batch: b is a plain matrix and a's leading dims fold
// into its rows without a copy.
bool fold_into_rows(const Tensor& ap, const Tensor& bp) { return bp.dim() == 2 && ap.dim() > 2 && rows_fold(ap); }

Tensor matmul_forward(const Tensor& a, const Tensor& b, const MatmulShapes& s) {
  const Tensor ap = promote_a(a.detach()), bp = promote_b(b.detach());
  Tensor out = empty_for("matmul", s.out, a.dtype(), a.device());
  if (fold_into_rows(ap, bp)) {
    backend::matmul(as_rows(out), as_rows(ap), bp);
  } else {
    backend::matmul(out, ap, bp);
  }
  return out.view(s.result);
}

// grad_a = g b^T, summed over a's broadcast batch dims (in the GEMM).
Tensor matmul_grad_a(const Tensor& g, const Tensor& b, const Shape& a_shape, const MatmulShapes& s) {
  const Tensor bp = promote_b(b);
  const Tensor gp = g.reshape(s.out);
  const Shape ap_shape = promoted_a(a_shape);
  Tensor ga = empty(ap_shape, g.dtype(), g.device());
  if (bp.dim() == 2 && ap_shape.size() > 2) {   // [N, m] x [m, k]: one GEMM
    backend::matmul(as_rows(ga), as_rows(gp), bp.transpose(-1, -2));
  } else {
    backend::matmul(ga, gp, bp.transpose(-1, -2));
  }
  return ga.view(a_shape);
}

// grad_b = a^T g, summed over b's broadcast batch dims (in the GEMM).
Tensor matmul_grad_b(const Tensor& g, const Tensor& a, const Shape& b_shape, const MatmulShapes& s) {
  const Tensor ap = promote_a(a);
  const Tensor gp = g.reshape(s.out);
  const Shape bp_shape = promoted_b(b_shape);
  Tensor gb = empty(bp_shape, g.dtype(), g.device());
  if (bp_shape.size() == 2 && ap.dim() > 2) {   // [k, N] x [N, m]: one GEMM over all rows
    backend::matmul(gb, as_rows(ap).transpose(0, 1), as_rows(gp));
  } else {
    backend::matmul(gb, ap.transpose(-1, -2), gp);
  }
  return gb.view(b_shape);
}

}  // namespace

Tensor matmul(const Tensor& a, const Tensor& b) {
  check_matmul(a, b);
  const MatmulShapes s = matmul_shapes(a, b);
  Tensor out = matmul_forward(a, b, s);
  if (autograd::any_requires_grad(a, b)) {
    const bool na = a.requires_grad(), nb = b.requires_grad();
    // Each side saves only what the other's gradient needs.
    autograd::record("matmul", {a, b}, out,
                     [sa = nb ? SavedTensor(a, "matmul") : SavedTensor(),
                      sb = na ? SavedTensor(b, "matmul") : SavedTensor(), a_shape = a.shape(), b_shape = b.shape(),
                      s](const Tensor& g) -> Grads {
                       return {sb.defined() ? matmul_grad_a(g, sb.get(), a_shape, s) : Tensor(),
                               sa.defined() ? matmul_grad_b(g, sa.get(), b_shape, s) : Tensor()};
                     });
  }
  return out;
}

namespace {

void check_linear(const Tensor& x, const Tensor& w, const Tensor& bias) {
  ops::check_defined("linear", x, "input");
  ops::check_defined("linear", w, "weight");
  ops::check_same("linear", x, w);
  ENCORE_CHECK(is_floating(x.dtype()), "linear: input %s and weight %s (%s) are not float; convert with .to(kFloat32)",
               shape_str(x.shape()), shape_str(w.shape()), dtype_name(x.dtype()));
  ENCORE_CHECK(w.dim() == 2, "linear: weight %s (%s) must be 2-D [out, in] (input %s)", shape_str(w.shape()),
               dtype_name(w.dtype()), shape_str(x.shape()));
  ENCORE_CHECK(x.dim() >= 1, "linear: input %s (%s) needs at least 1 dim (weight %s)", shape_str(x.shape()),
               dtype_name(x.dtype()), shape_str(w.shape()));
  ENCORE_CHECK(x.size(-1) == w.size(1),
               "linear: input %s and weight %s (%s, %s): input features %d and weight in-features %d differ",
               shape_str(x.shape()), shape_str(w.shape()), dtype_name(x.dtype()), dtype_name(w.dtype()), x.size(-1),
               w.size(1));
  if (!bias.defined()) return;
  ops::check_same("linear", x, bias);
  ENCORE_CHECK(bias.dim() == 1 && bias.size(0) == w.size(0),
               "linear: bias %s (%s) does not match weight %s: needs [%d] (input %s)", shape_str(bias.shape()),
               dtype_name(bias.dtype()), shape_str(w.shape()), w.size(0), shape_str(x.shape()));
}

struct LinearBackward {
  SavedTensor x_rows;   // x as [N, in]; saved when the weight needs a gradient
  SavedTensor weight;   // [out, in]; saved when x needs a gradient
  Shape x_shape;
  int64_t rows;         // N: x's leading dims flattened
  int64_t out_features;
  bool need_bias;

  Grads operator()(const Tensor& g) const {
    const Tensor g_rows = g.reshape({rows, out_features});
    Tensor dx, dw, db;
    if (weight.defined()) {   // dx = g W: [N, out] x [out, in]
      const Tensor& w = weight.get();
      dx = empty({g_rows.size(0), w.size(1)}, g.dtype(), g.device());
      backend::matmul(dx, g_rows, w);
      dx = dx.view(x_shape);
    }
    if (x_rows.defined()) {   // dW = g^T x: [out, N] x [N, in]
      const Tensor& x = x_rows.get();
      dw = autograd::grad_buffer(1, {out_features, x.size(1)}, g.dtype(), g.device());
      backend::matmul(dw, g_rows.t(), x);
    }
    if (need_bias) {          // db = column sums of g
      db = autograd::grad_buffer(2, {out_features}, g.dtype(), g.device());
      backend::column_sum(db, g_rows);
    }
    return {dx, dw, db};
  }
};

}  // namespace

Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias) {
  check_linear(x, weight, bias);
  const int64_t out_features = weight.size(0);
  // x as [N, in]: a view when its leading dims fold, else a contiguous copy.
  const Tensor x_rows = as_rows(x);
  Tensor out_rows = empty({x_rows.size(0), out_features}, x.dtype(), x.device());
  float beta = 0.f;
  if (bias.defined()) {   // out = bias (broadcast over rows), then out += x W^T
    backend::copy(out_rows, bias.detach());
    beta = 1.f;
  }
  backend::matmul(out_rows, x_rows, weight.detach().t(), 1.f, beta);
  Shape out_shape = x.shape();
  out_shape.back() = out_features;
  Tensor out = out_rows.view(out_shape);
  if (autograd::any_requires_grad(x, weight, bias)) {
    LinearBackward fn{weight.requires_grad() ? SavedTensor(x_rows, "linear") : SavedTensor(),
                      x.requires_grad() ? SavedTensor(weight, "linear") : SavedTensor(), x.shape(), x_rows.size(0),
                      out_features, bias.defined() && bias.requires_grad()};
    autograd::record("linear", {x, weight, bias}, out, std::move(fn));
  }
  return out;
}

}  // namespace encore
