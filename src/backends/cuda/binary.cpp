// cuda::binary and cuda::binary_scalar: dtype checks and layouts on the host,
// then one launch of binary.cu's kernels through the device's stream.
#include "src/backends/cuda/binary.h"

#include "src/backends/cpu/dispatch.h"
#include "src/backends/cuda/binary_launch.h"
#include "src/backends/tensor_layout.h"
#include "src/core/stream.h"

namespace encore::cuda {
namespace {
constexpr const char* kBinaryNames[] = {"add", "sub", "mul", "div"};
constexpr const char* kScalarNames[] = {"add_scalar", "mul_scalar", "rsub_scalar", "rdiv_scalar"};
}  // namespace

void binary(BinaryOp op, const Tensor& out, const Tensor& a, const Tensor& b, double alpha) {
  const char* name = kBinaryNames[static_cast<int>(op)];
  cpu::dispatch_numeric(out.dtype(), name, [](auto) {});   // the CPU's dtype check and message
  const BinaryArgs args{backend::make_layout<3>(out, {&a, &b}), out.dtype(), op, alpha};
  current_stream(out.device()).launch<&binary_launch>(name, args, {a.storage(), b.storage()}, {out.storage()});
}

void binary_scalar(ScalarOp op, const Tensor& out, const Tensor& a, double s) {
  const char* name = kScalarNames[static_cast<int>(op)];
  cpu::dispatch_numeric(out.dtype(), name, [](auto) {});
  const BinaryScalarArgs args{backend::make_layout<2>(out, {&a}), out.dtype(), op, s};
  current_stream(out.device()).launch<&binary_scalar_launch>(name, args, {a.storage()}, {out.storage()});
}

}  // namespace encore::cuda
