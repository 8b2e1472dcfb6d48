// PLACEHOLDER: stubs that throw kUnimplemented until this op family lands.
#include "encore/ops.h"

namespace encore {

Tensor matmul(const Tensor& a, const Tensor& b) {
  throw_error(absl::StatusCode::kUnimplemented, "matmul: not implemented yet");
}
Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias) {
  throw_error(absl::StatusCode::kUnimplemented, "linear: not implemented yet");
}

}  // namespace encore
