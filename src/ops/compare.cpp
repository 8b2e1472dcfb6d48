// Comparisons: eq, ne, lt, le, gt, ge, tensor-tensor (broadcasting) and
// tensor-scalar, returning bool tensors. No backward: the results are not
// differentiable (they never require grad).
#include "encore/ops.h"
#include "src/backends/kernels.h"
#include "src/ops/op_utils.h"

namespace encore {

using backend::CompareOp;

namespace {

Tensor compare_impl(CompareOp op, const Tensor& a, const Tensor& b) {
  const char* name = backend::kCompareNames[static_cast<int>(op)];
  ops::check_same(name, a, b);
  Tensor out = empty_for(name, ops::broadcast_shapes(name, a, b), kBool, a.device());
  backend::compare(op, out, a.detach(), b.detach());
  return out;
}

Tensor compare_scalar_impl(CompareOp op, const Tensor& a, double s) {
  const char* name = backend::kCompareNames[static_cast<int>(op)];
  ops::check_defined(name, a, "input");
  ops::check_scalar_fits(name, s, a.dtype(), a.shape());
  Tensor out = empty(a.shape(), kBool, a.device());
  backend::compare_scalar(op, out, a.detach(), s);
  return out;
}

}  // namespace

Tensor eq(const Tensor& a, const Tensor& b) { return compare_impl(CompareOp::kEq, a, b); }
Tensor ne(const Tensor& a, const Tensor& b) { return compare_impl(CompareOp::kNe, a, b); }
Tensor lt(const Tensor& a, const Tensor& b) { return compare_impl(CompareOp::kLt, a, b); }
Tensor le(const Tensor& a, const Tensor& b) { return compare_impl(CompareOp::kLe, a, b); }
Tensor gt(const Tensor& a, const Tensor& b) { return compare_impl(CompareOp::kGt, a, b); }
Tensor ge(const Tensor& a, const Tensor& b) { return compare_impl(CompareOp::kGe, a, b); }
Tensor eq(const Tensor& a, double s) { return compare_scalar_impl(CompareOp::kEq, a, s); }
Tensor ne(const Tensor& a, double s) { return compare_scalar_impl(CompareOp::kNe, a, s); }
Tensor lt(const Tensor& a, double s) { return compare_scalar_impl(CompareOp::kLt, a, s); }
Tensor le(const Tensor& a, double s) { return compare_scalar_impl(CompareOp::kLe, a, s); }
Tensor gt(const Tensor& a, double s) { return compare_scalar_impl(CompareOp::kGt, a, s); }
Tensor ge(const Tensor& a, double s) { return compare_scalar_impl(CompareOp::kGe, a, s); }

}  // namespace encore
