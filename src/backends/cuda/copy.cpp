// PLACEHOLDER until the CUDA copy kernels land: every function refuses with
// kUnimplemented, so a CUDA tensor reaching this family fails loudly.
#include "src/backends/cuda/copy.h"

#include "encore/error.h"

namespace encore::cuda {
namespace {
[[noreturn]] void not_yet(const char* op) {
  throw_error(absl::StatusCode::kUnimplemented, absl::StrFormat("cuda::%s: no CUDA kernel yet", op));
}
}  // namespace

void fill(const Tensor& out, double value) { not_yet("fill"); }
void copy(const Tensor& dst, const Tensor& src) { not_yet("copy"); }
void arange(const Tensor& out, double start, double step) { not_yet("arange"); }
void random(const Tensor& out, const Tensor& state, RandomKind kind) { not_yet("random"); }

}  // namespace encore::cuda
