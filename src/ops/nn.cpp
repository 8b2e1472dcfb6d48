// PLACEHOLDER: stubs that throw kUnimplemented until this op family lands.
#include "encore/ops.h"

namespace encore {

Tensor softmax(const Tensor& a, int64_t dim) {
  throw_error(absl::StatusCode::kUnimplemented, "softmax: not implemented yet");
}
Tensor log_softmax(const Tensor& a, int64_t dim) {
  throw_error(absl::StatusCode::kUnimplemented, "log_softmax: not implemented yet");
}
Tensor cross_entropy(const Tensor& logits, const Tensor& target, int64_t ignore_index) {
  throw_error(absl::StatusCode::kUnimplemented, "cross_entropy: not implemented yet");
}
Tensor layer_norm(const Tensor& x, Shape normalized_shape, const Tensor& weight, const Tensor& bias, double eps) {
  throw_error(absl::StatusCode::kUnimplemented, "layer_norm: not implemented yet");
}
Tensor embedding(const Tensor& weight, const Tensor& indices) {
  throw_error(absl::StatusCode::kUnimplemented, "embedding: not implemented yet");
}
Tensor dropout(const Tensor& a, double p, bool training, Generator* gen) {
  throw_error(absl::StatusCode::kUnimplemented, "dropout: not implemented yet");
}

}  // namespace encore
