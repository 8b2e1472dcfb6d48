// Elementwise loops over N operands with broadcasting and arbitrary strides.
//
// Operand 0 is the output (contiguous, of the broadcast shape); the inputs are
// broadcast to it with stride 0 on stretched dims. make_layout() merges dims
// that are contiguous in every operand, so most calls end as a flat loop.
//
//   Layout<3> l = make_layout<3>(out, {&a, &b});
//   for_each_element(l, 0, l.numel, [](char** p) { *(float*)p[0] = *(float*)p[1] + *(float*)p[2]; });
//
// A Layout (src/backends/layout.h) is plain data (pointers, sizes, strides in
// bytes): kernels carry it in their argument struct, so a captured graph
// replays it without tensors.
#pragma once

#include <algorithm>
#include <cstdint>
#include <initializer_list>

#include "encore/tensor.h"
#include "src/backends/tensor_layout.h"

namespace encore::cpu {

using backend::Layout;
using backend::broadcast_strides;
using backend::make_layout;

// Calls f(char** ptrs, int64_t run) once per stretch of elements [begin,
// end) that lie along the innermost dim, in row-major order of the output:
// ptrs[k] points at operand k's first element of the stretch, which goes on
// for `run` elements at stride l.stride[k][l.ndim - 1].
template <int N, typename F>
void for_each_run(const Layout<N>& l, int64_t begin, int64_t end, F&& f) {
  if (begin >= end) return;
  char* p[N];
  int64_t idx[kMaxDims];
  int64_t rem = begin;
  for (int k = 0; k < N; ++k) p[k] = l.ptr[k];
  for (int d = l.ndim - 1; d >= 0; --d) {
    idx[d] = rem % l.shape[d];
    rem /= l.shape[d];
    for (int k = 0; k < N; ++k) p[k] += idx[d] * l.stride[k][d];
  }
  const int inner = l.ndim - 1;
  int64_t left = end - begin;
  while (left > 0) {
    const int64_t run = std::min(left, l.shape[inner] - idx[inner]);
    f(p, run);
    left -= run;
    if (left == 0) break;
    // Carry: back to the start of this row, then advance the outer dims.
    for (int k = 0; k < N; ++k) p[k] -= idx[inner] * l.stride[k][inner];
    idx[inner] = 0;
    for (int d = inner - 1; d >= 0; --d) {
      for (int k = 0; k < N; ++k) p[k] += l.stride[k][d];
      if (++idx[d] < l.shape[d]) break;
      for (int k = 0; k < N; ++k) p[k] -= l.shape[d] * l.stride[k][d];
      idx[d] = 0;
    }
  }
}

// Calls f(char** ptrs) for elements [begin, end) in row-major order of the
// output; ptrs[k] points at operand k's element.
template <int N, typename F>
void for_each_element(const Layout<N>& l, int64_t begin, int64_t end, F&& f) {
  const int inner = l.ndim - 1;
  for_each_run(l, begin, end, [&](char** start, int64_t run) {
    char* p[N];
    for (int k = 0; k < N; ++k) p[k] = start[k];
    for (int64_t i = 0; i < run; ++i) {
      f(p);
      for (int k = 0; k < N; ++k) p[k] += l.stride[k][inner];
    }
  });
}

}  // namespace encore::cpu
