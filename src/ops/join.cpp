// PLACEHOLDER: stubs that throw kUnimplemented until this op family lands.
#include "encore/ops.h"

namespace encore {

Tensor concat(const std::vector<Tensor>& tensors, int64_t dim) {
  throw_error(absl::StatusCode::kUnimplemented, "concat: not implemented yet");
}
Tensor stack(const std::vector<Tensor>& tensors, int64_t dim) {
  throw_error(absl::StatusCode::kUnimplemented, "stack: not implemented yet");
}
std::vector<Tensor> split(const Tensor& a, int64_t size, int64_t dim) {
  throw_error(absl::StatusCode::kUnimplemented, "split: not implemented yet");
}

}  // namespace encore
