// backend::fill, copy, arange and random: checks, layouts, the fill value
// converted on the host (convert.h) and one launch of the output's backend
// kernel (cpu/copy.cpp, cuda/copy.cu).
#include "encore/error.h"
#include "src/backends/convert.h"
#include "src/backends/dtype_checks.h"
#include "src/backends/kernels.h"
#include "src/backends/tensor_layout.h"
#include "src/core/stream.h"

namespace encore::backend {

void fill(const Tensor& out, double value) {
  const FillArgs args{make_layout<1>(out, {}), out.dtype(), value_bits(out.dtype(), value)};
  current_stream(out.device()).launch(kernels_for(out.device()).copy->fill, "fill", args, {}, {out.storage()});
}

void copy(const Tensor& dst, const Tensor& src) {
  ENCORE_CHECK(dst.device() == src.device(), "copy: needs one device, got %s and %s (shape %s)", dst.device().str(),
               src.device().str(), shape_str(dst.shape()));
  const CopyArgs args{make_layout<2>(dst, {&src}), dst.dtype(), src.dtype()};
  current_stream(dst.device())
      .launch(kernels_for(dst.device()).copy->copy, "copy", args, {src.storage()}, {dst.storage()});
}

void arange(const Tensor& out, int64_t start, int64_t step) {
  check_numeric(out.dtype(), "arange");
  ENCORE_CHECK(out.is_contiguous(), "arange: out must be contiguous (shape %s)", shape_str(out.shape()));
  const ArangeArgs args{out.data_ptr(), out.numel(), out.dtype(), start, step};
  current_stream(out.device()).launch(kernels_for(out.device()).copy->arange, "arange", args, {}, {out.storage()});
}

void random(const Tensor& out, const Tensor& state, RandomKind kind) {
  const char* name = kind == RandomKind::kUniform ? "rand" : "randn";
  check_float(out.dtype(), name);
  ENCORE_CHECK(out.is_contiguous(), "%s: out must be contiguous (shape %s)", name, shape_str(out.shape()));
  ENCORE_CHECK(state.dtype() == kInt64 && state.numel() == 2 && state.is_contiguous() &&
                   state.device() == out.device(),
               "%s: generator state must be a dense i64 [2] on %s, got %s %s on %s", name, out.device().str(),
               shape_str(state.shape()), dtype_name(state.dtype()), state.device().str());
  const RandomArgs args{out.data_ptr(), out.numel(), state.data<int64_t>(), out.dtype(), kind};
  current_stream(out.device())
      .launch(kernels_for(out.device()).copy->random, name, args, {state.storage()},
              {out.storage(), state.storage()});
}

Tensor to_float32(const Tensor& t) {
  if (t.dtype() == kFloat32) return t;
  Tensor out = empty(t.shape(), kFloat32, t.device());
  copy(out, t);
  return out;
}

Tensor contiguous(const Tensor& t) {
  if (t.is_contiguous()) return t;
  Tensor out = empty(t.shape(), t.dtype(), t.device());
  copy(out, t);
  return out;
}

}  // namespace encore::backend
