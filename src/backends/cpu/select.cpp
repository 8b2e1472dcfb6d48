// The CPU kernels of elementwise selection: where and masked_fill
// (contracts: WhereArgs, MaskedFillArgs in src/backends/kernel_table.h).
#include <cstdint>

#include "src/backends/convert.h"
#include "src/backends/cpu/dispatch.h"
#include "src/backends/cpu/loops.h"
#include "src/backends/cpu/parallel.h"
#include "src/backends/cpu/simd.h"
#include "src/backends/kernel_table.h"

namespace encore::cpu {
namespace {

using namespace backend;   // the shared argument structs, kinds and formulas

// ---- kernels ----
// Bool operands are read as bytes (0 or 1) and tested against zero.

template <typename T>
ENCORE_SIMD_CLONES void where_run(T* o, const uint8_t* c, const T* x, const T* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) o[i] = c[i] != 0 ? x[i] : y[i];
}

template <typename T>
void where_loop(const Layout<4>& l) {   // out, cond, a, b
  parallel_for(l.numel, kGrainElementwise, [&](int64_t b, int64_t e) {
    if (l.contiguous) {
      where_run<T>(reinterpret_cast<T*>(l.ptr[0]) + b, reinterpret_cast<const uint8_t*>(l.ptr[1]) + b,
                   reinterpret_cast<const T*>(l.ptr[2]) + b, reinterpret_cast<const T*>(l.ptr[3]) + b, e - b);
    } else {
      for_each_element(l, b, e, [](char** p) {
        *reinterpret_cast<T*>(p[0]) = *reinterpret_cast<const uint8_t*>(p[1]) != 0 ? *reinterpret_cast<const T*>(p[2])
                                                                                  : *reinterpret_cast<const T*>(p[3]);
      });
    }
  });
}

// One dense stretch: o[i] = v where the mask byte says so, else x[i]. A
// clone per x86-64 level (like where_run): the byte-to-lane widening needs
// SSE4.1 or AVX2 (the baseline build ran it at 0.7 ns an element: an
// attention mask [32, 32] over 64 heads, 46 us of the demo GPT's 4 ms step;
// now 8.5 us).
template <typename T, bool kFillWhen>
ENCORE_SIMD_CLONES void masked_fill_run(T* o, const T* x, const uint8_t* m, int64_t n, T v) {
  for (int64_t i = 0; i < n; ++i) o[i] = (m[i] != 0) == kFillWhen ? v : x[i];
}

template <typename T, bool kFillWhen>
void masked_fill_loop(const Layout<3>& l, T v) {   // out, a, mask
  parallel_for(l.numel, kGrainElementwise, [&](int64_t b, int64_t e) {
    if (l.contiguous) {
      masked_fill_run<T, kFillWhen>(reinterpret_cast<T*>(l.ptr[0]) + b, reinterpret_cast<const T*>(l.ptr[1]) + b,
                                    reinterpret_cast<const uint8_t*>(l.ptr[2]) + b, e - b, v);
    } else if (l.stride[0][l.ndim - 1] == sizeof(T) && l.stride[1][l.ndim - 1] == sizeof(T) &&
               l.stride[2][l.ndim - 1] == 1) {
      // Rows dense in every operand (an attention mask [T, T] broadcast over
      // batch and heads): one flat loop per row.
      for_each_run(l, b, e, [v](char** p, int64_t n) {
        masked_fill_run<T, kFillWhen>(reinterpret_cast<T*>(p[0]), reinterpret_cast<const T*>(p[1]),
                                      reinterpret_cast<const uint8_t*>(p[2]), n, v);
      });
    } else {
      for_each_element(l, b, e, [v](char** p) {
        const bool fill = (*reinterpret_cast<const uint8_t*>(p[2]) != 0) == kFillWhen;
        *reinterpret_cast<T*>(p[0]) = fill ? v : *reinterpret_cast<const T*>(p[1]);
      });
    }
  });
}

// ---- kernel table entries: the runtime dtype and flag picked once per launch ----
// (NOTE [ Specialized kernels ] in src/core/kernel.h: a replay calls the loop directly)

template <typename T>
struct WhereEntry {
  static void run(const WhereArgs& a) { where_loop<T>(a.l); }
};

template <typename T, bool kFillWhen>
void masked_fill_entry(const MaskedFillArgs& a) {
  masked_fill_loop<T, kFillWhen>(a.l, backend::from_bits<T>(a.value_bits));
}

KernelThunk pick_masked_fill(const MaskedFillArgs& a) {
  return dispatch_all(a.dtype, "masked_fill", [&](auto tag) {
    using T = typename decltype(tag)::type;
    return a.fill_when ? thunk_of<&masked_fill_entry<T, true>>() : thunk_of<&masked_fill_entry<T, false>>();
  });
}

}  // namespace

extern const SelectKernels kSelect = {
    .where = specialized_kernel<&pick_all<WhereEntry, WhereArgs>>(),
    .masked_fill = specialized_kernel<&pick_masked_fill>(),
};

}  // namespace encore::cpu
