// Builds a Layout (src/backends/layout.h) from tensors: broadcasting of the
// inputs to the output's shape, strides in bytes, contiguous dims merged.
// Backend-neutral: the CPU and CUDA backends both call it on the host.
//
//   backend::Layout<3> l = backend::make_layout<3>(out, {&a, &b});
#pragma once

#include <initializer_list>

#include "absl/types/span.h"
#include "encore/tensor.h"
#include "src/backends/layout.h"

namespace encore::backend {

static_assert(kLayoutMaxDims == kMaxDims, "layouts carry every dim a tensor may have");

// Strides of `t` (bytes) when broadcast to `shape` (t's dims align right).
void broadcast_strides(const Tensor& t, absl::Span<const int64_t> shape, int64_t* out_bytes);

// out must have the broadcast shape of the inputs. Throws if dims > kMaxDims.
// N = 1 + inputs.size(), for N in 1..4.
template <int N>
Layout<N> make_layout(const Tensor& out, std::initializer_list<const Tensor*> inputs);

// Appends a dim (size, stride) to a group of dims, merging it into the
// group's last dim when the two are contiguous with each other; size-1 dims
// are dropped. Reductions group their kept and reduced dims with it.
inline void push_dim(int64_t size, int64_t stride, int32_t& ndim, int64_t* shape, int64_t* strides) {
  if (size == 1) return;
  if (ndim > 0 && strides[ndim - 1] == size * stride) {
    shape[ndim - 1] *= size;
    strides[ndim - 1] = stride;
    return;
  }
  shape[ndim] = size;
  strides[ndim] = stride;
  ++ndim;
}

}  // namespace encore::backend
