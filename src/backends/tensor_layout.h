// Builds a Layout (src/backends/layout.h) from tensors: broadcasting of the
// inputs to the output's shape, strides in bytes, contiguous dims merged.
// Backend-neutral: the CPU and CUDA backends both call it on the host.
//
//   backend::Layout<3> l = backend::make_layout<3>(out, {&a, &b});
#pragma once

#include <cstdint>
#include <initializer_list>

#include "absl/types/span.h"
#include "encore/tensor.h"
#include "src/backends/layout.h"
#include "src/backends/op_kinds.h"

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
// (An empty view's strides may be near 2^63, so size * stride may overflow:
// such dims stay apart. Merged sizes fit: NOTE [ Shapes whose nonzero dims
// fit ] in src/core/tensor.cpp.)
inline void push_dim(int64_t size, int64_t stride, int32_t& ndim, int64_t* shape, int64_t* strides) {
  if (size == 1) return;
  int64_t span = 0;
  if (ndim > 0 && !__builtin_mul_overflow(size, stride, &span) && strides[ndim - 1] == span) {
    shape[ndim - 1] *= size;
    strides[ndim - 1] = stride;
    return;
  }
  shape[ndim] = size;
  strides[ndim] = stride;
  ++ndim;
}

// Splits a's dims into kept and reduced groups (`dims`), each merged with
// push_dim, into any geometry struct with the fields in, out_numel,
// red_numel, kept_ndim/red_ndim and kept_/red_ shape and stride arrays
// (strides in elements); an empty group becomes one size-1 dim. Throws naming
// `op` if a has more than kMaxDims dims. The CPU and CUDA reductions share it.
template <typename Geom>
void group_reduce_dims(const char* op, const Tensor& a, DimMask dims, Geom& g) {
  ENCORE_CHECK(a.dim() <= kMaxDims, "%s: %d dims exceed the limit of %d (shape %s)", op, a.dim(), kMaxDims,
               shape_str(a.shape()));
  g.in = a.data_ptr();
  g.out_numel = 1;
  g.red_numel = 1;
  for (int64_t d = 0; d < a.dim(); ++d) {
    const int64_t size = a.shape()[d], stride = a.strides()[d];
    if (dims & dim_bit(d)) {   // no overflow: NOTE [ Shapes whose nonzero dims fit ] in src/core/tensor.cpp
      g.red_numel *= size;
      push_dim(size, stride, g.red_ndim, g.red_shape, g.red_stride);
    } else {
      g.out_numel *= size;
      push_dim(size, stride, g.kept_ndim, g.kept_shape, g.kept_stride);
    }
  }
  if (g.kept_ndim == 0) { g.kept_shape[0] = 1; g.kept_stride[0] = 0; g.kept_ndim = 1; }
  if (g.red_ndim == 0) { g.red_shape[0] = 1; g.red_stride[0] = 1; g.red_ndim = 1; }
}

}  // namespace encore::backend
