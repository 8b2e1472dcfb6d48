// backend::binary, binary_scalar, compare and compare_scalar: the dtype check,
// the layout and one launch of the output's backend kernel (cpu/binary.cpp, cuda/binary.cu).
#include "src/backends/convert.h"
#include "src/backends/dtype_checks.h"
#include "src/backends/kernels.h"
#include "src/backends/tensor_layout.h"
#include "src/core/stream.h"

namespace encore::backend {
namespace {
constexpr const char* kBinaryNames[] = {"add", "sub", "mul", "div"};
constexpr const char* kScalarNames[] = {"add_scalar", "mul_scalar", "rsub_scalar", "rdiv_scalar", "div_scalar"};
}  // namespace

void binary(BinaryOp op, const Tensor& out, const Tensor& a, const Tensor& b, double alpha) {
  const char* name = kBinaryNames[static_cast<int>(op)];
  check_numeric(out.dtype(), name);
  const BinaryArgs args{make_layout<3>(out, {&a, &b}), out.dtype(), op, alpha};
  current_stream(out.device())
      .launch(kernels_for(out.device()).binary->binary, name, args, {a.storage(), b.storage()}, {out.storage()});
}

void binary_scalar(ScalarOp op, const Tensor& out, const Tensor& a, double s) {
  const char* name = kScalarNames[static_cast<int>(op)];
  check_numeric(out.dtype(), name);
  const BinaryScalarArgs args{make_layout<2>(out, {&a}), out.dtype(), op, s};
  current_stream(out.device())
      .launch(kernels_for(out.device()).binary->scalar, name, args, {a.storage()}, {out.storage()});
}

void compare(CompareOp op, const Tensor& out, const Tensor& a, const Tensor& b) {
  const char* name = kCompareNames[static_cast<int>(op)];
  ENCORE_CHECK(out.dtype() == kBool && a.dtype() == b.dtype(), "%s: internal: out must be bool (got %s) and a, b of one dtype (%s, %s)",
               name, dtype_name(out.dtype()), dtype_name(a.dtype()), dtype_name(b.dtype()));
  const CompareArgs args{make_layout<3>(out, {&a, &b}), a.dtype(), op};
  current_stream(out.device())
      .launch(kernels_for(out.device()).binary->compare, name, args, {a.storage(), b.storage()}, {out.storage()});
}

void compare_scalar(CompareOp op, const Tensor& out, const Tensor& a, double s) {
  const char* name = kCompareScalarNames[static_cast<int>(op)];
  ENCORE_CHECK(out.dtype() == kBool, "%s: internal: out must be bool, got %s", name, dtype_name(out.dtype()));
  const CompareScalarArgs args{make_layout<2>(out, {&a}), a.dtype(), op, value_bits(a.dtype(), s)};
  current_stream(out.device())
      .launch(kernels_for(out.device()).binary->compare_scalar, name, args, {a.storage()}, {out.storage()});
}

}  // namespace encore::backend
