// PLACEHOLDER until the CUDA unary kernels land: every function refuses with
// kUnimplemented, so a CUDA tensor reaching this family fails loudly.
#include "src/backends/cuda/unary.h"

#include "encore/error.h"

namespace encore::cuda {
namespace {
[[noreturn]] void not_yet(const char* op) {
  throw_error(absl::StatusCode::kUnimplemented, absl::StrFormat("cuda::%s: no CUDA kernel yet", op));
}
}  // namespace

void unary(UnaryOp op, const Tensor& out, const Tensor& a, double p0, double p1) { not_yet("unary"); }
void unary_backward(UnaryOp op, const Tensor& grad_in, const Tensor& g, const Tensor& saved, double p0,
                    double p1) { not_yet("unary_backward"); }

}  // namespace encore::cuda
