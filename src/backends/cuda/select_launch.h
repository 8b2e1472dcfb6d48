// Launchers of the CUDA selection kernels (select.cu) and their argument
// structs: plain data that cuda::where / cuda::masked_fill (select.cpp) fill
// on the host. nvcc-safe: no Abseil, no tensor types.
//
//   WhereArgs args{make_layout<4>(out, {&cond, &a, &b}), out.dtype()};
//   current_stream(out.device()).launch<&where_launch>("where", args, {...reads}, {out.storage()});
#pragma once

#include <cstdint>

#include "encore/dtype.h"
#include "src/backends/layout.h"

namespace encore::cuda {

// out = cond ? a : b; operands out, cond (bool), a, b; out, a, b of `dtype` (any, bool included).
struct WhereArgs {
  backend::Layout<4> l;
  DType dtype;
};

// out = (mask == fill_when) ? value : a; operands out, a, mask (bool).
struct MaskedFillArgs {
  backend::Layout<3> l;
  DType dtype;
  uint64_t value_bits;   // the value already converted to `dtype`: its storage bytes, low bytes first
  bool fill_when;
};

void where_launch(const WhereArgs& a);
void masked_fill_launch(const MaskedFillArgs& a);

}  // namespace encore::cuda
