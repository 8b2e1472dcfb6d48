#include "src/backends/matmul_layout.h"

#include <algorithm>

#include "encore/error.h"
#include "src/backends/kernels.h"

namespace encore::backend {

MatrixLayout blas_layout(int64_t rows, int64_t cols, int64_t rs, int64_t cs) {
  if (rows == 0 || cols == 0) return {true, false, std::max<int64_t>(1, cols)};   // nothing is read
  if ((cs == 1 || cols == 1) && (rows == 1 || rs >= cols)) return {true, false, rows == 1 ? cols : rs};
  if ((rs == 1 || rows == 1) && (cols == 1 || cs >= rows)) return {true, true, cols == 1 ? rows : cs};
  return {};
}

MatrixLayout matrix_layout(const Tensor& t) {
  const int64_t d = t.dim();
  return blas_layout(t.shape()[d - 2], t.shape()[d - 1], t.strides()[d - 2], t.strides()[d - 1]);
}

Shape batch_shape(const Tensor& out, const Tensor& a, const Tensor& b) {
  Shape batch;
  for (const Tensor* t : {&out, &a, &b}) {
    const Shape tb(t->shape().begin(), t->shape().end() - 2);
    if (tb.size() > batch.size()) batch.insert(batch.begin(), tb.size() - batch.size(), 1);
    const size_t lead = batch.size() - tb.size();
    for (size_t i = 0; i < tb.size(); ++i) {
      int64_t& d = batch[lead + i];
      ENCORE_CHECK(tb[i] == d || tb[i] == 1 || d == 1, "matmul: batch dims of %s, %s and %s do not broadcast",
                   shape_str(a.shape()), shape_str(b.shape()), shape_str(out.shape()));
      if (d == 1) d = tb[i];
    }
  }
  return batch;
}

MatmulOperands matmul_operands(const Tensor& out, const Tensor& a_in, const Tensor& b_in) {
  MatmulOperands o{a_in, b_in, matrix_layout(a_in), matrix_layout(b_in), matrix_layout(out), {}};
  if (!o.la.ok) o.la = matrix_layout(o.a = backend::contiguous(a_in));   // NOTE [ Matmul layouts ]
  if (!o.lb.ok) o.lb = matrix_layout(o.b = backend::contiguous(b_in));
  ENCORE_CHECK(o.lc.ok && !o.lc.trans, "matmul: output %s with strides %s needs a unit stride on its last dim",
               shape_str(out.shape()), shape_str(out.strides()));
  o.batch = batch_shape(out, o.a, o.b);
  ENCORE_CHECK(o.batch.size() + 2 <= kMaxDims, "matmul: shapes %s and %s have more than %d dims",
               shape_str(o.a.shape()), shape_str(o.b.shape()), kMaxDims);
  return o;
}

int64_t batch_stride(const Tensor& t, const Shape& batch, size_t i) {
  const int64_t j = static_cast<int64_t>(i) - (static_cast<int64_t>(batch.size()) - (t.dim() - 2));
  return (j < 0 || t.shape()[j] == 1) ? 0 : t.strides()[j];
}

}  // namespace encore::backend
