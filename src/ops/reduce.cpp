// PLACEHOLDER: stubs that throw kUnimplemented until this op family lands.
#include "encore/ops.h"

namespace encore {

Tensor sum(const Tensor& a, std::vector<int64_t> dims, bool keepdim) {
  throw_error(absl::StatusCode::kUnimplemented, "sum: not implemented yet");
}
Tensor mean(const Tensor& a, std::vector<int64_t> dims, bool keepdim) {
  throw_error(absl::StatusCode::kUnimplemented, "mean: not implemented yet");
}
Tensor var(const Tensor& a, std::vector<int64_t> dims, int64_t correction, bool keepdim) {
  throw_error(absl::StatusCode::kUnimplemented, "var: not implemented yet");
}
std::pair<Tensor, Tensor> max(const Tensor& a, int64_t dim, bool keepdim) {
  throw_error(absl::StatusCode::kUnimplemented, "max: not implemented yet");
}
Tensor max(const Tensor& a) {
  throw_error(absl::StatusCode::kUnimplemented, "max: not implemented yet");
}
Tensor argmax(const Tensor& a, int64_t dim, bool keepdim) {
  throw_error(absl::StatusCode::kUnimplemented, "argmax: not implemented yet");
}
Tensor sum_to(const Tensor& a, absl::Span<const int64_t> shape) {
  throw_error(absl::StatusCode::kUnimplemented, "sum_to: not implemented yet");
}

}  // namespace encore
