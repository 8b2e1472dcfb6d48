// Elementwise unary math: exp, log, sqrt, rsqrt, pow, abs, tanh, sigmoid,
// relu, gelu, silu, clamp, each with its backward beside its forward. (neg is
// in binary.cpp, as mul by -1.)
//
// Every backward is one fused kernel (backend::unary_backward) reading the
// output gradient and one saved tensor: the output y where the derivative is
// a function of y (exp, sqrt, rsqrt, tanh, sigmoid, relu), else the input x.
// Saving y lets x be freed when nothing else holds it.
#include <cmath>

#include "encore/ops.h"
#include "src/autograd/function.h"
#include "src/backends/kernels.h"
#include "src/ops/op_utils.h"

namespace encore {

using autograd::Grads;
using autograd::SavedTensor;
using backend::UnaryOp;

namespace {

// Runs op on a (already checked) and records its backward when needed. With
// `taken` (a consuming overload), out may be a's buffer unless the backward
// saves a (NOTE [ Writing into a dying temporary ]).
Tensor unary_forward(const char* name, UnaryOp op, const Tensor& a, bool taken, double p0 = 0.0, double p1 = 0.0) {
  const bool saves_a = autograd::any_requires_grad(a) && !backend::unary_saves_output(op);
  Tensor out = taken && !saves_a ? ops::output_into(a, a.shape()) : ops::empty_like(a);
  backend::unary(op, out, a, p0, p1);
  if (autograd::any_requires_grad(a)) {
    SavedTensor saved(backend::unary_saves_output(op) ? out : a, name);
    autograd::record(name, {a}, out, [op, p0, p1, saved = std::move(saved)](Tensor&& g) -> Grads {
      const Tensor& s = saved.get();
      // A caller-given root gradient may come in another float dtype.
      const Tensor gs = g.dtype() == s.dtype() ? std::move(g) : g.to(s.dtype());
      // Into the gradient's own buffer when the engine held it alone: the
      // kernel reads each element before writing it.
      Tensor grad_in = ops::output_into(gs, s.shape());
      backend::unary_backward(op, grad_in, gs, s, p0, p1);
      return {grad_in};
    });
  }
  return out;
}

Tensor float_unary(const char* name, UnaryOp op, const Tensor& a, bool taken, double p0 = 0.0) {
  ops::check_defined(name, a, "input");
  ops::check_float(name, a);
  return unary_forward(name, op, a, taken, p0);
}

// The consuming overload of a float op (NOTE [ Writing into a dying temporary ]).
Tensor consuming_float_unary(Tensor& a, const char* name, UnaryOp op, double p0 = 0.0) {
  return ops::consumed(float_unary(name, op, a, /*taken=*/true, p0), a);
}

// abs, relu, clamp: floats and integers, not bool.
void check_numeric(const char* name, const Tensor& a) {
  ops::check_defined(name, a, "input");
  ENCORE_CHECK(a.dtype() != kBool, "%s: bool tensor %s is not supported (needs a float or integer dtype)", name,
               shape_str(a.shape()));
}

bool is_whole_or_infinite(double v) { return std::isinf(v) || v == std::trunc(v); }

}  // namespace

Tensor exp(const Tensor& a) { return float_unary("exp", UnaryOp::kExp, a, false); }
Tensor log(const Tensor& a) { return float_unary("log", UnaryOp::kLog, a, false); }
Tensor sqrt(const Tensor& a) { return float_unary("sqrt", UnaryOp::kSqrt, a, false); }
Tensor rsqrt(const Tensor& a) { return float_unary("rsqrt", UnaryOp::kRsqrt, a, false); }
Tensor pow(const Tensor& a, double exponent) { return float_unary("pow", UnaryOp::kPow, a, false, exponent); }
Tensor tanh(const Tensor& a) { return float_unary("tanh", UnaryOp::kTanh, a, false); }
Tensor sigmoid(const Tensor& a) { return float_unary("sigmoid", UnaryOp::kSigmoid, a, false); }
Tensor silu(const Tensor& a) { return float_unary("silu", UnaryOp::kSilu, a, false); }

namespace {
Tensor gelu_of(const Tensor& a, GeluApprox approx, bool taken) {
  return approx == GeluApprox::kTanh ? float_unary("gelu_tanh", UnaryOp::kGeluTanh, a, taken)
                                     : float_unary("gelu", UnaryOp::kGeluErf, a, taken);
}

Tensor abs_of(const Tensor& a, bool taken) {
  check_numeric("abs", a);
  return unary_forward("abs", UnaryOp::kAbs, a, taken);
}

// Integer tensors never require grad (requires_grad_ refuses them), so relu
// on i32/i64 records nothing.
Tensor relu_of(const Tensor& a, bool taken) {
  check_numeric("relu", a);
  return unary_forward("relu", UnaryOp::kRelu, a, taken);
}

// The gradient passes where min <= x <= max (both bounds inclusive, as in
// PyTorch). min > max is refused rather than silently giving max everywhere.
Tensor clamp_of(const Tensor& a, double min, double max, bool taken) {
  check_numeric("clamp", a);
  ENCORE_CHECK(!std::isnan(min) && !std::isnan(max), "clamp: bounds must not be NaN (min %g, max %g; tensor %s %s)",
               min, max, shape_str(a.shape()), dtype_name(a.dtype()));
  ENCORE_CHECK(min <= max, "clamp: min %g is greater than max %g (tensor %s %s)", min, max, shape_str(a.shape()),
               dtype_name(a.dtype()));
  ENCORE_CHECK(is_floating(a.dtype()) || (is_whole_or_infinite(min) && is_whole_or_infinite(max)),
               "clamp: bounds %g and %g must be whole numbers (or infinite) for the integer tensor %s %s", min,
               max, shape_str(a.shape()), dtype_name(a.dtype()));
  return unary_forward("clamp", UnaryOp::kClamp, a, taken, min, max);
}
}  // namespace

Tensor gelu(const Tensor& a, GeluApprox approx) { return gelu_of(a, approx, false); }
Tensor abs(const Tensor& a) { return abs_of(a, false); }
Tensor relu(const Tensor& a) { return relu_of(a, false); }
Tensor clamp(const Tensor& a, double min, double max) { return clamp_of(a, min, max, false); }

// The consuming overloads (NOTE [ Writing into a dying temporary ]).
Tensor exp(Tensor&& a) { return consuming_float_unary(a, "exp", UnaryOp::kExp); }
Tensor log(Tensor&& a) { return consuming_float_unary(a, "log", UnaryOp::kLog); }
Tensor sqrt(Tensor&& a) { return consuming_float_unary(a, "sqrt", UnaryOp::kSqrt); }
Tensor rsqrt(Tensor&& a) { return consuming_float_unary(a, "rsqrt", UnaryOp::kRsqrt); }
Tensor pow(Tensor&& a, double exponent) { return consuming_float_unary(a, "pow", UnaryOp::kPow, exponent); }
Tensor tanh(Tensor&& a) { return consuming_float_unary(a, "tanh", UnaryOp::kTanh); }
Tensor sigmoid(Tensor&& a) { return consuming_float_unary(a, "sigmoid", UnaryOp::kSigmoid); }
Tensor silu(Tensor&& a) { return consuming_float_unary(a, "silu", UnaryOp::kSilu); }
Tensor gelu(Tensor&& a, GeluApprox approx) { return ops::consumed(gelu_of(a, approx, true), a); }
Tensor abs(Tensor&& a) { return ops::consumed(abs_of(a, true), a); }
Tensor relu(Tensor&& a) { return ops::consumed(relu_of(a, true), a); }
Tensor clamp(Tensor&& a, double min, double max) { return ops::consumed(clamp_of(a, min, max, true), a); }

}  // namespace encore
