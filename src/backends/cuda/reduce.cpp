// CUDA reductions, host side: checks, the geometry and plan of each launch
// (NOTE [ CUDA reduction plan ] in reduce_launch.h), the partials temporary of
// two-pass reductions, and the stream launch. The kernels are in reduce.cu.
#include "src/backends/cuda/reduce.h"

#include <algorithm>

#include "encore/error.h"
#include "src/backends/cuda/reduce_launch.h"
#include "src/backends/tensor_layout.h"
#include "src/core/stream.h"

namespace encore::cuda {
namespace {

// ---- geometry and plan ----

ReduceType reduce_type(const char* op, const Tensor& t) {
  switch (t.dtype()) {
    case DType::kFloat32: return ReduceType::kF32;
    case DType::kFloat16: return ReduceType::kF16;
    case DType::kBFloat16: return ReduceType::kBF16;
    case DType::kInt32: return ReduceType::kI32;
    case DType::kInt64: return ReduceType::kI64;
    case DType::kBool: return ReduceType::kBool;
  }
  throw_error(absl::StatusCode::kInvalidArgument,
              absl::StrFormat("%s: dtype %s is not supported", op, dtype_name(t.dtype())));
}

bool is_float_type(ReduceType t) {
  return t == ReduceType::kF32 || t == ReduceType::kF16 || t == ReduceType::kBF16;
}

// NOTE [ CUDA reduction geometry ] in reduce_launch.h.
ReduceGeom make_geom(const char* op, const Tensor& a, DimMask dims) {
  ENCORE_CHECK(a.device().is_cuda(), "%s: internal: input %s is on %s, not a CUDA device", op,
               shape_str(a.shape()), a.device().str());
  ReduceGeom g{};
  backend::group_reduce_dims(op, a, dims, g);
  return g;
}

int32_t pow2_ceil(int64_t v) {
  int32_t p = 1;
  while (p < v && p < kReduceThreads) p *= 2;
  return p;
}

// Elements each thread takes at least before more threads share an output,
// and (two-pass) the elements per thread that make a chunk worth its own block.
inline constexpr int64_t kMinPerThread = 4;
inline constexpr int64_t kChunkPerThread = 32;
// Two-pass when the single pass would have fewer than half this many blocks,
// and then about this many blocks in all (an H100/H200 has 132 SMs).
inline constexpr int64_t kTargetBlocks = 512;

// NOTE [ CUDA reduction plan ] in reduce_launch.h. Depends on g only.
ReducePlan make_plan(const ReduceGeom& g) {
  const int64_t n = g.red_numel, m = g.out_numel;
  const bool red_contiguous = g.red_stride[g.red_ndim - 1] == 1;
  const bool columns = m > 1 && !red_contiguous && g.kept_stride[g.kept_ndim - 1] == 1;
  ReducePlan p{};
  p.splits = 1;
  p.row_threads = !columns;
  // Columns: at least a warp's worth of adjacent outputs when there are that many.
  p.ty = columns ? kReduceThreads / pow2_ceil(std::min<int64_t>(g.kept_shape[g.kept_ndim - 1], 32))
                 : kReduceThreads;
  while (p.ty > 1 && p.ty * kMinPerThread > n) p.ty /= 2;
  p.tx = kReduceThreads / p.ty;
  const int64_t groups = (m + p.tx - 1) / p.tx;
  if (groups > 0 && groups < kTargetBlocks / 2) {
    const int64_t by_length = (n + p.ty * kChunkPerThread - 1) / (p.ty * kChunkPerThread);
    const int64_t by_blocks = (kTargetBlocks + groups - 1) / groups;
    const int64_t splits = std::min({int64_t{kReduceMaxSplits}, by_length, by_blocks});
    if (splits > 1) p.splits = static_cast<int32_t>(splits);
  }
  return p;
}

void check_output(const char* op, const Tensor& out, const ReduceGeom& g, const Tensor& a) {
  ENCORE_CHECK(out.is_contiguous() && out.numel() == g.out_numel && out.device() == a.device(),
               "%s: internal: output %s on %s must be contiguous with %d elements on %s for input %s", op,
               shape_str(out.shape()), out.device().str(), g.out_numel, a.device().str(), shape_str(a.shape()));
}

// The partials of a two-pass plan (undefined for one pass): `bytes` per partial.
Tensor partials_for(const ReducePlan& p, const ReduceGeom& g, int64_t bytes, Device device) {
  if (p.splits == 1 || g.out_numel == 0) return Tensor();
  return empty({(p.splits * g.out_numel * bytes + 7) / 8}, kInt64, device);
}

void launch_sum(const char* op, SumMode mode, const Tensor& out, const Tensor& a, DimMask dims, const Tensor* mean,
                int64_t correction) {
  SumLaunchArgs args{};
  args.g = make_geom(op, a, dims);
  args.p = make_plan(args.g);
  args.in_type = reduce_type(op, a);
  args.out_type = reduce_type(op, out);
  args.mode = mode;
  args.out = out.data_ptr();
  args.mean = mean != nullptr ? mean->data<float>() : nullptr;
  args.op = op;
  check_output(op, out, args.g, a);
  const bool is_float = is_float_type(args.in_type);
  ENCORE_CHECK(is_float || mode == SumMode::kSum, "%s: needs a float tensor (f32, f16, bf16), got %s %s", op,
               shape_str(a.shape()), dtype_name(a.dtype()));
  const ReduceType wide = is_float ? ReduceType::kF32 : ReduceType::kI64;
  ENCORE_CHECK(args.out_type == args.in_type || args.out_type == wide,
               "%s: internal: output dtype %s for input %s %s", op, dtype_name(out.dtype()), shape_str(a.shape()),
               dtype_name(a.dtype()));
  const double count = static_cast<double>(args.g.red_numel);
  if (mode == SumMode::kMean) args.divisor = count;
  if (mode == SumMode::kSquaredDeviation) args.divisor = std::max(0.0, count - static_cast<double>(correction));
  if (args.g.out_numel == 0) return;
  const Tensor partials = partials_for(args.p, args.g, kSumPartialBytes, a.device());
  args.partials = partials.defined() ? partials.data_ptr() : nullptr;
  Stream& stream = current_stream(a.device());
  Storage* in = a.storage();
  Storage* dst = out.storage();
  // Every storage once: the input (and the mean), the output (and the partials).
  if (mean != nullptr && partials.defined()) {
    stream.launch<&sum_launcher>(op, args, {in, mean->storage()}, {dst, partials.storage()});
  } else if (mean != nullptr) {
    stream.launch<&sum_launcher>(op, args, {in, mean->storage()}, {dst});
  } else if (partials.defined()) {
    stream.launch<&sum_launcher>(op, args, {in}, {dst, partials.storage()});
  } else {
    stream.launch<&sum_launcher>(op, args, {in}, {dst});
  }
}

}  // namespace

void sum(const Tensor& out, const Tensor& a, DimMask dims) {
  launch_sum("sum", SumMode::kSum, out, a, dims, nullptr, 0);
}

void mean(const Tensor& out, const Tensor& a, DimMask dims) {
  launch_sum("mean", SumMode::kMean, out, a, dims, nullptr, 0);
}

void var(const Tensor& out, const Tensor& a, const Tensor& mean, DimMask dims, int64_t correction) {
  ENCORE_CHECK(mean.dtype() == kFloat32 && mean.is_contiguous() && mean.numel() == out.numel() &&
                   mean.device() == out.device(),
               "var: internal: mean %s %s does not match output %s", shape_str(mean.shape()),
               dtype_name(mean.dtype()), shape_str(out.shape()));
  launch_sum("var", SumMode::kSquaredDeviation, out, a, dims, &mean, correction);
}

void max(const Tensor& values, const Tensor& indices, const Tensor& a, DimMask dims) {
  const char* op = values.defined() ? "max" : "argmax";
  MaxLaunchArgs args{};
  args.g = make_geom(op, a, dims);
  args.p = make_plan(args.g);
  args.type = reduce_type(op, a);
  args.values = values.defined() ? values.data_ptr() : nullptr;
  args.indices = indices.data<int64_t>();
  args.op = op;
  ENCORE_CHECK(args.type != ReduceType::kBool, "%s: bool tensor %s is not supported", op, shape_str(a.shape()));
  check_output(op, indices, args.g, a);
  if (values.defined()) {
    check_output(op, values, args.g, a);
    ENCORE_CHECK(values.dtype() == a.dtype(), "%s: internal: values dtype %s for input %s", op,
                 dtype_name(values.dtype()), dtype_name(a.dtype()));
  }
  if (args.g.out_numel == 0) return;
  const Tensor partials = partials_for(args.p, args.g, kMaxPartialBytes, a.device());
  args.partials = partials.defined() ? partials.data_ptr() : nullptr;
  Stream& stream = current_stream(a.device());
  Storage* in = a.storage();
  Storage* idx = indices.storage();
  if (values.defined() && partials.defined()) {
    stream.launch<&max_launcher>(op, args, {in}, {values.storage(), idx, partials.storage()});
  } else if (values.defined()) {
    stream.launch<&max_launcher>(op, args, {in}, {values.storage(), idx});
  } else if (partials.defined()) {
    stream.launch<&max_launcher>(op, args, {in}, {idx, partials.storage()});
  } else {
    stream.launch<&max_launcher>(op, args, {in}, {idx});
  }
}

void max_backward(const Tensor& grad_in, const Tensor& grad_out, const Tensor& indices, int64_t outer, int64_t n,
                  int64_t inner) {
  ENCORE_CHECK(grad_in.is_contiguous() && grad_out.is_contiguous() && indices.is_contiguous() &&
                   grad_in.numel() == outer * n * inner && grad_out.numel() == outer * inner &&
                   indices.numel() == outer * inner && grad_in.dtype() == grad_out.dtype() &&
                   indices.dtype() == kInt64,
               "max_backward: internal: gradient %s, output gradient %s and indices %s do not fit [%d, %d, %d]",
               shape_str(grad_in.shape()), shape_str(grad_out.shape()), shape_str(indices.shape()), outer, n, inner);
  const ReduceType type = reduce_type("max_backward", grad_in);
  ENCORE_CHECK(is_float_type(type), "max_backward: dtype %s is not supported (needs f32, f16 or bf16)",
               dtype_name(grad_in.dtype()));
  if (grad_in.numel() == 0) return;
  MaxBackwardLaunchArgs args{grad_in.data_ptr(), grad_out.data_ptr(), indices.data<int64_t>(), outer, n, inner,
                             type};
  current_stream(grad_in.device())
      .launch<&max_backward_launcher>("max_backward", args, {grad_out.storage(), indices.storage()},
                                      {grad_in.storage()});
}

}  // namespace encore::cuda
