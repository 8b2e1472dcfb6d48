// Neural-network ops: softmax, log_softmax, cross_entropy, layer_norm,
// embedding, dropout. Each has one fused forward kernel and one fused
// backward kernel (backend::softmax etc. in src/backends/kernels.h); the
// backward sits beside its forward.
//
// Kernels take contiguous tensors: a non-contiguous input (or incoming
// gradient) is copied once first, which costs one extra launch only on that
// rare path.
#include <algorithm>
#include <vector>

#include "encore/ops.h"
#include "src/autograd/function.h"
#include "src/backends/kernels.h"
#include "src/core/stream.h"
#include "src/ops/op_utils.h"

namespace encore {

using autograd::Grads;
using autograd::SavedTensor;

namespace {

// An incoming gradient as the kernels want it: the forward's dtype, contiguous.
Tensor dense_grad(const Tensor& g, DType dtype) { return g.to(dtype).contiguous(); }

// A contiguous tensor seen as [outer, n, inner] around dim (0-d: all 1).
struct DimSplit { int64_t outer = 1, n = 1, inner = 1; };

DimSplit split_at(const Shape& shape, int64_t dim) {
  DimSplit s;
  for (int64_t d = 0; d < static_cast<int64_t>(shape.size()); ++d) {
    if (d < dim) s.outer *= shape[d];
    if (d == dim) s.n = shape[d];
    if (d > dim) s.inner *= shape[d];
  }
  return s;
}

Tensor softmax_impl(const char* op, const Tensor& a, int64_t dim, bool log) {
  ops::check_defined(op, a, "input");
  ops::check_float(op, a);
  dim = ops::normalize_dim(op, dim, a.dim());
  const DimSplit s = split_at(a.shape(), dim);
  Tensor out = empty(a.shape(), a.dtype(), a.device());
  backend::softmax(out, a.detach().contiguous(), s.outer, s.n, s.inner, log);
  if (autograd::any_requires_grad(a)) {
    // Both backwards need only the output y (exp(y) for log_softmax).
    autograd::record(op, {a}, out, [op, s, log, so = SavedTensor(out, op)](const Tensor& g) -> Grads {
      const Tensor& y = so.get();
      Tensor gx = empty(y.shape(), y.dtype(), y.device());
      backend::softmax_backward(gx, dense_grad(g, y.dtype()), y, s.outer, s.n, s.inner, log);
      return {gx};
    });
  }
  return out;
}

// NOTE [ Index checks ] (src/backends/kernel_table.h): on the CPU, ids are read on
// the host before the launch, in eager steps, so the error names the bad id
// and its position. While the stream is observed (the recorded warm-up and
// the capture run of capture()) there is no host read: the captured graph
// must not stop for the host, and the recorded run must allocate exactly
// what the capture run does. On CUDA there is none either: reading ids would
// wait for the GPU at every call. There the kernels skip out-of-range ids
// (they never read or write out of bounds) and report them
// (src/core/kernel_errors.h): capture(), replay() or the next
// synchronization turns the report into an error naming the op.
bool index_checks_on_host(const Tensor& t) {
  return t.device().is_cpu() && !current_stream(t.device()).observed_here();
}

void check_class_ids(const Tensor& target, int64_t classes, int64_t ignore_index, const Tensor& logits) {
  if (!index_checks_on_host(target)) return;
  const std::vector<int64_t> ids = target.to_vector<int64_t>();
  for (size_t i = 0; i < ids.size(); ++i) {
    const int64_t t = ids[i];
    ENCORE_CHECK(t == ignore_index || (t >= 0 && t < classes),
                 "cross_entropy: target class %d (at flat position %d) is out of range for C = %d classes "
                 "(logits %s %s, ignore_index %d)",
                 t, i, classes, shape_str(logits.shape()), dtype_name(logits.dtype()), ignore_index);
  }
}

void check_cross_entropy_args(const Tensor& logits, const Tensor& target) {
  constexpr const char* kOp = "cross_entropy";
  ops::check_defined(kOp, logits, "logits");
  ops::check_defined(kOp, target, "target");
  ops::check_float(kOp, logits);
  ENCORE_CHECK(target.dtype() == kInt32 || target.dtype() == kInt64,
               "cross_entropy: target must hold class ids (i32 or i64), got %s %s (logits %s %s)",
               shape_str(target.shape()), dtype_name(target.dtype()), shape_str(logits.shape()),
               dtype_name(logits.dtype()));
  ENCORE_CHECK(logits.dim() >= 1, "cross_entropy: logits must have a class dim, got 0-d logits %s (%s)",
               shape_str(logits.shape()), dtype_name(logits.dtype()));
  const Shape rows(logits.shape().begin(), logits.shape().end() - 1);
  ENCORE_CHECK(target.shape() == rows,
               "cross_entropy: target shape %s does not match logits %s (%s): expected %s, one class id per row",
               shape_str(target.shape()), shape_str(logits.shape()), dtype_name(logits.dtype()), shape_str(rows));
  ENCORE_CHECK(target.device() == logits.device(), "cross_entropy: logits %s on %s but target %s on %s",
               shape_str(logits.shape()), logits.device().str(), shape_str(target.shape()),
               target.device().str());
}

// normalized_shape must be the trailing dims of x; weight/bias that shape.
void check_layer_norm_args(const Tensor& x, const Shape& normalized_shape, const Tensor& weight,
                           const Tensor& bias) {
  constexpr const char* kOp = "layer_norm";
  ops::check_defined(kOp, x, "input");
  ops::check_float(kOp, x);
  const int64_t k = static_cast<int64_t>(normalized_shape.size());
  // As PyTorch: normalizing over no dims (each element alone) is refused, not 0 + bias everywhere.
  ENCORE_CHECK(k >= 1, "layer_norm: normalized_shape must name at least one trailing dim, got [] (input %s, %s)",
               shape_str(x.shape()), dtype_name(x.dtype()));
  ENCORE_CHECK(k <= x.dim() && std::equal(normalized_shape.begin(), normalized_shape.end(), x.shape().end() - k),
               "layer_norm: normalized_shape %s does not match the trailing dims of input %s (%s)",
               shape_str(normalized_shape), shape_str(x.shape()), dtype_name(x.dtype()));
  for (const auto& [t, what] : {std::pair{&weight, "weight"}, std::pair{&bias, "bias"}}) {
    if (!t->defined()) continue;
    ops::check_same(kOp, x, *t);
    ENCORE_CHECK(t->shape() == normalized_shape,
                 "layer_norm: %s of shape %s does not match normalized_shape %s (input %s, %s)", what,
                 shape_str(t->shape()), shape_str(normalized_shape), shape_str(x.shape()), dtype_name(x.dtype()));
  }
}

// NOTE [ Index checks ] as for check_class_ids.
void check_embedding_indices(const Tensor& indices, const Tensor& weight) {
  if (!index_checks_on_host(indices)) return;
  const int64_t vocab = weight.size(0);
  const std::vector<int64_t> ids = indices.to_vector<int64_t>();
  for (size_t i = 0; i < ids.size(); ++i) {
    ENCORE_CHECK(ids[i] >= 0 && ids[i] < vocab,
                 "embedding: index %d (at flat position %d) is out of range for V = %d rows (weight %s %s)",
                 ids[i], i, vocab, shape_str(weight.shape()), dtype_name(weight.dtype()));
  }
}

}  // namespace

Tensor softmax(const Tensor& a, int64_t dim) { return softmax_impl("softmax", a, dim, false); }

Tensor log_softmax(const Tensor& a, int64_t dim) { return softmax_impl("log_softmax", a, dim, true); }

// All targets ignored gives NaN (0 / 0, as PyTorch and nll_loss) and a zero gradient.
Tensor cross_entropy(const Tensor& logits, const Tensor& target, int64_t ignore_index) {
  constexpr const char* kOp = "cross_entropy";
  check_cross_entropy_args(logits, target);
  const int64_t classes = logits.size(-1), rows = target.numel();
  Tensor x = logits.detach().reshape({rows, classes}).contiguous();
  Tensor t = target.detach().reshape({rows}).contiguous();
  check_class_ids(t, classes, ignore_index, logits);
  Tensor loss = empty({}, logits.dtype(), logits.device());
  Tensor stats = empty({2 * rows + 1}, kFloat32, logits.device());   // max and log(sum) per row, then the count
  backend::cross_entropy(loss, stats, x, t, ignore_index);
  if (autograd::any_requires_grad(logits)) {
    autograd::record(kOp, {logits}, loss,
                     [sx = SavedTensor(x, kOp), st = SavedTensor(t, kOp), ss = SavedTensor(stats, kOp),
                      shape = logits.shape(), ignore_index](const Tensor& g) -> Grads {
                       const Tensor& xs = sx.get();
                       Tensor gx = empty(xs.shape(), xs.dtype(), xs.device());
                       backend::cross_entropy_backward(gx, dense_grad(g, xs.dtype()), xs, st.get(), ss.get(),
                                                       ignore_index);
                       return {gx.view(shape)};
                     });
  }
  return loss;
}

Tensor layer_norm(const Tensor& x, Shape normalized_shape, const Tensor& weight, const Tensor& bias,
                  double eps) {
  constexpr const char* kOp = "layer_norm";
  check_layer_norm_args(x, normalized_shape, weight, bias);
  const int64_t cols = numel_of(normalized_shape);
  const int64_t rows = numel_of(absl::MakeConstSpan(x.shape()).first(x.dim() - normalized_shape.size()));
  Tensor xc = x.detach().reshape({rows, cols}).contiguous();
  Tensor wc = weight.defined() ? weight.detach().contiguous() : Tensor();
  Tensor bc = bias.defined() ? bias.detach().contiguous() : Tensor();
  Tensor out = empty(x.shape(), x.dtype(), x.device());
  Tensor stats = empty({rows, 2}, kFloat32, x.device());   // mean - x[row, 0], rstd per row
  backend::layer_norm(out, stats, xc, wc, bc, eps);
  if (autograd::any_requires_grad(x, weight, bias)) {
    const bool nx = x.requires_grad();
    const bool nw = weight.defined() && weight.requires_grad();
    const bool nb = bias.defined() && bias.requires_grad();
    autograd::record(kOp, {x, weight, bias}, out,
                     [sx = SavedTensor(xc, kOp), sw = SavedTensor(wc, kOp), ss = SavedTensor(stats, kOp),
                      x_shape = x.shape(), normalized_shape, nx, nw, nb](const Tensor& g) -> Grads {
                       const Tensor& xs = sx.get();
                       const DType dt = xs.dtype();
                       Tensor dx = nx ? empty(x_shape, dt, xs.device()) : Tensor();
                       Tensor dw = nw ? empty(normalized_shape, dt, xs.device()) : Tensor();
                       Tensor db = nb ? empty(normalized_shape, dt, xs.device()) : Tensor();
                       backend::layer_norm_backward(dx, dw, db, dense_grad(g, dt), xs, sw.get(), ss.get());
                       return {dx, dw, db};
                     });
  }
  return out;
}

Tensor embedding(const Tensor& weight, const Tensor& indices) {
  constexpr const char* kOp = "embedding";
  ops::check_defined(kOp, weight, "weight");
  ops::check_defined(kOp, indices, "indices");
  ENCORE_CHECK(weight.dim() == 2 && weight.dtype() != kBool,
               "embedding: weight must be a 2-D [V, D] numeric tensor, got %s (%s)", shape_str(weight.shape()),
               dtype_name(weight.dtype()));
  ENCORE_CHECK(indices.dtype() == kInt32 || indices.dtype() == kInt64,
               "embedding: indices must be i32 or i64, got %s %s (weight %s)", shape_str(indices.shape()),
               dtype_name(indices.dtype()), shape_str(weight.shape()));
  ENCORE_CHECK(indices.device() == weight.device(), "embedding: weight %s on %s but indices %s on %s",
               shape_str(weight.shape()), weight.device().str(), shape_str(indices.shape()),
               indices.device().str());
  Tensor idx = indices.detach().reshape({indices.numel()}).contiguous();
  check_embedding_indices(idx, weight);
  Shape out_shape = indices.shape();
  out_shape.push_back(weight.size(1));
  Tensor out = empty_for(kOp, out_shape, weight.dtype(), weight.device());
  backend::embedding(out, weight.detach().contiguous(), idx);
  if (autograd::any_requires_grad(weight)) {
    autograd::record(kOp, {weight}, out,
                     [si = SavedTensor(idx, kOp), shape = weight.shape(), dt = weight.dtype()](
                         const Tensor& g) -> Grads {
                       const Tensor& ids = si.get();
                       Tensor gw = empty(shape, dt, ids.device());
                       backend::embedding_backward(gw, dense_grad(g, dt), ids);
                       return {gw};
                     });
  }
  return out;
}

// The mask is saved as bool (1 byte per element) rather than recomputed from
// a saved (seed, offset): backward is then one cheap pass.
Tensor dropout(const Tensor& a, double p, bool training, Generator* gen) {
  constexpr const char* kOp = "dropout";
  ops::check_defined(kOp, a, "input");
  ops::check_float(kOp, a);
  ENCORE_CHECK(p >= 0.0 && p <= 1.0, "dropout: p must be in [0, 1], got %g (input %s %s)", p,
               shape_str(a.shape()), dtype_name(a.dtype()));
  if (!training || p == 0.0) return a;
  if (p == 1.0) {   // as PyTorch: every element dropped (NaN too), gradient 0, nothing drawn
    Tensor out = zeros(a.shape(), a.dtype(), a.device());
    if (autograd::any_requires_grad(a)) {
      autograd::record(kOp, {a}, out, [](const Tensor& grad) -> Grads {
        return {zeros(grad.shape(), grad.dtype(), grad.device())};
      });
    }
    return out;
  }
  Generator& g = gen != nullptr ? *gen : default_generator(a.device());
  ENCORE_CHECK(g.device() == a.device(), "dropout: generator on %s cannot draw for input %s on %s",
               g.device().str(), shape_str(a.shape()), a.device().str());
  const bool need_grad = autograd::any_requires_grad(a);
  Tensor mask = need_grad ? empty(a.shape(), kBool, a.device()) : Tensor();
  Tensor out = empty(a.shape(), a.dtype(), a.device());
  backend::dropout(out, mask, a.detach().contiguous(), g.state(), p);
  if (need_grad) {
    autograd::record(kOp, {a}, out,
                     [sm = SavedTensor(mask, kOp), scale = 1.0 / (1.0 - p), dt = a.dtype()](
                         const Tensor& grad) -> Grads {
                       const Tensor& m = sm.get();
                       Tensor gx = empty(m.shape(), dt, m.device());
                       backend::dropout_backward(gx, dense_grad(grad, dt), m, scale);
                       return {gx};
                     });
  }
  return out;
}

}  // namespace encore
