// PLACEHOLDER: stubs that throw kUnimplemented until this op family lands.
#include "encore/ops.h"

namespace encore {

Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b) {
  throw_error(absl::StatusCode::kUnimplemented, "where: not implemented yet");
}
Tensor masked_fill(const Tensor& a, const Tensor& mask, double value) {
  throw_error(absl::StatusCode::kUnimplemented, "masked_fill: not implemented yet");
}

}  // namespace encore
