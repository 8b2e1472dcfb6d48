#include "src/backends/tensor_layout.h"

namespace encore::backend {

void broadcast_strides(const Tensor& t, absl::Span<const int64_t> shape, int64_t* out_bytes) {
  const int64_t nd = static_cast<int64_t>(shape.size());
  const int64_t td = t.dim();
  const int64_t es = dtype_size(t.dtype());
  for (int64_t d = 0; d < nd; ++d) {
    const int64_t k = d - (nd - td);
    out_bytes[d] = (k < 0 || t.shape()[k] == 1) ? 0 : t.strides()[k] * es;
  }
}

namespace {
// True when every operand is dense, row-major and of out's shape: the common
// case, which needs no per-dim work at all.
bool all_dense_same_shape(const Tensor& out, std::initializer_list<const Tensor*> inputs) {
  if (!out.is_contiguous()) return false;
  for (const Tensor* t : inputs) {
    if (t->shape() != out.shape() || !t->is_contiguous()) return false;
  }
  return true;
}
}  // namespace

template <int N>
Layout<N> make_layout(const Tensor& out, std::initializer_list<const Tensor*> inputs) {
  // Operand 0 is out, so N - 1 inputs fill the layout (otherwise a bug in encore).
  ENCORE_CHECK_CODE(static_cast<int>(inputs.size()) == N - 1, kInternal, "make_layout<%d>: %d inputs, need %d", N,
                    static_cast<int>(inputs.size()), N - 1);
  Layout<N> l;
  // An empty output reads and writes nothing. Its strides may not fit in
  // bytes ([0, 2^63 - 1] has a row stride of 2^63 - 1 elements), so none are
  // computed: one dim of size 0.
  if (out.numel() == 0 || all_dense_same_shape(out, inputs)) {
    l.ndim = 1;
    l.numel = out.numel();
    l.shape[0] = l.numel;
    l.contiguous = true;
    l.ptr[0] = static_cast<char*>(out.data_ptr());
    l.stride[0][0] = dtype_size(out.dtype());
    for (int k = 1; k < N; ++k) {
      const Tensor* t = inputs.begin()[k - 1];
      l.ptr[k] = static_cast<char*>(t->data_ptr());
      l.stride[k][0] = dtype_size(t->dtype());
    }
    return l;
  }
  const Shape& shape = out.shape();
  const int nd = static_cast<int>(shape.size());
  ENCORE_CHECK(nd <= kMaxDims, "elementwise: %d dims exceed the limit of %d (shape %s)", nd, kMaxDims,
               shape_str(shape));
  l.numel = out.numel();
  int64_t full[N][kMaxDims];
  l.ptr[0] = static_cast<char*>(out.data_ptr());
  broadcast_strides(out, shape, full[0]);
  for (int k = 1; k < N; ++k) {
    const Tensor* t = inputs.begin()[k - 1];
    l.ptr[k] = static_cast<char*>(t->data_ptr());
    broadcast_strides(*t, shape, full[k]);
  }
  // Merge dim d into the run below it when every operand steps contiguously.
  int m = 0;
  for (int d = 0; d < nd; ++d) {
    if (shape[d] == 1) continue;
    bool merge = m > 0;
    for (int j = 0; j < N && merge; ++j) merge = l.stride[j][m - 1] == full[j][d] * shape[d];
    if (merge) {
      l.shape[m - 1] *= shape[d];
      for (int j = 0; j < N; ++j) l.stride[j][m - 1] = full[j][d];
    } else {
      l.shape[m] = shape[d];
      for (int j = 0; j < N; ++j) l.stride[j][m] = full[j][d];
      ++m;
    }
  }
  if (m == 0) {   // a single element
    l.shape[0] = 1;
    for (int j = 0; j < N; ++j) l.stride[j][0] = 0;
    m = 1;
  }
  l.ndim = m;
  l.contiguous = m == 1;
  for (int j = 0; j < N && l.contiguous; ++j) {
    const Tensor* t = j == 0 ? &out : inputs.begin()[j - 1];
    l.contiguous = l.stride[j][0] == dtype_size(t->dtype()) || l.numel <= 1;
  }
  return l;
}

template Layout<1> make_layout<1>(const Tensor&, std::initializer_list<const Tensor*>);
template Layout<2> make_layout<2>(const Tensor&, std::initializer_list<const Tensor*>);
template Layout<3> make_layout<3>(const Tensor&, std::initializer_list<const Tensor*>);
template Layout<4> make_layout<4>(const Tensor&, std::initializer_list<const Tensor*>);

}  // namespace encore::backend
