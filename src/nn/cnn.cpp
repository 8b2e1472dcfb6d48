// Conv2d, BatchNorm1d and BatchNorm2d (the pooling and Flatten modules are inline in
// encore/nn.h).
#include <cmath>

#include "encore/autograd.h"
#include "encore/nn.h"
#include "src/nn/init.h"

namespace encore::nn {
using detail::uniform;

Conv2d::Conv2d(int64_t in_channels, int64_t out_channels, Size2 kernel_size, Size2 stride, Size2 padding,
               Size2 dilation, int64_t groups, bool with_bias, Init init)
    : stride_(stride), padding_(padding), dilation_(dilation), groups_(groups) {
  ENCORE_CHECK(in_channels > 0 && out_channels > 0 && kernel_size.h > 0 && kernel_size.w > 0,
               "Conv2d: sizes must be positive, got in_channels=%d out_channels=%d kernel_size=(%d, %d)",
               in_channels, out_channels, kernel_size.h, kernel_size.w);
  ENCORE_CHECK(groups > 0 && in_channels % groups == 0 && out_channels % groups == 0,
               "Conv2d: in_channels=%d and out_channels=%d must be divisible by groups=%d", in_channels,
               out_channels, groups);
  int64_t fan_in_elements = 0, weight_elements = 0;   // in / groups * kh * kw, and times out
  ENCORE_CHECK(!__builtin_mul_overflow(in_channels / groups, kernel_size.h, &fan_in_elements) &&
                   !__builtin_mul_overflow(fan_in_elements, kernel_size.w, &fan_in_elements) &&
                   !__builtin_mul_overflow(fan_in_elements, out_channels, &weight_elements),
               "Conv2d: weight [%d, %d, %d, %d] has more than 2^63 elements", out_channels, in_channels / groups,
               kernel_size.h, kernel_size.w);
  const double fan_in = static_cast<double>(fan_in_elements);
  const double bound = 1.0 / std::sqrt(fan_in);
  weight = register_parameter("weight",
                              uniform({out_channels, in_channels / groups, kernel_size.h, kernel_size.w}, bound, init));
  if (with_bias) bias = register_parameter("bias", uniform({out_channels}, bound, init));
}

BatchNormBase::BatchNormBase(const char* layer, int64_t min_dim, int64_t max_dim, int64_t num_features, double eps,
                             std::optional<double> momentum, bool affine, bool track_running_stats, Init init)
    : layer_(layer), min_dim_(min_dim), max_dim_(max_dim), num_features_(num_features), eps_(eps),
      momentum_(momentum) {
  ENCORE_CHECK(num_features > 0, "%s: num_features must be positive, got %d", layer, num_features);
  ENCORE_CHECK(std::isfinite(eps) && eps >= 0, "%s: eps must be finite and non-negative, got %g", layer, eps);
  ENCORE_CHECK(!momentum || (*momentum >= 0 && *momentum <= 1),
               "%s: momentum must be in [0, 1] (or nullopt: a cumulative average), got %g", layer,
               momentum.value_or(0.0));
  if (affine) {
    weight = register_parameter("weight", ones({num_features}, kFloat32, init.device));
    bias = register_parameter("bias", zeros({num_features}, kFloat32, init.device));
  }
  if (track_running_stats) {
    running_mean = register_buffer("running_mean", zeros({num_features}, kFloat32, init.device));
    running_var = register_buffer("running_var", ones({num_features}, kFloat32, init.device));
    num_batches_tracked = register_buffer("num_batches_tracked", zeros({}, kInt64, init.device));
  }
}

Tensor BatchNormBase::forward(const Tensor& x) const {
  const char* expected = min_dim_ == 4 ? "a 4-D input (N, C, H, W)" : "a 2-D or 3-D input (N, C) or (N, C, L)";
  ENCORE_CHECK(x.dim() >= min_dim_ && x.dim() <= max_dim_, "%s: expected %s, got %s (%s)", layer_, expected,
               shape_str(x.shape()), dtype_name(x.dtype()));
  ENCORE_CHECK(x.size(1) == num_features_, "%s: expected %d channels (num_features) in dim 1, got %s", layer_,
               num_features_, shape_str(x.shape()));
  const bool use_batch = is_training() || !running_mean.defined();
  if (is_training() && num_batches_tracked.defined()) {
    NoGradGuard no_grad;
    Tensor(num_batches_tracked).add_(ones({}, kInt64, num_batches_tracked.device()));   // on the device
  }
  // momentum = nullopt: the kernel reads the count made above, on the device.
  return batch_norm(x, running_mean, running_var, weight, bias, use_batch, momentum_, eps_,
                    momentum_ ? Tensor() : num_batches_tracked);
}

}  // namespace encore::nn
