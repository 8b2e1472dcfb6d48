// Layout: how an elementwise kernel walks N operands (the output first), as
// plain data that CPU kernels and CUDA kernels both carry in their argument
// structs. No Abseil and no tensor types here: .cu files include it.
//
//   Layout<3> l = make_layout<3>(out, {&a, &b});   // src/backends/tensor_layout.h
//   // l.ptr[k] + sum_d idx[d] * l.stride[k][d] is operand k's element at idx
//
// make_layout() merges dims that are contiguous in every operand, so most
// layouts end with ndim == 1 and `contiguous` set.
#pragma once

#include <cstdint>

namespace encore::backend {

inline constexpr int kLayoutMaxDims = 8;   // equals kMaxDims in encore/tensor.h (checked in tensor_layout.h)

template <int N>
struct Layout {
  // Entries past ndim are left uninitialised: filling them costs more than
  // the rest of a tiny op.
  int ndim;
  int64_t numel;
  bool contiguous;                        // every operand dense with its element size
  int64_t shape[kLayoutMaxDims];          // after merging
  int64_t stride[N][kLayoutMaxDims];      // bytes; 0 on broadcast dims
  char* ptr[N];

  template <typename V>
  void fields(V& v) const {   // src/core/kernel_args.h: entries past ndim are not set, so not visited
    static constexpr const char* kStrideNames[] = {"stride0", "stride1", "stride2", "stride3"};
    static_assert(N <= 4, "name the strides of more operands");
    v("ndim", ndim);
    v("numel", numel);
    v("contiguous", contiguous);
    v("shape", shape, ndim);
    for (int n = 0; n < N; ++n) v(kStrideNames[n], stride[n], ndim);
    v("ptr", ptr);
  }
};

}  // namespace encore::backend
