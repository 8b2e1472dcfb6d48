// PLACEHOLDER until the CUDA select kernels land: every function refuses with
// kUnimplemented, so a CUDA tensor reaching this family fails loudly.
#include "src/backends/cuda/select.h"

#include "encore/error.h"

namespace encore::cuda {
namespace {
[[noreturn]] void not_yet(const char* op) {
  throw_error(absl::StatusCode::kUnimplemented, absl::StrFormat("cuda::%s: no CUDA kernel yet", op));
}
}  // namespace

void where(const Tensor& out, const Tensor& cond, const Tensor& a, const Tensor& b) { not_yet("where"); }
void masked_fill(const Tensor& out, const Tensor& a, const Tensor& mask, double value, bool fill_when) { not_yet("masked_fill"); }

}  // namespace encore::cuda
