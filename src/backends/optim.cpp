// The host side of the optimizer kernels (contracts in kernels.h, "optim"):
// argument checks that name the op, the argument, what it must be and what
// came; the argument structs of kernel_table.h; one launch of the entry of
// the device's table (cpu/optim.cpp, cuda/optim.cu) with every storage it
// reads and writes.
#include <cstdint>
#include <initializer_list>

#include "encore/error.h"
#include "src/backends/dtype_checks.h"
#include "src/backends/kernels.h"
#include "src/backends/tensor_layout.h"
#include "src/core/stream.h"

namespace encore::backend {
namespace {

const OptimKernels& optim_kernels(Device device) { return *kernels_for(device).optim; }

// t: one element of `dtype` on a device of `type` (the learning rate, the
// step count, a norm: read by the kernel where it runs).
void check_scalar(const char* op, const Tensor& t, DType dtype, const char* what, DeviceType type) {
  const char* where = type == DeviceType::kCUDA ? "a CUDA device" : "the cpu";
  ENCORE_CHECK(t.defined() && t.numel() == 1 && t.dtype() == dtype && t.device().type == type,
               "%s: %s must be a %s tensor with one element on %s, got %s %s on %s", op, what, dtype_name(dtype),
               where, t.defined() ? shape_str(t.shape()) : "undefined", t.defined() ? dtype_name(t.dtype()) : "-",
               t.defined() ? t.device().str() : "-");
}

// t: param's shape, of `dtype`, on param's device (a gradient or optimizer
// state read beside the parameter).
void check_like(const char* op, const Tensor& param, const Tensor& t, DType dtype, const char* what) {
  ENCORE_CHECK(t.defined() && t.shape() == param.shape() && t.dtype() == dtype && t.device() == param.device(),
               "%s: %s must be %s %s like the parameter on %s, got %s %s on %s", op, what,
               shape_str(param.shape()), dtype_name(dtype), param.device().str(),
               t.defined() ? shape_str(t.shape()) : "undefined", t.defined() ? dtype_name(t.dtype()) : "-",
               t.defined() ? t.device().str() : "-");
}

// AdamW's parameter table (AdamWEntry rows, NOTE [ One AdamW launch ] in
// src/optim/adamw.cpp): contiguous, exactly `count` rows.
void check_adamw_table(const Tensor& table, int64_t count) {
  const DeviceType type = table.device().type;
  ENCORE_CHECK(table.is_contiguous() &&
                   table.numel() * dtype_size(table.dtype()) == count * static_cast<int64_t>(sizeof(AdamWEntry)),
               "adamw: table %s (%s on %s) does not hold %d entries on %s", shape_str(table.shape()),
               dtype_name(table.dtype()), table.device().str(), count,
               type == DeviceType::kCUDA ? "a CUDA device" : "the cpu");
}

}  // namespace

void sgd_update(const Tensor& param, const Tensor& grad, const Tensor& momentum_buf, const Tensor& lr,
                double momentum, bool nesterov, double weight_decay) {
  check_like("sgd", param, grad, param.dtype(), "grad");
  check_scalar("sgd", lr, kFloat32, "lr", param.device().type);
  check_float(param.dtype(), "sgd");
  SgdArgs args{};
  args.dtype = param.dtype();
  args.lr = lr.data<float>();
  args.momentum = static_cast<float>(momentum);
  args.weight_decay = static_cast<float>(weight_decay);
  const Kernel<SgdArgs> sgd = optim_kernels(param.device()).sgd;
  Stream& stream = current_stream(param.device());
  if (!momentum_buf.defined()) {
    args.l = make_layout<3>(param, {&grad, &param});   // operand 2 is not touched without momentum
    stream.launch(sgd, "sgd", args, {param.storage(), grad.storage(), lr.storage()}, {param.storage()});
    return;
  }
  check_like("sgd", param, momentum_buf, kFloat32, "momentum buffer");
  args.l = make_layout<3>(param, {&grad, &momentum_buf});
  args.has_momentum = true;
  args.nesterov = nesterov;
  stream.launch(sgd, "sgd", args, {param.storage(), grad.storage(), momentum_buf.storage(), lr.storage()},
                {param.storage(), momentum_buf.storage()});
}

void adamw_update(const Tensor& param, const Tensor& grad, const Tensor& exp_avg, const Tensor& exp_avg_sq,
                  const Tensor& lr, const Tensor& step, double beta1, double beta2, double eps,
                  double weight_decay) {
  const DeviceType type = param.device().type;
  check_like("adamw", param, grad, param.dtype(), "grad");
  check_like("adamw", param, exp_avg, kFloat32, "exp_avg");
  check_like("adamw", param, exp_avg_sq, kFloat32, "exp_avg_sq");
  check_scalar("adamw", lr, kFloat32, "lr", type);
  check_scalar("adamw", step, kInt64, "step", type);
  const AdamWArgs args{make_layout<4>(param, {&grad, &exp_avg, &exp_avg_sq}),
                       param.dtype(),
                       lr.data<float>(),
                       step.data<int64_t>(),
                       static_cast<float>(beta1),
                       static_cast<float>(beta2),
                       static_cast<float>(eps),
                       static_cast<float>(weight_decay)};
  check_float(param.dtype(), "adamw");
  current_stream(param.device())
      .launch(optim_kernels(param.device()).adamw, "adamw", args,
              {param.storage(), grad.storage(), exp_avg.storage(), exp_avg_sq.storage(), lr.storage(),
               step.storage()},
              {param.storage(), exp_avg.storage(), exp_avg_sq.storage()});
}

void adamw_update_many(const Tensor& table, int64_t count, int64_t total, DType dtype,
                       absl::Span<Storage* const> reads, absl::Span<Storage* const> writes, const Tensor& lr,
                       const Tensor& step, double beta1, double beta2, double eps, double weight_decay) {
  check_adamw_table(table, count);
  check_scalar("adamw", lr, kFloat32, "lr", table.device().type);
  check_scalar("adamw", step, kInt64, "step", table.device().type);
  check_float(dtype, "adamw");
  const AdamWManyArgs args{static_cast<const AdamWEntry*>(table.data_ptr()),
                           count,
                           total,
                           dtype,
                           lr.data<float>(),
                           step.data<int64_t>(),
                           static_cast<float>(beta1),
                           static_cast<float>(beta2),
                           static_cast<float>(eps),
                           static_cast<float>(weight_decay)};
  current_stream(table.device()).launch_many(optim_kernels(table.device()).adamw_many, "adamw", args, reads, writes);
}

void increment(const Tensor& counter) {
  check_scalar("increment", counter, kInt64, "counter", counter.device().type);
  current_stream(counter.device())
      .launch(optim_kernels(counter.device()).increment, "increment", IncrementArgs{counter.data<int64_t>()},
              {counter.storage()}, {counter.storage()});
}

void sum_of_squares(const Tensor& x, const Tensor& partial, int64_t slot) {
  ENCORE_CHECK(partial.dtype() == kFloat32 && partial.dim() == 1 && partial.is_contiguous() && slot >= 0 &&
                   slot < partial.numel(),
               "sum_of_squares: slot %d out of range of partial sums %s (%s)", slot, shape_str(partial.shape()),
               dtype_name(partial.dtype()));
  ENCORE_CHECK(x.device() == partial.device(), "sum_of_squares: x %s is on %s, the partial sums on %s",
               shape_str(x.shape()), x.device().str(), partial.device().str());
  SumSquaresArgs args{make_layout<1>(x, {}), x.dtype(), nullptr, 0, partial.data<float>() + slot};
  check_float(x.dtype(), "sum_of_squares");
  const OptimKernels& k = optim_kernels(partial.device());
  Stream& stream = current_stream(partial.device());
  if (k.sum_of_squares_blocks == nullptr) {
    stream.launch(k.sum_of_squares, "sum_of_squares", args, {x.storage()}, {partial.storage()});
    return;
  }
  // Scratch for the per-block doubles: an encore temporary, so capture plans it.
  args.blocks = k.sum_of_squares_blocks(x.numel());
  const Tensor scratch = empty({args.blocks}, kInt64, x.device());
  args.scratch = reinterpret_cast<double*>(scratch.data<int64_t>());
  stream.launch(k.sum_of_squares, "sum_of_squares", args, {x.storage()}, {scratch.storage(), partial.storage()});
}

void clip_coefficient(const Tensor& partial, const Tensor& norm, const Tensor& scale, double max_norm) {
  const DeviceType type = partial.device().type;
  ENCORE_CHECK(partial.dtype() == kFloat32 && partial.is_contiguous(),
               "clip_coefficient: partial sums must be contiguous f32, got %s %s", shape_str(partial.shape()),
               dtype_name(partial.dtype()));
  check_scalar("clip_coefficient", norm, kFloat32, "norm", type);
  check_scalar("clip_coefficient", scale, kFloat32, "scale", type);
  const ClipCoefArgs args{partial.data<float>(), partial.numel(), norm.data<float>(), scale.data<float>(), max_norm};
  current_stream(partial.device())
      .launch(optim_kernels(partial.device()).clip_coefficient, "clip_coefficient", args, {partial.storage()},
              {norm.storage(), scale.storage()});
}

void scale_in_place(const Tensor& x, const Tensor& scale) {
  check_scalar("scale_in_place", scale, kFloat32, "scale", x.device().type);
  const ScaleInPlaceArgs args{make_layout<1>(x, {}), x.dtype(), scale.data<float>()};
  check_float(x.dtype(), "scale_in_place");
  current_stream(x.device())
      .launch(optim_kernels(x.device()).scale_in_place, "scale_in_place", args, {x.storage(), scale.storage()},
              {x.storage()});
}

}  // namespace encore::backend
