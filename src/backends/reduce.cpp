// backend::sum, mean, var, max and max_backward: the checks, the geometry
// (NOTE [ Reduction geometry ] in kernel_table.h), the backend's plan and
// partials scratch where it asks for them, and one launch of the input's
// backend kernel (cpu/reduce.cpp, cuda/reduce.cu) with the one read/write list.
#include <algorithm>

#include "encore/error.h"
#include "src/backends/dtype_checks.h"
#include "src/backends/kernels.h"
#include "src/backends/storage_list.h"
#include "src/backends/tensor_layout.h"
#include "src/core/stream.h"

namespace encore::backend {
namespace {

constexpr const char* kSumNames[] = {"sum", "mean", "var"};   // by SumMode

ReduceGeom make_geom(const char* op, const Tensor& a, DimMask dims) {
  ReduceGeom g{};
  group_reduce_dims(op, a, dims, g);
  return g;
}

void check_output(const char* op, const Tensor& out, const ReduceGeom& g, const Tensor& a) {
  ENCORE_CHECK(out.is_contiguous() && out.numel() == g.out_numel,
               "%s: internal: output %s must be contiguous with %d elements for input %s", op,
               shape_str(out.shape()), g.out_numel, shape_str(a.shape()));
  ENCORE_CHECK(out.device() == a.device(), "%s: internal: output %s on %s for input %s on %s", op,
               shape_str(out.shape()), out.device().str(), shape_str(a.shape()), a.device().str());
}

// The partials a plan asked for (`bytes`; undefined for none), as i64 words.
Tensor scratch(int64_t bytes, Device device) {
  return bytes > 0 ? empty({(bytes + 7) / 8}, kInt64, device) : Tensor();
}

// Output dtype: a's, or the wide one (f32 for floats, i64 for integers and bool).
void launch_sum(SumMode mode, const Tensor& out, const Tensor& a, DimMask dims, const Tensor& mean,
                int64_t correction) {
  const char* op = kSumNames[static_cast<int>(mode)];
  SumArgs args{};
  args.g = make_geom(op, a, dims);
  check_output(op, out, args.g, a);
  const bool is_float = is_floating(a.dtype());
  ENCORE_CHECK(is_float || mode == SumMode::kSum, "%s: needs a float tensor (f32, f16, bf16), got %s %s", op,
               shape_str(a.shape()), dtype_name(a.dtype()));
  const DType wide = is_float ? kFloat32 : kInt64;
  ENCORE_CHECK(out.dtype() == a.dtype() || out.dtype() == wide, "%s: internal: output dtype %s for input %s %s", op,
               dtype_name(out.dtype()), shape_str(a.shape()), dtype_name(a.dtype()));
  args.in_dtype = a.dtype();
  args.out_dtype = out.dtype();
  args.mode = mode;
  args.out = out.data_ptr();
  args.mean = mean.defined() ? mean.data<float>() : nullptr;
  const double count = static_cast<double>(args.g.red_numel);
  args.divisor = 1.0;
  if (mode == SumMode::kMean) args.divisor = count;
  if (mode == SumMode::kSquaredDeviation) args.divisor = std::max(0.0, count - static_cast<double>(correction));
  const ReduceKernels& k = *kernels_for(a.device()).reduce;
  const Tensor partials = scratch(k.plan_sum != nullptr ? k.plan_sum(args) : 0, a.device());
  args.partials = partials.defined() ? partials.data_ptr() : nullptr;
  current_stream(a.device())
      .launch_many(k.sum, op, args, StorageList{&a, &mean}.span(), StorageList{&out, &partials}.span());
}

}  // namespace

void sum(const Tensor& out, const Tensor& a, DimMask dims) { launch_sum(SumMode::kSum, out, a, dims, Tensor(), 0); }

void mean(const Tensor& out, const Tensor& a, DimMask dims) {
  launch_sum(SumMode::kMean, out, a, dims, Tensor(), 0);
}

void var(const Tensor& out, const Tensor& a, const Tensor& mean, DimMask dims, int64_t correction) {
  ENCORE_CHECK(mean.dtype() == kFloat32 && mean.is_contiguous() && mean.numel() == out.numel() &&
                   mean.device() == out.device(),
               "var: internal: mean %s %s does not match output %s", shape_str(mean.shape()),
               dtype_name(mean.dtype()), shape_str(out.shape()));
  launch_sum(SumMode::kSquaredDeviation, out, a, dims, mean, correction);
}

void max(const Tensor& values, const Tensor& indices, const Tensor& a, DimMask dims) {
  const char* op = values.defined() ? "max" : "argmax";
  MaxArgs args{};
  args.g = make_geom(op, a, dims);
  check_output(op, indices, args.g, a);
  if (values.defined()) {
    check_output(op, values, args.g, a);
    ENCORE_CHECK(values.dtype() == a.dtype(), "%s: internal: values dtype %s for input %s", op,
                 dtype_name(values.dtype()), dtype_name(a.dtype()));
  }
  check_numeric(a.dtype(), op);
  args.dtype = a.dtype();
  args.values = values.defined() ? values.data_ptr() : nullptr;
  args.indices = indices.data<int64_t>();
  const ReduceKernels& k = *kernels_for(a.device()).reduce;
  const Tensor partials = scratch(k.plan_max != nullptr ? k.plan_max(args) : 0, a.device());
  args.partials = partials.defined() ? partials.data_ptr() : nullptr;
  current_stream(a.device())
      .launch_many(k.max, op, args, StorageList{&a}.span(), StorageList{&values, &indices, &partials}.span());
}

void max_backward(const Tensor& grad_in, const Tensor& grad_out, const Tensor& indices, int64_t outer, int64_t n,
                  int64_t inner) {
  ENCORE_CHECK(grad_in.is_contiguous() && grad_out.is_contiguous() && indices.is_contiguous() &&
                   grad_in.numel() == outer * n * inner && grad_out.numel() == outer * inner &&
                   indices.numel() == outer * inner && grad_in.dtype() == grad_out.dtype() &&
                   indices.dtype() == kInt64,
               "max_backward: internal: gradient %s, output gradient %s and indices %s do not fit [%d, %d, %d]",
               shape_str(grad_in.shape()), shape_str(grad_out.shape()), shape_str(indices.shape()), outer, n, inner);
  check_float(grad_in.dtype(), "max_backward");
  const MaxBackwardArgs args{grad_in.data_ptr(), grad_out.data_ptr(), indices.data<int64_t>(), outer, n, inner,
                             grad_in.dtype()};
  current_stream(grad_in.device())
      .launch(kernels_for(grad_in.device()).reduce->max_backward, "max_backward", args,
              {grad_out.storage(), indices.storage()}, {grad_in.storage()});
}

}  // namespace encore::backend
