// Convolutional-network ops: conv2d, max_pool2d, avg_pool2d,
// adaptive_avg_pool2d, batch_norm and flatten, with PyTorch's argument names,
// shape rules and defaults. Each checks its arguments, computes the output
// sizes and runs one backend launch (src/backends/cnn.cpp); its backward
// sits beside it. Kernels take contiguous NCHW tensors: other layouts are
// copied once first.
#include <algorithm>
#include <cmath>

#include "encore/ops.h"
#include "src/autograd/function.h"
#include "src/backends/kernels.h"
#include "src/ops/op_utils.h"

namespace encore {

using autograd::Grads;
using autograd::SavedTensor;

namespace {

Tensor dense(const Tensor& t) { return t.detach().contiguous(); }
Tensor dense_grad(const Tensor& g, DType dtype) { return g.to(dtype).contiguous(); }

std::string pair_str(Size2 s) { return absl::StrFormat("(%d, %d)", s.h, s.w); }

void check_positive(const char* op, const char* what, Size2 s, const Tensor& input) {
  ENCORE_CHECK(s.h > 0 && s.w > 0, "%s: %s must be positive, got %s (input %s %s)", op, what, pair_str(s),
               shape_str(input.shape()), dtype_name(input.dtype()));
}
void check_non_negative(const char* op, const char* what, Size2 s, const Tensor& input) {
  ENCORE_CHECK(s.h >= 0 && s.w >= 0, "%s: %s must be non-negative, got %s (input %s %s)", op, what, pair_str(s),
               shape_str(input.shape()), dtype_name(input.dtype()));
}

// One axis of a sliding window: the padded input (in + 2 pad) and the
// dilated window (dil (k - 1) + 1), refused where either passes int64 (a
// huge padding, kernel or dilation: their products would wrap).
struct Axis {
  int64_t padded, window;
};
Axis axis_of(const char* op, const char* axis, int64_t in, int64_t k, int64_t pad, int64_t dil,
             const Tensor& input) {
  Axis a{};
  const bool wraps = __builtin_mul_overflow(pad, int64_t{2}, &a.padded) ||
                     __builtin_add_overflow(a.padded, in, &a.padded) ||
                     __builtin_mul_overflow(dil, k - 1, &a.window) || __builtin_add_overflow(a.window, 1, &a.window);
  ENCORE_CHECK(!wraps, "%s: %s size %d with padding %d, kernel %d and dilation %d passes 2^63 (input %s)", op, axis,
               in, pad, k, dil, shape_str(input.shape()));
  return a;
}

// PyTorch's pooling_output_shape: floor((padded - window + (ceil_mode ?
// stride - 1 : 0)) / stride) + 1, rounding toward -inf, and with ceil_mode
// the last window must start inside the input or its left padding. Written
// so that nothing wraps for sizes axis_of accepted and stride > 0.
int64_t pool_out(int64_t in, int64_t pad, int64_t stride, const Axis& a, bool ceil_mode) {
  const int64_t span = a.padded - a.window;   // both in [1, 2^63): no wrap
  int64_t out;
  if (span >= 0) {
    out = span / stride + 1 + (ceil_mode && span % stride != 0 ? 1 : 0);
  } else {
    const int64_t s = span + (ceil_mode ? stride - 1 : 0);   // negative plus non-negative: no wrap
    out = (s >= 0 ? s / stride : -((-s - 1) / stride) - 1) + 1;
  }
  int64_t last_start;
  if (ceil_mode && out > 0 && (__builtin_mul_overflow(out - 1, stride, &last_start) || last_start >= in + pad)) {
    --out;
  }
  return out;
}

// An input of 3 (C, H, W) or 4 (N, C, H, W) dims for pooling.
void check_pool_input(const char* op, const Tensor& input) {
  ops::check_defined(op, input, "input");
  ops::check_float(op, input);
  ENCORE_CHECK(input.dim() == 3 || input.dim() == 4,
               "%s: input must be 3-D (C, H, W) or 4-D (N, C, H, W), got %s (%s)", op, shape_str(input.shape()),
               dtype_name(input.dtype()));
  for (int64_t d = input.dim() - 3; d < input.dim(); ++d) {
    ENCORE_CHECK(input.size(d) > 0, "%s: input %s has an empty channel or spatial dim (only the batch may be 0)",
                 op, shape_str(input.shape()));
  }
}

Shape pooled_shape(const Tensor& input, int64_t oh, int64_t ow) {
  Shape s = input.shape();
  s[s.size() - 2] = oh;
  s[s.size() - 1] = ow;
  return s;
}

backend::PoolGeom pool_geom(const char* op, const Tensor& input, Size2 kernel, Size2 stride, Size2 padding,
                            Size2 dilation, bool ceil_mode) {
  check_positive(op, "kernel_size", kernel, input);
  check_positive(op, "stride", stride, input);
  check_non_negative(op, "padding", padding, input);
  check_positive(op, "dilation", dilation, input);
  const int64_t h = input.size(-2), w = input.size(-1);
  const Axis ah = axis_of(op, "height", h, kernel.h, padding.h, dilation.h, input);
  const Axis aw = axis_of(op, "width", w, kernel.w, padding.w, dilation.w, input);
  ENCORE_CHECK(ah.padded - h <= ah.window && aw.padded - w <= aw.window,
               "%s: padding %s must be at most half of the kernel %s (dilation %s; input %s)", op, pair_str(padding),
               pair_str(kernel), pair_str(dilation), shape_str(input.shape()));
  backend::PoolGeom g{};
  g.h = h, g.w = w;
  g.planes = input.numel() / std::max<int64_t>(1, h * w);
  g.kh = kernel.h, g.kw = kernel.w;
  g.stride_h = stride.h, g.stride_w = stride.w;
  g.pad_h = padding.h, g.pad_w = padding.w;
  g.dil_h = dilation.h, g.dil_w = dilation.w;
  g.oh = pool_out(h, padding.h, stride.h, ah, ceil_mode);
  g.ow = pool_out(w, padding.w, stride.w, aw, ceil_mode);
  ENCORE_CHECK(g.oh > 0 && g.ow > 0,
               "%s: input %s is too small for kernel %s, stride %s, padding %s, dilation %s: output would be "
               "%d x %d",
               op, shape_str(input.shape()), pair_str(kernel), pair_str(stride), pair_str(padding),
               pair_str(dilation), g.oh, g.ow);
  return g;
}

Tensor avg_pool_impl(const char* op, const Tensor& input, const backend::PoolGeom& g, backend::AvgPoolMode mode) {
  Tensor x = dense(input);
  Tensor out = empty_for(op, pooled_shape(input, g.oh, g.ow), input.dtype(), input.device());
  backend::avg_pool2d(out, x, g, mode);
  if (autograd::any_requires_grad(input)) {
    autograd::record(op, {input}, out, [g, mode, shape = input.shape(), dt = input.dtype(),
                                        dev = input.device()](const Tensor& grad) -> Grads {
      Tensor gx = empty(shape, dt, dev);
      backend::avg_pool2d_backward(gx, dense_grad(grad, dt), g, mode);
      return {gx};
    });
  }
  return out;
}

}  // namespace

Tensor conv2d(const Tensor& input, const Tensor& weight, const Tensor& bias, Size2 stride, Size2 padding,
              Size2 dilation, int64_t groups) {
  constexpr const char* kOp = "conv2d";
  ops::check_defined(kOp, input, "input");
  ops::check_defined(kOp, weight, "weight");
  ops::check_float(kOp, input);
  ops::check_same(kOp, input, weight);
  ENCORE_CHECK(input.dim() == 4 && weight.dim() == 4,
               "conv2d: input must be 4-D (N, C, H, W) and weight 4-D (K, C / groups, kH, kW), got input %s and "
               "weight %s (%s)",
               shape_str(input.shape()), shape_str(weight.shape()), dtype_name(input.dtype()));
  check_positive(kOp, "stride", stride, input);
  check_non_negative(kOp, "padding", padding, input);
  check_positive(kOp, "dilation", dilation, input);
  const int64_t n = input.size(0), c = input.size(1), h = input.size(2), w = input.size(3);
  const int64_t k = weight.size(0), kh = weight.size(2), kw = weight.size(3);
  ENCORE_CHECK(groups > 0 && c % groups == 0 && k % groups == 0 && weight.size(1) * groups == c,
               "conv2d: input %s with %d channels and weight %s do not fit groups = %d (weight must be "
               "[K, C / groups, kH, kW] with C and K divisible by groups)",
               shape_str(input.shape()), c, shape_str(weight.shape()), groups);
  ENCORE_CHECK(kh > 0 && kw > 0 && k > 0 && weight.size(1) > 0, "conv2d: weight %s has an empty dim (input %s)",
               shape_str(weight.shape()), shape_str(input.shape()));
  ENCORE_CHECK(h > 0 && w > 0, "conv2d: input %s has an empty spatial dim (weight %s)", shape_str(input.shape()),
               shape_str(weight.shape()));
  if (bias.defined()) {
    ops::check_same(kOp, input, bias);
    ENCORE_CHECK(bias.dim() == 1 && bias.size(0) == k, "conv2d: bias %s must be [%d] for weight %s",
                 shape_str(bias.shape()), k, shape_str(weight.shape()));
  }
  const Axis ah = axis_of(kOp, "height", h, kh, padding.h, dilation.h, input);
  const Axis aw = axis_of(kOp, "width", w, kw, padding.w, dilation.w, input);
  ENCORE_CHECK(ah.padded >= ah.window && aw.padded >= aw.window,
               "conv2d: input %s padded by %s is smaller than the kernel %s dilated by %s", shape_str(input.shape()),
               pair_str(padding), shape_str(weight.shape()), pair_str(dilation));
  const int64_t oh = (ah.padded - ah.window) / stride.h + 1;
  const int64_t ow = (aw.padded - aw.window) / stride.w + 1;
  const backend::Conv2dParams p{{stride.h, stride.w}, {padding.h, padding.w}, {dilation.h, dilation.w}, groups};
  Tensor x = dense(input), wc = dense(weight), bc = bias.defined() ? dense(bias) : Tensor();
  Tensor out = empty_for(kOp, {n, k, oh, ow}, input.dtype(), input.device());
  backend::conv2d(out, x, wc, bc, p);
  if (autograd::any_requires_grad(input, weight, bias)) {
    const bool nx = input.requires_grad(), nw = weight.requires_grad();
    const bool nb = bias.defined() && bias.requires_grad();
    autograd::record(kOp, {input, weight, bias}, out,
                     [sx = SavedTensor(x, kOp), sw = SavedTensor(wc, kOp), p, nx, nw, nb,
                      has_bias = bias.defined()](const Tensor& g) -> Grads {
                       const Tensor& xs = sx.get();
                       const Tensor& ws = sw.get();
                       const Tensor gy = dense_grad(g, xs.dtype());
                       Tensor gx, gw, gb;
                       if (nx) {
                         gx = empty(xs.shape(), xs.dtype(), xs.device());
                         backend::conv2d_backward_data(gx, gy, ws, p);
                       }
                       if (nw || nb) {
                         gw = empty(ws.shape(), ws.dtype(), ws.device());
                         gb = has_bias ? empty({ws.size(0)}, ws.dtype(), ws.device()) : Tensor();
                         backend::conv2d_backward_weights(gw, gb, xs, gy, p);
                       }
                       return {gx, nw ? gw : Tensor(), nb ? gb : Tensor()};
                     });
  }
  return out;
}

Tensor max_pool2d(const Tensor& input, Size2 kernel_size, std::optional<Size2> stride, Size2 padding,
                  Size2 dilation, bool ceil_mode) {
  constexpr const char* kOp = "max_pool2d";
  check_pool_input(kOp, input);
  const backend::PoolGeom g =
      pool_geom(kOp, input, kernel_size, stride.value_or(kernel_size), padding, dilation, ceil_mode);
  Tensor x = dense(input);
  const Shape out_shape = pooled_shape(input, g.oh, g.ow);
  Tensor out = empty_for(kOp, out_shape, input.dtype(), input.device());
  Tensor indices = empty(out_shape, kInt64, input.device());
  backend::max_pool2d(out, indices, x, g);
  if (autograd::any_requires_grad(input)) {
    autograd::record(kOp, {input}, out,
                     [si = SavedTensor(indices, kOp), g, shape = input.shape(), dt = input.dtype()](
                         const Tensor& grad) -> Grads {
                       const Tensor& idx = si.get();
                       Tensor gx = empty(shape, dt, idx.device());
                       backend::max_pool2d_backward(gx, dense_grad(grad, dt), idx, g);
                       return {gx};
                     });
  }
  return out;
}

Tensor avg_pool2d(const Tensor& input, Size2 kernel_size, std::optional<Size2> stride, Size2 padding,
                  bool ceil_mode, bool count_include_pad) {
  constexpr const char* kOp = "avg_pool2d";
  check_pool_input(kOp, input);
  const backend::PoolGeom g =
      pool_geom(kOp, input, kernel_size, stride.value_or(kernel_size), padding, Size2(1), ceil_mode);
  return avg_pool_impl(kOp, input, g,
                       count_include_pad ? backend::AvgPoolMode::kIncludePad : backend::AvgPoolMode::kExcludePad);
}

Tensor adaptive_avg_pool2d(const Tensor& input, Size2 output_size) {
  constexpr const char* kOp = "adaptive_avg_pool2d";
  check_pool_input(kOp, input);
  check_positive(kOp, "output_size", output_size, input);
  const int64_t h = input.size(-2), w = input.size(-1);
  ENCORE_CHECK(h > 0 && w > 0, "adaptive_avg_pool2d: input %s has an empty spatial dim", shape_str(input.shape()));
  backend::PoolGeom g{};
  g.h = h, g.w = w, g.oh = output_size.h, g.ow = output_size.w;
  g.planes = input.numel() / (h * w);
  g.kh = g.kw = g.stride_h = g.stride_w = g.dil_h = g.dil_w = 1;   // unused by kAdaptive
  return avg_pool_impl(kOp, input, g, backend::AvgPoolMode::kAdaptive);
}

Tensor flatten(const Tensor& input, int64_t start_dim, int64_t end_dim) {
  constexpr const char* kOp = "flatten";
  ops::check_defined(kOp, input, "input");
  if (input.dim() == 0) return input.reshape({1});
  start_dim = ops::normalize_dim(kOp, start_dim, input.dim());
  end_dim = ops::normalize_dim(kOp, end_dim, input.dim());
  ENCORE_CHECK(start_dim <= end_dim, "flatten: start_dim %d comes after end_dim %d (input %s)", start_dim, end_dim,
               shape_str(input.shape()));
  Shape s;
  int64_t merged = 1;
  for (int64_t d = 0; d < input.dim(); ++d) {
    if (d < start_dim || d > end_dim) {
      s.push_back(input.size(d));
      continue;
    }
    merged *= input.size(d);
    if (d == end_dim) s.push_back(merged);
  }
  return input.reshape(s);
}

Tensor batch_norm(const Tensor& input, const Tensor& running_mean, const Tensor& running_var, const Tensor& weight,
                  const Tensor& bias, bool training, std::optional<double> momentum, double eps,
                  const Tensor& num_batches_tracked) {
  constexpr const char* kOp = "batch_norm";
  ops::check_defined(kOp, input, "input");
  ops::check_float(kOp, input);
  ENCORE_CHECK(input.dim() >= 2, "batch_norm: input must be (N, C, ...), got %s (%s)", shape_str(input.shape()),
               dtype_name(input.dtype()));
  const int64_t c = input.size(1);
  for (const auto& [t, what] : {std::pair{&running_mean, "running_mean"}, std::pair{&running_var, "running_var"},
                                std::pair{&weight, "weight"}, std::pair{&bias, "bias"}}) {
    if (!t->defined()) continue;
    ops::check_same(kOp, input, *t);
    ENCORE_CHECK(t->dim() == 1 && t->size(0) == c, "batch_norm: %s %s must be [%d] for input %s (%s)", what,
                 shape_str(t->shape()), c, shape_str(input.shape()), dtype_name(input.dtype()));
  }
  ENCORE_CHECK(running_mean.defined() == running_var.defined(),
               "batch_norm: running_mean and running_var must be given together (input %s)",
               shape_str(input.shape()));
  ENCORE_CHECK(training || running_mean.defined(),
               "batch_norm: eval mode (training = false) needs running_mean and running_var (input %s)",
               shape_str(input.shape()));
  ENCORE_CHECK(!training || input.numel() / std::max<int64_t>(1, c) > 1,
               "batch_norm: expected more than 1 value per channel when training, got input %s",
               shape_str(input.shape()));
  // Values that would turn every output or running statistic into NaN without a word.
  ENCORE_CHECK(std::isfinite(eps) && eps >= 0, "batch_norm: eps must be finite and non-negative, got %g (input %s)",
               eps, shape_str(input.shape()));
  ENCORE_CHECK(!momentum || std::isfinite(*momentum), "batch_norm: momentum must be finite, got %g (input %s)",
               momentum.value_or(0.0), shape_str(input.shape()));
  const bool updates = training && running_mean.defined();
  if (num_batches_tracked.defined()) {
    ENCORE_CHECK(!momentum, "batch_norm: num_batches_tracked is read only with momentum = nullopt (a cumulative "
                            "average), got momentum %g (input %s)",
                 momentum.value_or(0.0), shape_str(input.shape()));
    ENCORE_CHECK(num_batches_tracked.dtype() == kInt64 && num_batches_tracked.dim() == 0 &&
                     num_batches_tracked.device() == input.device(),
                 "batch_norm: num_batches_tracked must be a 0-d i64 tensor on %s, got %s %s on %s",
                 input.device().str(), shape_str(num_batches_tracked.shape()),
                 dtype_name(num_batches_tracked.dtype()), num_batches_tracked.device().str());
  }
  ENCORE_CHECK(momentum || !updates || num_batches_tracked.defined(),
               "batch_norm: momentum = nullopt (a cumulative average) needs num_batches_tracked to update the "
               "running statistics (input %s)",
               shape_str(input.shape()));
  ENCORE_CHECK(!running_mean.defined() || (running_mean.is_contiguous() && running_var.is_contiguous()),
               "batch_norm: running_mean and running_var must be contiguous (updated in place; input %s)",
               shape_str(input.shape()));
  if (updates) {
    ops::check_inplace(kOp, running_mean);
    ops::check_inplace(kOp, running_var);
  }
  Tensor x = dense(input);
  Tensor wc = weight.defined() ? dense(weight) : Tensor(), bc = bias.defined() ? dense(bias) : Tensor();
  Tensor out = empty_for(kOp, input.shape(), input.dtype(), input.device());
  Tensor saved = empty({2, c}, kFloat32, input.device());
  backend::batch_norm(out, saved, x, wc, bc, running_mean, running_var, training, momentum.value_or(0.0), eps,
                      updates ? num_batches_tracked : Tensor());
  if (autograd::any_requires_grad(input, weight, bias)) {
    const bool nx = input.requires_grad();
    const bool nw = weight.defined() && weight.requires_grad();
    const bool nb = bias.defined() && bias.requires_grad();
    autograd::record(kOp, {input, weight, bias}, out,
                     [sx = SavedTensor(x, kOp), sw = SavedTensor(wc, kOp), ss = SavedTensor(saved, kOp), training,
                      nx, nw, nb](const Tensor& g) -> Grads {
                       const Tensor& xs = sx.get();
                       const DType dt = xs.dtype();
                       const int64_t ch = xs.size(1);
                       Tensor gx = nx ? empty(xs.shape(), dt, xs.device()) : Tensor();
                       Tensor gw = nw ? empty({ch}, dt, xs.device()) : Tensor();
                       Tensor gb = nb ? empty({ch}, dt, xs.device()) : Tensor();
                       backend::batch_norm_backward(gx, gw, gb, dense_grad(g, dt), xs, sw.get(), ss.get(),
                                                    training);
                       return {gx, gw, gb};
                     });
  }
  return out;
}

}  // namespace encore
