// Broadcasting arithmetic: add, sub, mul, div, their tensor-scalar forms, and
// each backward beside its forward.
#include "encore/ops.h"
#include "src/autograd/function.h"
#include "src/backends/kernels.h"
#include "src/ops/op_utils.h"

namespace encore {

using autograd::Grads;
using InputShapes = absl::Span<const autograd::InputMeta>;
using autograd::SavedTensor;
using backend::BinaryOp;
using backend::ScalarOp;

namespace {

// With take_a (take_b), out may be a's (b's) buffer (NOTE [ Writing into a
// dying temporary ]); the caller passes them only for an operand that the
// backward does not save.
Tensor binary_forward(const char* name, BinaryOp op, const Tensor& a, const Tensor& b, bool take_a = false,
                      bool take_b = false) {
  ops::check_same(name, a, b);
  ENCORE_CHECK(a.dtype() != kBool, "%s: bool tensors %s and %s do not support arithmetic", name,
               shape_str(a.shape()), shape_str(b.shape()));
  ENCORE_CHECK(op != BinaryOp::kDiv || is_floating(a.dtype()),
               "div: integer tensors %s and %s (%s) are not supported; convert with .to(kFloat32)",
               shape_str(a.shape()), shape_str(b.shape()), dtype_name(a.dtype()));
  const Shape shape = ops::broadcast_shapes(name, a, b);
  Tensor out = take_a && ops::can_write_into(a, shape)   ? ops::output_into(a, shape)
               : take_b && ops::can_write_into(b, shape) ? ops::output_into(b, shape)
                                                         : empty_for(name, shape, a.dtype(), a.device());
  backend::binary(op, out, a, b);
  return out;
}

// With `taken`, out may be a's buffer (as binary_forward's take_a).
Tensor scalar_forward(const char* name, ScalarOp op, const Tensor& a, double s, bool taken = false) {
  ops::check_defined(name, a, "input");
  ops::check_arithmetic(name, a);
  ops::check_scalar_fits(name, s, a.dtype(), a.shape());
  ENCORE_CHECK((op != ScalarOp::kRdiv && op != ScalarOp::kDiv) || is_floating(a.dtype()),
               "%s: integer tensor %s (%s) is not supported; convert with .to(kFloat32)", name,
               shape_str(a.shape()), dtype_name(a.dtype()));
  Tensor out = taken ? ops::output_into(a, a.shape()) : empty(a.shape(), a.dtype(), a.device());
  backend::binary_scalar(op, out, a, s);
  return out;
}

}  // namespace

namespace {

Tensor add_of(const Tensor& a, const Tensor& b, bool ta, bool tb) {
  Tensor out = binary_forward("add", BinaryOp::kAdd, a, b, ta, tb);
  if (autograd::any_requires_grad(a, b)) {
    autograd::record("add", {a, b}, out,
                     [na = a.requires_grad(), nb = b.requires_grad()](const Tensor& g, InputShapes in) -> Grads {
                       return {na ? sum_to(g, in[0].shape) : Tensor(), nb ? sum_to(g, in[1].shape) : Tensor()};
                     });
  }
  return out;
}

Tensor sub_of(const Tensor& a, const Tensor& b, bool ta, bool tb) {
  Tensor out = binary_forward("sub", BinaryOp::kSub, a, b, ta, tb);
  if (autograd::any_requires_grad(a, b)) {
    autograd::record("sub", {a, b}, out,
                     [na = a.requires_grad(), nb = b.requires_grad()](const Tensor& g, InputShapes in) -> Grads {
                       return {na ? sum_to(g, in[0].shape) : Tensor(), nb ? sum_to(neg(g), in[1].shape) : Tensor()};
                     });
  }
  return out;
}

// a is saved when b requires grad, b when a does: neither buffer is then open.
Tensor mul_of(const Tensor& a, const Tensor& b, bool ta, bool tb) {
  const bool grad = autograd::any_requires_grad(a, b);
  Tensor out = binary_forward("mul", BinaryOp::kMul, a, b, ta && !(grad && b.requires_grad()),
                              tb && !(grad && a.requires_grad()));
  if (grad) {
    const bool na = a.requires_grad(), nb = b.requires_grad();
    // d(a*b)/da = b, d(a*b)/db = a: each side saves only what the other needs.
    autograd::record("mul", {a, b}, out,
                     [sa = nb ? SavedTensor(a, "mul") : SavedTensor(), sb = na ? SavedTensor(b, "mul") : SavedTensor(),
                      shape_a = a.shape(), shape_b = b.shape()](const Tensor& g) -> Grads {
                       return {sb.defined() ? sum_to(mul(g, sb.get()), shape_a) : Tensor(),
                               sa.defined() ? sum_to(mul(g, sa.get()), shape_b) : Tensor()};
                     });
  }
  return out;
}

// b is saved whenever the backward runs; a never (its gradient needs only b).
Tensor div_of(const Tensor& a, const Tensor& b, bool ta, bool tb) {
  Tensor out = binary_forward("div", BinaryOp::kDiv, a, b, ta, tb && !autograd::any_requires_grad(a, b));
  if (autograd::any_requires_grad(a, b)) {
    // d(a/b)/da = 1/b, d(a/b)/db = -a/b^2 = -out/b.
    autograd::record("div", {a, b}, out,
                     [sb = SavedTensor(b, "div"), so = b.requires_grad() ? SavedTensor(out, "div") : SavedTensor(),
                      shape_a = a.shape(), na = a.requires_grad()](const Tensor& g) -> Grads {
                       Tensor g_over_b = div(g, sb.get());
                       return {na ? sum_to(g_over_b, shape_a) : Tensor(),
                               so.defined() ? sum_to(neg(mul(g_over_b, so.get())), sb.shape()) : Tensor()};
                     });
  }
  return out;
}

}  // namespace

// The consuming forms (an rvalue operand) open its buffer to the output
// (NOTE [ Writing into a dying temporary ]).
Tensor add(const Tensor& a, const Tensor& b) { return add_of(a, b, false, false); }
Tensor add(Tensor&& a, const Tensor& b) { return ops::consumed(add_of(a, b, true, false), a); }
Tensor add(const Tensor& a, Tensor&& b) { return ops::consumed(add_of(a, b, false, true), b); }
Tensor add(Tensor&& a, Tensor&& b) { return ops::consumed(add_of(a, b, true, true), a, b); }
Tensor sub(const Tensor& a, const Tensor& b) { return sub_of(a, b, false, false); }
Tensor sub(Tensor&& a, const Tensor& b) { return ops::consumed(sub_of(a, b, true, false), a); }
Tensor sub(const Tensor& a, Tensor&& b) { return ops::consumed(sub_of(a, b, false, true), b); }
Tensor sub(Tensor&& a, Tensor&& b) { return ops::consumed(sub_of(a, b, true, true), a, b); }
Tensor mul(const Tensor& a, const Tensor& b) { return mul_of(a, b, false, false); }
Tensor mul(Tensor&& a, const Tensor& b) { return ops::consumed(mul_of(a, b, true, false), a); }
Tensor mul(const Tensor& a, Tensor&& b) { return ops::consumed(mul_of(a, b, false, true), b); }
Tensor mul(Tensor&& a, Tensor&& b) { return ops::consumed(mul_of(a, b, true, true), a, b); }
Tensor div(const Tensor& a, const Tensor& b) { return div_of(a, b, false, false); }
Tensor div(Tensor&& a, const Tensor& b) { return ops::consumed(div_of(a, b, true, false), a); }
Tensor div(const Tensor& a, Tensor&& b) { return ops::consumed(div_of(a, b, false, true), b); }
Tensor div(Tensor&& a, Tensor&& b) { return ops::consumed(div_of(a, b, true, true), a, b); }

namespace {

Tensor add_of(const Tensor& a, double s, bool taken) {
  Tensor out = scalar_forward("add_scalar", ScalarOp::kAdd, a, s, taken);
  if (autograd::any_requires_grad(a)) {
    autograd::record("add_scalar", {a}, out, [](const Tensor& g) -> Grads { return {g}; });
  }
  return out;
}

Tensor mul_of(const Tensor& a, double s, bool taken) {
  Tensor out = scalar_forward("mul_scalar", ScalarOp::kMul, a, s, taken);
  if (autograd::any_requires_grad(a)) {
    autograd::record("mul_scalar", {a}, out, [s](const Tensor& g) -> Grads { return {mul(g, s)}; });
  }
  return out;
}

Tensor rsub_of(const Tensor& a, double s, bool taken) {
  Tensor out = scalar_forward("rsub_scalar", ScalarOp::kRsub, a, s, taken);
  if (autograd::any_requires_grad(a)) {
    autograd::record("rsub_scalar", {a}, out, [](const Tensor& g) -> Grads { return {neg(g)}; });
  }
  return out;
}

// a / s, rounded once (not a * (1 / s), which differs in the last bit).
Tensor div_of(const Tensor& a, double s, bool taken) {
  Tensor out = scalar_forward("div_scalar", ScalarOp::kDiv, a, s, taken);
  if (autograd::any_requires_grad(a)) {
    autograd::record("div_scalar", {a}, out, [s](const Tensor& g) -> Grads { return {div(g, s)}; });
  }
  return out;
}

// a is saved when the backward runs.
Tensor rdiv_of(const Tensor& a, double s, bool taken) {
  Tensor out = scalar_forward("rdiv_scalar", ScalarOp::kRdiv, a, s, taken && !autograd::any_requires_grad(a));
  if (autograd::any_requires_grad(a)) {
    // d(s/a)/da = -s/a^2 = -out/a.
    autograd::record("rdiv_scalar", {a}, out,
                     [sa = SavedTensor(a, "rdiv_scalar"), so = SavedTensor(out, "rdiv_scalar")](
                         const Tensor& g) -> Grads { return {neg(div(mul(g, so.get()), sa.get()))}; });
  }
  return out;
}

Tensor neg_of(const Tensor& a, bool taken) {
  Tensor out = scalar_forward("neg", ScalarOp::kMul, a, -1.0, taken);
  if (autograd::any_requires_grad(a)) {
    autograd::record("neg", {a}, out, [](const Tensor& g) -> Grads { return {neg(g)}; });
  }
  return out;
}

}  // namespace

// The scalar forms, borrowing and consuming.
Tensor add(const Tensor& a, double s) { return add_of(a, s, false); }
Tensor add(Tensor&& a, double s) { return ops::consumed(add_of(a, s, true), a); }
Tensor mul(const Tensor& a, double s) { return mul_of(a, s, false); }
Tensor mul(Tensor&& a, double s) { return ops::consumed(mul_of(a, s, true), a); }
Tensor rsub(const Tensor& a, double s) { return rsub_of(a, s, false); }
Tensor rsub(Tensor&& a, double s) { return ops::consumed(rsub_of(a, s, true), a); }
Tensor div(const Tensor& a, double s) { return div_of(a, s, false); }
Tensor div(Tensor&& a, double s) { return ops::consumed(div_of(a, s, true), a); }
Tensor rdiv(const Tensor& a, double s) { return rdiv_of(a, s, false); }
Tensor rdiv(Tensor&& a, double s) { return ops::consumed(rdiv_of(a, s, true), a); }
Tensor neg(const Tensor& a) { return neg_of(a, false); }
Tensor neg(Tensor&& a) { return ops::consumed(neg_of(a, true), a); }

Tensor Tensor::matmul(const Tensor& o) const { return encore::matmul(*this, o); }
Tensor Tensor::sum() const { return encore::sum(*this); }
Tensor Tensor::mean() const { return encore::mean(*this); }

}  // namespace encore
