// Launchers of the CUDA data-movement kernels (copy.cu): fill, strided copy
// with dtype conversion, arange and Philox random draws, with their argument
// structs, which cuda::fill/copy/arange/random (copy.cpp) fill on the host.
// nvcc-safe: no Abseil, no tensor types.
//
//   FillArgs args{make_layout<1>(out, {}), out.dtype(), bits_of_value};
//   current_stream(out.device()).launch<&fill_launch>("fill", args, {}, {out.storage()});
#pragma once

#include <cstdint>

#include "encore/dtype.h"
#include "src/backends/layout.h"
#include "src/backends/op_kinds.h"

namespace encore::cuda {

// Every element of operand 0 = the value; any strides, any dtype.
struct FillArgs {
  backend::Layout<1> l;
  DType dtype;
  uint64_t value_bits;   // the value already converted to `dtype`: its storage bytes, low bytes first
};

// dst = convert(src); operands dst, src (broadcast to dst); any pair of dtypes.
struct CopyArgs {
  backend::Layout<2> l;
  DType dst_dtype, src_dtype;
};

// out[i] = start + step * i (in double, then converted); out dense, n elements.
struct ArangeArgs {
  void* out;
  int64_t n;
  DType dtype;   // not bool
  double start, step;
};

// out[i] = draw i of Philox at counter state[1] + i, key state[0]; then a
// second kernel advances state[1] by n. out dense float dtype; state: two
// i64 in device memory, read and written only by the kernels.
struct RandomArgs {
  void* out;
  int64_t n;
  int64_t* state;
  DType dtype;
  backend::RandomKind kind;
};

void fill_launch(const FillArgs& a);
void copy_launch(const CopyArgs& a);
void arange_launch(const ArangeArgs& a);
void random_launch(const RandomArgs& a);

}  // namespace encore::cuda
