// PLACEHOLDER: stubs that throw kUnimplemented until this op family lands.
#include "encore/ops.h"

namespace encore {

Tensor exp(const Tensor& a) {
  throw_error(absl::StatusCode::kUnimplemented, "exp: not implemented yet");
}
Tensor log(const Tensor& a) {
  throw_error(absl::StatusCode::kUnimplemented, "log: not implemented yet");
}
Tensor sqrt(const Tensor& a) {
  throw_error(absl::StatusCode::kUnimplemented, "sqrt: not implemented yet");
}
Tensor rsqrt(const Tensor& a) {
  throw_error(absl::StatusCode::kUnimplemented, "rsqrt: not implemented yet");
}
Tensor pow(const Tensor& a, double exponent) {
  throw_error(absl::StatusCode::kUnimplemented, "pow: not implemented yet");
}
Tensor abs(const Tensor& a) {
  throw_error(absl::StatusCode::kUnimplemented, "abs: not implemented yet");
}
Tensor tanh(const Tensor& a) {
  throw_error(absl::StatusCode::kUnimplemented, "tanh: not implemented yet");
}
Tensor sigmoid(const Tensor& a) {
  throw_error(absl::StatusCode::kUnimplemented, "sigmoid: not implemented yet");
}
Tensor relu(const Tensor& a) {
  throw_error(absl::StatusCode::kUnimplemented, "relu: not implemented yet");
}
Tensor gelu(const Tensor& a, GeluApprox approx) {
  throw_error(absl::StatusCode::kUnimplemented, "gelu: not implemented yet");
}
Tensor silu(const Tensor& a) {
  throw_error(absl::StatusCode::kUnimplemented, "silu: not implemented yet");
}
Tensor clamp(const Tensor& a, double min, double max) {
  throw_error(absl::StatusCode::kUnimplemented, "clamp: not implemented yet");
}

}  // namespace encore
