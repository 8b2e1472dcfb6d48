// PLACEHOLDER until the CUDA reduce kernels land: every function refuses with
// kUnimplemented, so a CUDA tensor reaching this family fails loudly.
#include "src/backends/cuda/reduce.h"

#include "encore/error.h"

namespace encore::cuda {
namespace {
[[noreturn]] void not_yet(const char* op) {
  throw_error(absl::StatusCode::kUnimplemented, absl::StrFormat("cuda::%s: no CUDA kernel yet", op));
}
}  // namespace

void sum(const Tensor& out, const Tensor& a, DimMask dims) { not_yet("sum"); }
void mean(const Tensor& out, const Tensor& a, DimMask dims) { not_yet("mean"); }
void var(const Tensor& out, const Tensor& a, const Tensor& mean, DimMask dims, int64_t correction) { not_yet("var"); }
void max(const Tensor& values, const Tensor& indices, const Tensor& a, DimMask dims) { not_yet("max"); }
void max_backward(const Tensor& grad_in, const Tensor& grad_out, const Tensor& indices, int64_t outer, int64_t n,
                  int64_t inner) { not_yet("max_backward"); }

}  // namespace encore::cuda
