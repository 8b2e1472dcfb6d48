// PLACEHOLDER until the CUDA binary kernels land: every function refuses with
// kUnimplemented, so a CUDA tensor reaching this family fails loudly.
#include "src/backends/cuda/binary.h"

#include "encore/error.h"

namespace encore::cuda {
namespace {
[[noreturn]] void not_yet(const char* op) {
  throw_error(absl::StatusCode::kUnimplemented, absl::StrFormat("cuda::%s: no CUDA kernel yet", op));
}
}  // namespace

void binary(BinaryOp op, const Tensor& out, const Tensor& a, const Tensor& b, double alpha) { not_yet("binary"); }
void binary_scalar(ScalarOp op, const Tensor& out, const Tensor& a, double s) { not_yet("binary_scalar"); }

}  // namespace encore::cuda
