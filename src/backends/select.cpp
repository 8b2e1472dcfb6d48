// backend::where and backend::masked_fill: the layout, the fill value
// converted on the host (convert.h) and one launch of the output's backend
// kernel (cpu/select.cpp, cuda/select.cu). Every dtype is supported.
#include "src/backends/convert.h"
#include "src/backends/kernels.h"
#include "src/backends/tensor_layout.h"
#include "src/core/stream.h"

namespace encore::backend {

void where(const Tensor& out, const Tensor& cond, const Tensor& a, const Tensor& b) {
  const WhereArgs args{make_layout<4>(out, {&cond, &a, &b}), out.dtype()};
  current_stream(out.device())
      .launch(kernels_for(out.device()).select->where, "where", args, {cond.storage(), a.storage(), b.storage()},
              {out.storage()});
}

void masked_fill(const Tensor& out, const Tensor& a, const Tensor& mask, double value, bool fill_when) {
  const MaskedFillArgs args{make_layout<3>(out, {&a, &mask}), out.dtype(), value_bits(out.dtype(), value),
                            fill_when};
  current_stream(out.device())
      .launch(kernels_for(out.device()).select->masked_fill, "masked_fill", args, {a.storage(), mask.storage()},
              {out.storage()});
}

}  // namespace encore::backend
