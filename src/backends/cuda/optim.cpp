#include "src/backends/cuda/optim.h"

#include "encore/error.h"
#include "src/backends/cuda/optim_launch.h"
#include "src/backends/optim_checks.h"
#include "src/backends/tensor_layout.h"
#include "src/core/stream.h"

namespace encore::cuda {
namespace {

using backend::make_layout;

void check_float_param(const char* op, const Tensor& param) {
  ENCORE_CHECK(is_floating(param.dtype()) && param.device().is_cuda(),
               "%s: parameter %s must be a float tensor on a CUDA device, got %s on %s", op,
               shape_str(param.shape()), dtype_name(param.dtype()), param.device().str());
}

}  // namespace

void sgd_update(const Tensor& param, const Tensor& grad, const Tensor& momentum_buf, const Tensor& lr,
                double momentum, bool nesterov, double weight_decay) {
  check_float_param("sgd", param);
  backend::check_like("sgd", param, grad, param.dtype(), "grad");
  backend::check_scalar("sgd", lr, kFloat32, "lr", DeviceType::kCUDA);
  SgdArgs args{};
  args.dtype = param.dtype();
  args.lr = lr.data<float>();
  args.momentum = static_cast<float>(momentum);
  args.weight_decay = static_cast<float>(weight_decay);
  Stream& stream = current_stream(param.device());
  if (!momentum_buf.defined()) {
    args.l = make_layout<3>(param, {&grad, &param});   // operand 2 is not touched without momentum
    stream.launch<&sgd_launch>("sgd", args, {param.storage(), grad.storage(), lr.storage()}, {param.storage()});
    return;
  }
  backend::check_like("sgd", param, momentum_buf, kFloat32, "momentum buffer");
  args.l = make_layout<3>(param, {&grad, &momentum_buf});
  args.has_momentum = true;
  args.nesterov = nesterov;
  stream.launch<&sgd_launch>("sgd", args,
                             {param.storage(), grad.storage(), momentum_buf.storage(), lr.storage()},
                             {param.storage(), momentum_buf.storage()});
}

void adamw_update(const Tensor& param, const Tensor& grad, const Tensor& exp_avg, const Tensor& exp_avg_sq,
                  const Tensor& lr, const Tensor& step, double beta1, double beta2, double eps,
                  double weight_decay) {
  check_float_param("adamw", param);
  backend::check_like("adamw", param, grad, param.dtype(), "grad");
  backend::check_like("adamw", param, exp_avg, kFloat32, "exp_avg");
  backend::check_like("adamw", param, exp_avg_sq, kFloat32, "exp_avg_sq");
  backend::check_scalar("adamw", lr, kFloat32, "lr", DeviceType::kCUDA);
  backend::check_scalar("adamw", step, kInt64, "step", DeviceType::kCUDA);
  const AdamWArgs args{make_layout<4>(param, {&grad, &exp_avg, &exp_avg_sq}),
                       param.dtype(),
                       lr.data<float>(),
                       step.data<int64_t>(),
                       static_cast<float>(beta1),
                       static_cast<float>(beta2),
                       static_cast<float>(eps),
                       static_cast<float>(weight_decay)};
  current_stream(param.device())
      .launch<&adamw_launch>(
          "adamw", args,
          {param.storage(), grad.storage(), exp_avg.storage(), exp_avg_sq.storage(), lr.storage(), step.storage()},
          {param.storage(), exp_avg.storage(), exp_avg_sq.storage()});
}

void adamw_update_many(const Tensor& table, int64_t count, int64_t total, DType dtype,
                       absl::Span<Storage* const> reads, absl::Span<Storage* const> writes, const Tensor& lr,
                       const Tensor& step, double beta1, double beta2, double eps, double weight_decay) {
  backend::check_adamw_table(table, count, DeviceType::kCUDA);
  backend::check_scalar("adamw", lr, kFloat32, "lr", DeviceType::kCUDA);
  backend::check_scalar("adamw", step, kInt64, "step", DeviceType::kCUDA);
  ENCORE_CHECK(is_floating(dtype), "adamw: parameters must be float, got %s", dtype_name(dtype));
  const AdamWManyArgs args{static_cast<const backend::AdamWEntry*>(table.data_ptr()),
                     count,
                     total,
                     dtype,
                     lr.data<float>(),
                     step.data<int64_t>(),
                     static_cast<float>(beta1),
                     static_cast<float>(beta2),
                     static_cast<float>(eps),
                     static_cast<float>(weight_decay)};
  current_stream(table.device()).launch_many<&adamw_many_launch>("adamw", args, reads, writes);
}

void increment(const Tensor& counter) {
  backend::check_scalar("increment", counter, kInt64, "counter", DeviceType::kCUDA);
  current_stream(counter.device())
      .launch<&increment_launch>("increment", IncrementArgs{counter.data<int64_t>()}, {counter.storage()},
                                 {counter.storage()});
}

void sum_of_squares(const Tensor& x, const Tensor& partial, int64_t slot) {
  check_float_param("sum_of_squares", x);
  ENCORE_CHECK(partial.dtype() == kFloat32 && partial.dim() == 1 && partial.is_contiguous() && slot >= 0 &&
                   slot < partial.numel() && partial.device() == x.device(),
               "sum_of_squares: slot %d out of range of partial sums %s (%s on %s)", slot,
               shape_str(partial.shape()), dtype_name(partial.dtype()), partial.device().str());
  const int blocks = sum_of_squares_blocks(x.numel());
  // Scratch for the per-block doubles: an encore temporary, so capture plans it.
  Tensor scratch = empty({blocks}, kInt64, x.device());
  const SumSquaresArgs args{make_layout<1>(x, {}), x.dtype(), reinterpret_cast<double*>(scratch.data<int64_t>()),
                            blocks, partial.data<float>() + slot};
  current_stream(x.device())
      .launch<&sum_of_squares_launch>("sum_of_squares", args, {x.storage()},
                                      {scratch.storage(), partial.storage()});
}

void clip_coefficient(const Tensor& partial, const Tensor& norm, const Tensor& scale, double max_norm) {
  ENCORE_CHECK(partial.dtype() == kFloat32 && partial.is_contiguous() && partial.device().is_cuda(),
               "clip_coefficient: partial sums must be contiguous f32 on a CUDA device, got %s %s",
               shape_str(partial.shape()), dtype_name(partial.dtype()));
  backend::check_scalar("clip_coefficient", norm, kFloat32, "norm", DeviceType::kCUDA);
  backend::check_scalar("clip_coefficient", scale, kFloat32, "scale", DeviceType::kCUDA);
  const ClipCoefArgs args{partial.data<float>(), partial.numel(), norm.data<float>(), scale.data<float>(), max_norm};
  current_stream(partial.device())
      .launch<&clip_coefficient_launch>("clip_coefficient", args, {partial.storage()},
                                        {norm.storage(), scale.storage()});
}

void scale_in_place(const Tensor& x, const Tensor& scale) {
  check_float_param("scale_in_place", x);
  backend::check_scalar("scale_in_place", scale, kFloat32, "scale", DeviceType::kCUDA);
  const ClipScaleArgs args{make_layout<1>(x, {}), x.dtype(), scale.data<float>()};
  current_stream(x.device())
      .launch<&clip_scale_launch>("scale_in_place", args, {x.storage(), scale.storage()}, {x.storage()});
}

}  // namespace encore::cuda
