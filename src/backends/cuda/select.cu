// CUDA kernels for elementwise selection: where and masked_fill (contracts:
// WhereArgs, MaskedFillArgs in src/backends/kernel_table.h). Kernels, then
// launchers. Elements are moved as storage bytes, never converted, so every
// dtype is exact. Bool operands are read as bytes and tested against zero.
#include "src/backends/convert.h"
#include "src/backends/cuda/elementwise.cuh"
#include "src/backends/kernel_table.h"

namespace encore::cuda {
namespace {

using namespace backend;   // the shared argument structs, kinds and formulas

// ---- kernels ----

template <typename T>
struct WhereFn {   // operands out, cond, a, b
  __device__ void operator()(char* const* p) const {
    const bool c = *reinterpret_cast<const uint8_t*>(p[1]) != 0;
    *reinterpret_cast<T*>(p[0]) = *reinterpret_cast<const T*>(c ? p[2] : p[3]);
  }
};

template <typename T>
struct MaskedFillFn {   // operands out, a, mask
  T value;
  bool fill_when;
  __device__ void operator()(char* const* p) const {
    const bool fill = (*reinterpret_cast<const uint8_t*>(p[2]) != 0) == fill_when;
    *reinterpret_cast<T*>(p[0]) = fill ? value : *reinterpret_cast<const T*>(p[1]);
  }
};

// ---- launchers ----

void where_launch(const WhereArgs& a) {
  visit_dtype(a.dtype, [&](auto tag) {
    using T = Bits<typename decltype(tag)::type>;
    launch_elementwise(a.l, WhereFn<T>{}, "where");
  });
}

void masked_fill_launch(const MaskedFillArgs& a) {
  visit_dtype(a.dtype, [&](auto tag) {
    using T = Bits<typename decltype(tag)::type>;
    launch_elementwise(a.l, MaskedFillFn<T>{backend::from_bits<T>(a.value_bits), a.fill_when}, "masked_fill");
  });
}

}  // namespace

extern const SelectKernels kSelect = {kernel<&where_launch>(), kernel<&masked_fill_launch>()};

}  // namespace encore::cuda
