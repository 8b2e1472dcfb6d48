// PLACEHOLDER until the CUDA nn kernels land: every function refuses with
// kUnimplemented, so a CUDA tensor reaching this family fails loudly.
#include "src/backends/cuda/nn.h"

#include "encore/error.h"

namespace encore::cuda {
namespace {
[[noreturn]] void not_yet(const char* op) {
  throw_error(absl::StatusCode::kUnimplemented, absl::StrFormat("cuda::%s: no CUDA kernel yet", op));
}
}  // namespace

void softmax(const Tensor& out, const Tensor& x, int64_t outer, int64_t n, int64_t inner, bool log) { not_yet("softmax"); }
void softmax_backward(const Tensor& grad_in, const Tensor& grad_out, const Tensor& out, int64_t outer,
                      int64_t n, int64_t inner, bool log) { not_yet("softmax_backward"); }
void cross_entropy(const Tensor& loss, const Tensor& stats, const Tensor& logits, const Tensor& target,
                   int64_t ignore_index) { not_yet("cross_entropy"); }
void cross_entropy_backward(const Tensor& grad_logits, const Tensor& grad_loss, const Tensor& logits,
                            const Tensor& target, const Tensor& stats, int64_t ignore_index) { not_yet("cross_entropy_backward"); }
void layer_norm(const Tensor& out, const Tensor& stats, const Tensor& x, const Tensor& weight,
                const Tensor& bias, double eps) { not_yet("layer_norm"); }
void layer_norm_backward(const Tensor& dx, const Tensor& dweight, const Tensor& dbias, const Tensor& grad_out,
                         const Tensor& x, const Tensor& weight, const Tensor& stats) { not_yet("layer_norm_backward"); }
void embedding(const Tensor& out, const Tensor& weight, const Tensor& indices) { not_yet("embedding"); }
void embedding_backward(const Tensor& grad_weight, const Tensor& grad_out, const Tensor& indices) { not_yet("embedding_backward"); }
void dropout(const Tensor& out, const Tensor& mask, const Tensor& a, const Tensor& state, double p) { not_yet("dropout"); }
void dropout_backward(const Tensor& grad_in, const Tensor& grad_out, const Tensor& mask, double scale) { not_yet("dropout_backward"); }

}  // namespace encore::cuda
