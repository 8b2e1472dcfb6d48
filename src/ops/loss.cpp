// Losses: mse_loss, binary_cross_entropy_with_logits and nll_loss, each
// with its reduction. mse_loss is composed of sub, mul and mean/sum (exact:
// the same kernels a user would call); the other two have one kernel for
// their elementwise core (src/backends/kernels.h, loss section) with its
// backward beside it, and compose the weight and the reduction around it,
// so each backward is the chain of those ops. f16/bf16 round once:
// mse_loss and binary_cross_entropy_with_logits run on f32 upcasts,
// nll_loss reduces in f32 (NOTE [ nll_loss in f16/bf16 ]).
#include <vector>

#include "encore/ops.h"
#include "src/autograd/function.h"
#include "src/backends/kernels.h"
#include "src/ops/op_utils.h"

namespace encore {

using autograd::Grads;
using autograd::SavedTensor;
using backend::BceMode;

namespace {

Tensor reduce(const Tensor& l, Reduction reduction) {
  switch (reduction) {
    case Reduction::kNone: return l;
    case Reduction::kSum: return sum(l);
    case Reduction::kMean: break;
  }
  return mean(l);
}

// The elementwise binary cross-entropy with logits (no weight, no
// reduction), with its gradients to x and t from one kernel each.
Tensor bce_elementwise(const Tensor& x, const Tensor& t, const Tensor& pw) {
  constexpr const char* kOp = "binary_cross_entropy_with_logits";
  Tensor out = empty(x.shape(), x.dtype(), x.device());
  const Tensor pwd = pw.defined() ? pw.detach() : Tensor();
  backend::bce_logits(BceMode::kLoss, out, x.detach(), t.detach(), pwd);
  if (autograd::any_requires_grad(x, t)) {
    autograd::record(kOp, {x, t}, out,
                     [sx = SavedTensor(x, kOp), st = SavedTensor(t, kOp), spw = SavedTensor(pwd, kOp),
                      nx = x.requires_grad(), nt = t.requires_grad()](const Tensor& g) -> Grads {
                       const Tensor& xs = sx.get();
                       const Tensor gs = g.dtype() == xs.dtype() ? g : g.to(xs.dtype());
                       Grads grads(2);
                       for (int i = 0; i < 2; ++i) {
                         if (!(i == 0 ? nx : nt)) continue;
                         Tensor d = empty(xs.shape(), xs.dtype(), xs.device());
                         backend::bce_logits(i == 0 ? BceMode::kGradInput : BceMode::kGradTarget, d, xs,
                                             st.get(), spw.defined() ? spw.get() : Tensor());
                         grads[i] = mul(gs, d);
                       }
                       return grads;
                     });
  }
  return out;
}

// A tensor that must broadcast to x's shape (the product keeps x's shape).
void check_broadcasts_to(const char* op, const char* what, const Tensor& w, const Tensor& x) {
  ops::check_same(op, x, w);
  ENCORE_CHECK(ops::broadcast_shapes(op, x, w) == x.shape(),
               "%s: %s of shape %s does not broadcast to the input's shape %s (%s)", op, what,
               shape_str(w.shape()), shape_str(x.shape()), dtype_name(x.dtype()));
}

// NOTE [ Index checks ]: class ids are refused on the host in eager CPU steps.
void check_nll_targets(const Tensor& t, int64_t classes, int64_t ignore_index, const Tensor& input) {
  if (!ops::host_checks_allowed(t)) return;
  const std::vector<int64_t> ids = t.to_vector<int64_t>();
  for (size_t i = 0; i < ids.size(); ++i) {
    ENCORE_CHECK(ids[i] == ignore_index || (ids[i] >= 0 && ids[i] < classes),
                 "nll_loss: target class %d (at flat position %d) is out of range for C = %d classes "
                 "(input %s %s, ignore_index %d)",
                 ids[i], i, classes, shape_str(input.shape()), dtype_name(input.dtype()), ignore_index);
  }
}

// NOTE [ nll_loss in f16/bf16 ]
// Rounded at each op, f16/bf16 nll_loss drifted from "computed in f32,
// rounded once" (include/encore/ops.h): sums of 70000 weights passed 65504
// in f16 (the mean was 0), and with class weights the kernel rounded
// -w[t] x[t] to the storage type, and backward -w[t] g after g itself had
// been rounded (two roundings). So for f16/bf16 the kernel runs without
// weights: vals = -x[t] and the 0/1 counts, both exact; a second launch with
// the weights writes w[t] (0 where ignored, exact) into wts. Here they are
// converted to f32 (exactly), weighed, reduced there, and the result is
// rounded once; autograd goes back through the same f32 ops to the
// unweighted kernel, so the gradient is the f32 one rounded once too.
Tensor reduce_nll_in_f32(const Tensor& vals, const Tensor& wts, bool weighted, Reduction reduction,
                         const Shape& target_shape) {
  const DType dt = vals.dtype();
  const Tensor wf = wts.to(kFloat32);
  const Tensor vf = weighted ? mul(vals.to(kFloat32), wf) : vals.to(kFloat32);
  switch (reduction) {
    case Reduction::kNone: return vf.to(dt).view(target_shape);
    case Reduction::kSum: return sum(vf).to(dt);
    case Reduction::kMean: break;
  }
  return div(sum(vf), sum(wf)).to(dt);
}

}  // namespace

Tensor mse_loss(const Tensor& input, const Tensor& target, Reduction reduction) {
  constexpr const char* kOp = "mse_loss";
  ops::check_defined(kOp, input, "input");
  ops::check_defined(kOp, target, "target");
  ops::check_same(kOp, input, target);
  ops::check_float(kOp, input);
  ENCORE_CHECK(ops::broadcast_shapes(kOp, input, target) == input.shape(),
               "mse_loss: target of shape %s does not broadcast to the input's shape %s (%s)",
               shape_str(target.shape()), shape_str(input.shape()), dtype_name(input.dtype()));
  if (const DType dt = input.dtype(), acc = ops::sum_dtype(dt); acc != dt) {
    // f16/bf16: as binary_cross_entropy_with_logits below, the f32 loss of
    // the exact upcasts rounded once (and so each gradient); composed in the
    // storage type, the difference, its square and the reduction each rounded.
    return mse_loss(input.to(acc), target.to(acc), reduction).to(dt);
  }
  const Tensor d = sub(input, target);
  return reduce(mul(d, d), reduction);
}

Tensor binary_cross_entropy_with_logits(const Tensor& input, const Tensor& target, const Tensor& weight,
                                        const Tensor& pos_weight, Reduction reduction) {
  constexpr const char* kOp = "binary_cross_entropy_with_logits";
  ops::check_defined(kOp, input, "input");
  ops::check_defined(kOp, target, "target");
  ops::check_same(kOp, input, target);
  ops::check_float(kOp, input);
  ENCORE_CHECK(target.shape() == input.shape(),
               "binary_cross_entropy_with_logits: target %s must have the input's shape %s (%s)",
               shape_str(target.shape()), shape_str(input.shape()), dtype_name(input.dtype()));
  if (weight.defined()) check_broadcasts_to(kOp, "weight", weight, input);
  if (pos_weight.defined()) {
    check_broadcasts_to(kOp, "pos_weight", pos_weight, input);
    ENCORE_CHECK(!autograd::any_requires_grad(pos_weight),
                 "binary_cross_entropy_with_logits: the gradient of pos_weight (%s %s) is not implemented; "
                 "detach it", shape_str(pos_weight.shape()), dtype_name(pos_weight.dtype()));
  }
  const DType dt = input.dtype(), acc = ops::sum_dtype(dt);
  if (acc != dt) {
    // f16/bf16: the loss of the exact f32 upcasts, rounded once; each
    // gradient is the f32 one rounded once (the backward of .to). Composed in
    // the storage type, the elementwise loss, its product with weight and
    // the gradients were each rounded on the way, and weight's gradient
    // summed rounded products (20 roundings off in f16 over 600 rows).
    auto up = [acc](const Tensor& t) { return t.defined() ? t.to(acc) : t; };
    return binary_cross_entropy_with_logits(up(input), up(target), up(weight), up(pos_weight), reduction).to(dt);
  }
  Tensor l = bce_elementwise(input, target, pos_weight);
  if (weight.defined()) l = mul(l, weight);
  return reduce(l, reduction);
}

// PyTorch's semantics: the mean divides by the sum of the counted targets'
// weights, so all targets ignored gives NaN (0 / 0).
Tensor nll_loss(const Tensor& input, const Tensor& target, const Tensor& weight, int64_t ignore_index,
                Reduction reduction) {
  constexpr const char* kOp = "nll_loss";
  ops::check_defined(kOp, input, "input");
  ops::check_defined(kOp, target, "target");
  ops::check_float(kOp, input);
  ENCORE_CHECK(target.dtype() == kInt32 || target.dtype() == kInt64,
               "nll_loss: target must hold class ids (i32 or i64), got %s %s (input %s %s)",
               shape_str(target.shape()), dtype_name(target.dtype()), shape_str(input.shape()),
               dtype_name(input.dtype()));
  ENCORE_CHECK(target.device() == input.device(), "nll_loss: input %s on %s but target %s on %s",
               shape_str(input.shape()), input.device().str(), shape_str(target.shape()), target.device().str());
  ENCORE_CHECK(input.dim() >= 1, "nll_loss: input must be [C], [N, C] or [N, C, d1, ...], got 0-d (%s)",
               dtype_name(input.dtype()));
  // [C] with a 0-d target is one row; else dim 1 holds the classes.
  const bool unbatched = input.dim() == 1;
  const int64_t classes = unbatched ? input.size(0) : input.size(1);
  Shape expected;
  if (!unbatched) {
    expected.push_back(input.size(0));
    for (int64_t d = 2; d < input.dim(); ++d) expected.push_back(input.size(d));
  }
  ENCORE_CHECK(target.shape() == expected,
               "nll_loss: target shape %s does not match input %s (%s): expected %s", shape_str(target.shape()),
               shape_str(input.shape()), dtype_name(input.dtype()), shape_str(expected));
  if (weight.defined()) {
    ops::check_same(kOp, input, weight);
    ENCORE_CHECK(weight.shape() == Shape{classes},
                 "nll_loss: weight of shape %s must be [C] = [%d] (input %s %s)", shape_str(weight.shape()),
                 classes, shape_str(input.shape()), dtype_name(input.dtype()));
    ENCORE_CHECK(!autograd::any_requires_grad(weight),
                 "nll_loss: the gradient of weight (%s %s) is not implemented; detach it",
                 shape_str(weight.shape()), dtype_name(weight.dtype()));
  }
  const int64_t outer = unbatched ? 1 : input.size(0);
  int64_t inner = 1;
  for (int64_t d = 2; d < input.dim(); ++d) inner *= input.size(d);
  const Tensor x = input.detach().reshape({outer, classes, inner}).contiguous();
  const Tensor t = target.detach().reshape({outer * inner}).contiguous();
  const Tensor w = weight.defined() ? weight.detach().contiguous() : Tensor();
  check_nll_targets(t, classes, ignore_index, input);
  const DType dt = input.dtype();
  const bool half = ops::sum_dtype(dt) != dt;
  // f16/bf16 with weights: the kernel runs unweighted (NOTE [ nll_loss in f16/bf16 ]).
  const Tensor kernel_w = half ? Tensor() : w;
  Tensor vals = empty({outer * inner}, dt, input.device());
  Tensor wts = empty({outer * inner}, dt, input.device());
  backend::nll(vals, wts, x, t, kernel_w, ignore_index);
  if (autograd::any_requires_grad(input)) {
    autograd::record(kOp, {input}, vals,
                     [st = SavedTensor(t, kOp), sw = SavedTensor(kernel_w, kOp), shape = input.shape(), outer,
                      classes, inner, ignore_index, dt](const Tensor& g) -> Grads {
                       const Tensor& ts = st.get();
                       Tensor gx = empty({outer, classes, inner}, dt, ts.device());
                       backend::nll_backward(gx, g.to(dt).contiguous(), ts, sw.defined() ? sw.get() : Tensor(),
                                             ignore_index);
                       return {gx.view(shape)};
                     });
  }
  if (half) {
    if (w.defined()) backend::nll(empty({outer * inner}, dt, input.device()), wts, x, t, w, ignore_index);
    return reduce_nll_in_f32(vals, wts, w.defined(), reduction, target.shape());
  }
  switch (reduction) {
    case Reduction::kNone: return vals.view(target.shape());
    case Reduction::kSum: return sum(vals);
    case Reduction::kMean: break;
  }
  return div(sum(vals), sum(wts));
}

}  // namespace encore
