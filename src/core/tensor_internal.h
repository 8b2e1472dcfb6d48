// Internal tensor construction helpers shared by ops and backends.
#pragma once

#include "encore/tensor.h"

namespace encore {

// Row-major strides (elements) for shape.
Shape contiguous_strides(absl::Span<const int64_t> shape);
// A tensor sharing base's storage (and version counter) with the given
// geometry; no autograd history.
Tensor make_view(const Tensor& base, Shape shape, Shape strides, int64_t offset);

}  // namespace encore
