// The table of one multi-tensor optimizer launch: every parameter's data
// pointers and sizes, in plain data that CPU and CUDA kernels both read (the
// CUDA kernel from device memory). nvcc-safe: no Abseil, no tensor types.
//
//   std::vector<AdamWEntry> rows = ...;      // one per parameter, starts = prefix sums of numel
//   Tensor table = table_tensor(rows);       // persistent, on the parameters' device (optim/adamw.cpp)
//   cpu::adamw_update_many(table, n, total, dtype, storages..., lr, step, ...);
#pragma once

#include <cstdint>

namespace encore::backend {

// One parameter of a multi-tensor AdamW launch. All four arrays are dense
// (contiguous) with `numel` elements; p and g of the launch's dtype, m and v
// f32. `start` is the sum of numel over the entries before this one.
struct AdamWEntry {
  char* p;
  const char* g;
  float* m;
  float* v;
  int64_t numel;
  int64_t start;
};

}  // namespace encore::backend
