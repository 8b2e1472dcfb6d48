// The host side of the cnn family (contracts in kernels.h, "cnn"): the
// checks, the f32 copies of f16/bf16 operands for a backend whose convolution
// takes f32 only, the plan and workspace each backend asks for (sized before
// the launch, so capture serves them from the arena), and one launch of the
// entry of the device's table (cpu/cnn.cpp; cuda/cnn.cu and cuda/cudnn.cpp)
// with its read/write list.
#include "encore/error.h"
#include "src/backends/dtype_checks.h"
#include "src/backends/kernels.h"
#include "src/backends/storage_list.h"
#include "src/core/stream.h"

namespace encore::backend {
namespace {

constexpr const char* kConvNames[] = {"conv2d", "conv2d_backward_data", "conv2d_backward_weights"};   // by ConvPass

void check_dense(const char* op, Device device, DType dtype, std::initializer_list<const Tensor*> ts) {
  for (const Tensor* t : ts) {
    if (!t->defined()) continue;
    ENCORE_CHECK(t->device() == device && t->is_contiguous() && t->dtype() == dtype,
                 "%s: internal: every tensor must be contiguous %s on %s, got %s %s on %s%s", op,
                 dtype_name(dtype), device.str(), shape_str(t->shape()), dtype_name(t->dtype()), t->device().str(),
                 t->is_contiguous() ? "" : " (not contiguous)");
  }
}

const void* cptr(const Tensor& t) { return t.defined() ? t.data_ptr() : nullptr; }
void* ptr(const Tensor& t) { return t.defined() ? t.data_ptr() : nullptr; }

ConvGeom conv_geom(const Tensor& x, const Tensor& w, const Tensor& y, const Conv2dParams& p) {
  ConvGeom g{};
  g.n = x.size(0), g.c = x.size(1), g.h = x.size(2), g.w = x.size(3);
  g.k = w.size(0), g.kh = w.size(2), g.kw = w.size(3);
  g.oh = y.size(2), g.ow = y.size(3);
  g.stride_h = p.stride[0], g.stride_w = p.stride[1];
  g.pad_h = p.padding[0], g.pad_w = p.padding[1];
  g.dil_h = p.dilation[0], g.dil_w = p.dilation[1];
  g.groups = p.groups;
  ENCORE_CHECK(x.dim() == 4 && w.dim() == 4 && y.dim() == 4 && y.size(0) == g.n && y.size(1) == g.k &&
                   w.size(1) * g.groups == g.c && g.k % g.groups == 0,
               "conv2d: internal: input %s, weight %s and output %s do not fit (groups %d)", shape_str(x.shape()),
               shape_str(w.shape()), shape_str(y.shape()), g.groups);
  return g;
}

// One launch of pass `pass` on tensors of one dtype the backend's conv takes.
// x, w, b, y hold what ConvPass says; b may be undefined.
void launch_conv(ConvPass pass, const Tensor& x, const Tensor& w, const Tensor& b, const Tensor& y,
                 const Conv2dParams& p) {
  const char* op = kConvNames[static_cast<int>(pass)];
  const Device device = y.device();
  check_dense(op, device, y.dtype(), {&x, &w, &b, &y});
  ConvArgs args{};
  args.g = conv_geom(x, w, y, p);
  args.pass = pass;
  args.dtype = y.dtype();
  args.plan = -1;
  args.x = x.data_ptr(), args.w = w.data_ptr(), args.b = ptr(b), args.y = y.data_ptr();
  args.device = device.index;
  if (args.g.n == 0) {   // an empty batch: no library call; the weights' gradients are empty sums
    if (pass == ConvPass::kBackwardWeights) {
      fill(w, 0.0);
      if (b.defined()) fill(b, 0.0);
    }
    return;
  }
  const CnnKernels& k = *kernels_for(device).cnn;
  const int64_t ws_bytes = k.plan != nullptr ? k.plan(args) : 0;
  const Tensor ws = ws_bytes > 0 ? empty({(ws_bytes + 7) / 8}, kInt64, device) : Tensor();
  args.workspace = ptr(ws);
  args.workspace_bytes = ws.defined() ? ws_bytes : 0;
  Stream& stream = current_stream(device);
  switch (pass) {
    case ConvPass::kForward:
      stream.launch_many(k.conv, op, args, StorageList{&x, &w, &b}.span(), StorageList{&y, &ws}.span());
      break;
    case ConvPass::kBackwardData:
      stream.launch_many(k.conv, op, args, StorageList{&y, &w}.span(), StorageList{&x, &ws}.span());
      break;
    case ConvPass::kBackwardWeights:
      stream.launch_many(k.conv, op, args, StorageList{&x, &y}.span(), StorageList{&w, &b, &ws}.span());
      break;
  }
}

// f16/bf16 on a backend whose conv takes f32 only: read operands converted to
// f32, outputs written into f32 tensors and rounded back once.
Tensor widen(const Tensor& t) { return t.defined() ? to_float32(t) : Tensor(); }
Tensor f32_like(const Tensor& t) { return t.defined() ? empty(t.shape(), kFloat32, t.device()) : Tensor(); }
void narrow_into(const Tensor& dst, const Tensor& src) {
  if (dst.defined()) copy(dst, src);
}

bool converts(const Tensor& t) { return t.dtype() != kFloat32 && !kernels_for(t.device()).cnn->half_operands; }

void check_conv_dtype(const char* op, const Tensor& t) { check_float(t.dtype(), op); }

}  // namespace

void conv2d(const Tensor& y, const Tensor& x, const Tensor& w, const Tensor& b, const Conv2dParams& p) {
  check_conv_dtype("conv2d", y);
  if (!converts(y)) return launch_conv(ConvPass::kForward, x, w, b, y, p);
  const Tensor y32 = f32_like(y);
  launch_conv(ConvPass::kForward, widen(x), widen(w), widen(b), y32, p);
  narrow_into(y, y32);
}

void conv2d_backward_data(const Tensor& gx, const Tensor& gy, const Tensor& w, const Conv2dParams& p) {
  check_conv_dtype("conv2d_backward_data", gx);
  if (!converts(gx)) return launch_conv(ConvPass::kBackwardData, gx, w, Tensor(), gy, p);
  const Tensor gx32 = f32_like(gx);
  launch_conv(ConvPass::kBackwardData, gx32, widen(w), Tensor(), widen(gy), p);
  narrow_into(gx, gx32);
}

void conv2d_backward_weights(const Tensor& gw, const Tensor& gb, const Tensor& x, const Tensor& gy,
                             const Conv2dParams& p) {
  check_conv_dtype("conv2d_backward_weights", gw);
  if (!converts(gw)) return launch_conv(ConvPass::kBackwardWeights, x, gw, gb, gy, p);
  const Tensor gw32 = f32_like(gw), gb32 = f32_like(gb);
  launch_conv(ConvPass::kBackwardWeights, widen(x), gw32, gb32, widen(gy), p);
  narrow_into(gw, gw32);
  narrow_into(gb, gb32);
}

void max_pool2d(const Tensor& y, const Tensor& indices, const Tensor& x, const PoolGeom& g) {
  constexpr const char* kOp = "max_pool2d";
  check_float(x.dtype(), kOp);
  check_dense(kOp, x.device(), x.dtype(), {&x, &y});
  check_dense(kOp, x.device(), kInt64, {&indices});
  ENCORE_CHECK(x.numel() == g.planes * g.h * g.w && y.numel() == g.planes * g.oh * g.ow &&
                   indices.numel() == y.numel(),
               "max_pool2d: internal: input %s, output %s and indices %s do not fit the window", shape_str(x.shape()),
               shape_str(y.shape()), shape_str(indices.shape()));
  const MaxPoolArgs args{g, x.data_ptr(), y.data_ptr(), indices.data<int64_t>(), x.dtype()};
  current_stream(x.device())
      .launch(kernels_for(x.device()).cnn->max_pool, kOp, args, {x.storage()}, {y.storage(), indices.storage()});
}

void max_pool2d_backward(const Tensor& gx, const Tensor& gy, const Tensor& indices, const PoolGeom& g) {
  constexpr const char* kOp = "max_pool2d_backward";
  check_float(gx.dtype(), kOp);
  check_dense(kOp, gx.device(), gx.dtype(), {&gx, &gy});
  check_dense(kOp, gx.device(), kInt64, {&indices});
  ENCORE_CHECK(gx.numel() == g.planes * g.h * g.w && gy.numel() == g.planes * g.oh * g.ow &&
                   indices.numel() == gy.numel(),
               "max_pool2d_backward: internal: gradient %s, output gradient %s and indices %s do not fit",
               shape_str(gx.shape()), shape_str(gy.shape()), shape_str(indices.shape()));
  const MaxPoolBackwardArgs args{g, gy.data_ptr(), indices.data<int64_t>(), gx.data_ptr(), gx.dtype()};
  current_stream(gx.device())
      .launch(kernels_for(gx.device()).cnn->max_pool_backward, kOp, args, {gy.storage(), indices.storage()},
              {gx.storage()});
}

// NOTE [ An empty batch pools nothing ]: adaptive_avg_pool2d takes any
// output size, so an empty batch's output may be [0, 1, 2^63 - 1, 1]: empty
// and valid, but the kernels size their work with oh ow (the CPU's grains
// add h w to it, past int64). With no plane there is nothing to launch (as
// NOTE [ Empty tensors do no work ] in nn.cpp).
void avg_pool2d(const Tensor& y, const Tensor& x, const PoolGeom& g, AvgPoolMode mode) {
  const char* op = mode == AvgPoolMode::kAdaptive ? "adaptive_avg_pool2d" : "avg_pool2d";
  check_float(x.dtype(), op);
  check_dense(op, x.device(), x.dtype(), {&x, &y});
  ENCORE_CHECK(x.numel() == g.planes * g.h * g.w && y.numel() == g.planes * g.oh * g.ow,
               "%s: internal: input %s and output %s do not fit the window", op, shape_str(x.shape()),
               shape_str(y.shape()));
  if (g.planes == 0) return;   // NOTE [ An empty batch pools nothing ]
  const AvgPoolArgs args{g, mode, x.data_ptr(), y.data_ptr(), x.dtype()};
  current_stream(x.device()).launch(kernels_for(x.device()).cnn->avg_pool, op, args, {x.storage()}, {y.storage()});
}

void avg_pool2d_backward(const Tensor& gx, const Tensor& gy, const PoolGeom& g, AvgPoolMode mode) {
  const char* op = mode == AvgPoolMode::kAdaptive ? "adaptive_avg_pool2d_backward" : "avg_pool2d_backward";
  check_float(gx.dtype(), op);
  check_dense(op, gx.device(), gx.dtype(), {&gx, &gy});
  ENCORE_CHECK(gx.numel() == g.planes * g.h * g.w && gy.numel() == g.planes * g.oh * g.ow,
               "%s: internal: gradient %s and output gradient %s do not fit the window", op, shape_str(gx.shape()),
               shape_str(gy.shape()));
  if (g.planes == 0) return;   // NOTE [ An empty batch pools nothing ]
  const AvgPoolArgs args{g, mode, gy.data_ptr(), gx.data_ptr(), gx.dtype()};
  current_stream(gx.device())
      .launch(kernels_for(gx.device()).cnn->avg_pool_backward, op, args, {gy.storage()}, {gx.storage()});
}

void batch_norm(const Tensor& y, const Tensor& saved, const Tensor& x, const Tensor& weight, const Tensor& bias,
                const Tensor& running_mean, const Tensor& running_var, bool training, double momentum,
                double eps, const Tensor& num_batches_tracked) {
  constexpr const char* kOp = "batch_norm";
  check_float(x.dtype(), kOp);
  const Device device = x.device();
  check_dense(kOp, device, x.dtype(), {&x, &y, &weight, &bias, &running_mean, &running_var});
  check_dense(kOp, device, kFloat32, {&saved});
  check_dense(kOp, device, kInt64, {&num_batches_tracked});
  const int64_t n = x.size(0), c = x.size(1), hw = x.numel() / std::max<int64_t>(1, n * c);
  ENCORE_CHECK(saved.numel() == 2 * c && running_mean.defined() == running_var.defined() &&
                   (training || running_mean.defined()) &&
                   (!num_batches_tracked.defined() || num_batches_tracked.numel() == 1),
               "batch_norm: internal: saved %s for input %s, running stats %s", shape_str(saved.shape()),
               shape_str(x.shape()), running_mean.defined() ? "given" : "missing");
  const bool counted = num_batches_tracked.defined();
  const BatchNormArgs args{x.data_ptr(), y.data_ptr(), cptr(weight), cptr(bias), ptr(running_mean),
                           ptr(running_var), saved.data<float>(),
                           counted ? num_batches_tracked.data<int64_t>() : nullptr, n, c, hw, training,
                           counted ? 0.f : static_cast<float>(momentum), static_cast<float>(eps), x.dtype()};
  const bool updates = training && running_mean.defined();
  current_stream(device).launch_many(
      kernels_for(device).cnn->batch_norm, kOp, args,
      StorageList{&x, &weight, &bias, &running_mean, &running_var, &num_batches_tracked}.span(),
      updates ? StorageList{&y, &saved, &running_mean, &running_var}.span() : StorageList{&y, &saved}.span());
}

void batch_norm_backward(const Tensor& gx, const Tensor& gw, const Tensor& gb, const Tensor& gy, const Tensor& x,
                         const Tensor& weight, const Tensor& saved, bool training) {
  constexpr const char* kOp = "batch_norm_backward";
  check_float(x.dtype(), kOp);
  const Device device = x.device();
  check_dense(kOp, device, x.dtype(), {&gx, &gw, &gb, &gy, &x, &weight});
  check_dense(kOp, device, kFloat32, {&saved});
  const int64_t n = x.size(0), c = x.size(1), hw = x.numel() / std::max<int64_t>(1, n * c);
  const BatchNormBackwardArgs args{gy.data_ptr(), x.data_ptr(), cptr(weight), saved.data<float>(), ptr(gx),
                                   ptr(gw), ptr(gb), n, c, hw, training, x.dtype()};
  current_stream(device).launch_many(kernels_for(device).cnn->batch_norm_backward, kOp, args,
                                     StorageList{&gy, &x, &weight, &saved}.span(),
                                     StorageList{&gx, &gw, &gb}.span());
}

}  // namespace encore::backend
