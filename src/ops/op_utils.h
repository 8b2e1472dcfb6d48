// Shared argument checks and shape rules for ops. Every check throws
// encore::Error with the op name, the shapes and the dtypes.
#pragma once

#include <cstdint>

#include "encore/tensor.h"
#include "src/core/tensor_internal.h"

namespace encore::ops {

// The NumPy broadcast of two shapes; throws naming op, both shapes and dtypes.
Shape broadcast_shapes(const char* op, const Tensor& a, const Tensor& b);
Shape broadcast_shapes(const char* op, absl::Span<const int64_t> a, absl::Span<const int64_t> b);

// Same dtype and device, both defined.
void check_same(const char* op, const Tensor& a, const Tensor& b);
void check_defined(const char* op, const Tensor& t, const char* what);
void check_float(const char* op, const Tensor& t);
// t takes part in arithmetic (a scalar op, add_, mul_): any dtype but bool.
void check_arithmetic(const char* op, const Tensor& t);

// A scalar for a tensor of `dtype`: for i32/i64 within the type's range (NaN
// and infinities are refused: no value is silently saturated) and, unless
// `truncates` (fill_ and full truncate toward zero, as PyTorch does), a whole
// number; any value for float and bool tensors. Throws naming op, the value,
// the dtype and the shape.
void check_scalar_fits(const char* op, double value, DType dtype, const Shape& shape, bool truncates = false);
// A value stored as it is into a float tensor (fill_, full, masked_fill):
// refused when finite but beyond the dtype's largest finite value (65504 for
// f16), which PyTorch refuses too ("value cannot be converted to type ...
// without overflow") instead of storing inf. Infinities and NaN pass; other
// dtypes are check_scalar_fits' business.
void check_float_fits(const char* op, double value, DType dtype, const Shape& shape);

// dim in [-ndim, ndim) -> [0, ndim).
int64_t normalize_dim(const char* op, int64_t dim, int64_t ndim);

// Refuses writes that autograd cannot see (an in-place op on a tensor that
// requires grad, while grad mode is on).
void check_inplace(const char* op, const Tensor& t);

// NOTE [ Index checks ] (src/backends/kernel_table.h): whether an op may read
// t (class ids, indices, probabilities) on the host to refuse bad values
// before its launch: eager CPU steps only (never while the stream is
// observed, as in capture(), nor on CUDA, where reading would wait for the GPU).
bool host_checks_allowed(const Tensor& t);

inline Tensor empty_like(const Tensor& t) { return empty(t.shape(), t.dtype(), t.device()); }

// The dtype an op composed of other ops sums `dtype` in: f32 for f16/bf16
// (include/encore/ops.h: computed in f32, rounded once on store), else dtype.
inline DType sum_dtype(DType dtype) { return dtype == kFloat16 || dtype == kBFloat16 ? kFloat32 : dtype; }

// NOTE [ Writing into a dying temporary ]
// An elementwise op given an rvalue Tensor (a temporary such as the
// bn(conv(x)) in relu(bn(conv(x))), or std::move(t)) consumes it (include/
// encore/ops.h): it may write its output into that tensor's buffer instead
// of a fresh one, and leaves the argument undefined. It does so only when
// nothing else can see the buffer: the TensorImpl and its Storage are held
// by that argument alone (no saved tensor, view, .grad, autograd edge or
// capture record holds either), it is not a leaf that requires grad, and
// its layout is the output's (contiguous from offset 0, the output's shape
// and dtype); and, the caller's part, only for an input its backward does
// not save. Every element is read before it is written at the same index,
// so the values are those of a fresh buffer. One allocation fewer, and the
// output lands in lines the producer just wrote (in cache) instead of cold
// ones: on the CNN step (bench/RESULTS.md, session 17) relu takes 40 % of
// its time, and the eager step went from 1.072 to 1.049 of its floor.
//
// Whether an op whose output has `shape` (and t's dtype) may write into t's
// buffer, as above.
bool can_write_into(const Tensor& t, const Shape& shape);
// The output: a view of t's buffer when can_write_into(t, shape), else a
// fresh tensor of `shape` and t's dtype.
Tensor output_into(const Tensor& t, const Shape& shape);
// out, once the consumed operands are left undefined: what a consuming
// overload returns after its op has run, e.g.
//   Tensor relu(Tensor&& a) { return ops::consumed(relu_of(a, /*taken=*/true), a); }
inline Tensor consumed(Tensor out, Tensor& t) {
  t = Tensor();
  return out;
}
inline Tensor consumed(Tensor out, Tensor& a, Tensor& b) {
  a = Tensor();
  b = Tensor();
  return out;
}

}  // namespace encore::ops
