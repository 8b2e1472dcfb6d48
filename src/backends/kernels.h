// The backend surface the op layer calls: every kernel family of every
// backend built, and one macro that picks the backend by device.
//
//   ENCORE_KERNEL(out.device(), binary, BinaryOp::kAdd, out, a, b);
//   // -> cuda::binary(...) when out is on a CUDA device, else cpu::binary(...)
//
// A backend is a namespace with the same functions and contracts as cpu::
// (src/backends/cpu/*.h document them; src/backends/cuda/*.h mirror them).
// Adding an op family means one header and one source per backend, plus a
// line here. Backends never include autograd or ops.
#pragma once

#include "src/backends/cpu/binary.h"
#include "src/backends/cpu/copy.h"
#include "src/backends/cpu/gemm.h"
#include "src/backends/cpu/nn.h"
#include "src/backends/cpu/optim.h"
#include "src/backends/cpu/reduce.h"
#include "src/backends/cpu/select.h"
#include "src/backends/cpu/unary.h"
#include "src/backends/op_kinds.h"

#if ENCORE_HAVE_CUDA
#include "src/backends/cuda/binary.h"
#include "src/backends/cuda/copy.h"
#include "src/backends/cuda/gemm.h"
#include "src/backends/cuda/nn.h"
#include "src/backends/cuda/optim.h"
#include "src/backends/cuda/reduce.h"
#include "src/backends/cuda/select.h"
#include "src/backends/cuda/unary.h"

#define ENCORE_KERNEL(device, fn, ...) \
  ((device).is_cuda() ? ::encore::cuda::fn(__VA_ARGS__) : ::encore::cpu::fn(__VA_ARGS__))
#else
#define ENCORE_KERNEL(device, fn, ...) ::encore::cpu::fn(__VA_ARGS__)
#endif
