#include "src/backends/cpu/select.h"

#include <cstdint>

#include "src/backends/cpu/copy.h"
#include "src/backends/cpu/dispatch.h"
#include "src/backends/cpu/loops.h"
#include "src/backends/cpu/parallel.h"
#include "src/core/stream.h"

namespace encore::cpu {
namespace {

// ---- kernels ----
// Bool operands are read as bytes (0 or 1) and tested against zero.

template <typename T>
void where_kernel(const Layout<4>& l) {   // out, cond, a, b
  parallel_for(l.numel, kGrainElementwise, [&](int64_t b, int64_t e) {
    if (l.contiguous) {
      T* o = reinterpret_cast<T*>(l.ptr[0]);
      const uint8_t* c = reinterpret_cast<const uint8_t*>(l.ptr[1]);
      const T* x = reinterpret_cast<const T*>(l.ptr[2]);
      const T* y = reinterpret_cast<const T*>(l.ptr[3]);
      for (int64_t i = b; i < e; ++i) o[i] = c[i] != 0 ? x[i] : y[i];
    } else {
      for_each_element(l, b, e, [](char** p) {
        *reinterpret_cast<T*>(p[0]) = *reinterpret_cast<const uint8_t*>(p[1]) != 0 ? *reinterpret_cast<const T*>(p[2])
                                                                                  : *reinterpret_cast<const T*>(p[3]);
      });
    }
  });
}

template <typename T>
struct MaskedFillArgs { Layout<3> l; T value; };   // out, a, mask

template <typename T, bool kFillWhen>
void masked_fill_kernel(const MaskedFillArgs<T>& a) {
  const Layout<3>& l = a.l;
  const T v = a.value;
  parallel_for(l.numel, kGrainElementwise, [&](int64_t b, int64_t e) {
    if (l.contiguous) {
      T* o = reinterpret_cast<T*>(l.ptr[0]);
      const T* x = reinterpret_cast<const T*>(l.ptr[1]);
      const uint8_t* m = reinterpret_cast<const uint8_t*>(l.ptr[2]);
      for (int64_t i = b; i < e; ++i) o[i] = (m[i] != 0) == kFillWhen ? v : x[i];
    } else if (l.stride[0][l.ndim - 1] == sizeof(T) && l.stride[1][l.ndim - 1] == sizeof(T) &&
               l.stride[2][l.ndim - 1] == 1) {
      // Rows dense in every operand (an attention mask [T, T] broadcast over
      // batch and heads): one flat loop per row.
      for_each_run(l, b, e, [v](char** p, int64_t n) {
        T* o = reinterpret_cast<T*>(p[0]);
        const T* x = reinterpret_cast<const T*>(p[1]);
        const uint8_t* m = reinterpret_cast<const uint8_t*>(p[2]);
        for (int64_t i = 0; i < n; ++i) o[i] = (m[i] != 0) == kFillWhen ? v : x[i];
      });
    } else {
      for_each_element(l, b, e, [v](char** p) {
        const bool fill = (*reinterpret_cast<const uint8_t*>(p[2]) != 0) == kFillWhen;
        *reinterpret_cast<T*>(p[0]) = fill ? v : *reinterpret_cast<const T*>(p[1]);
      });
    }
  });
}

}  // namespace

// ---- launchers ----

void where(const Tensor& out, const Tensor& cond, const Tensor& a, const Tensor& b) {
  dispatch_all(out.dtype(), "where", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const Layout<4> l = make_layout<4>(out, {&cond, &a, &b});
    current_stream(kCPU).launch<&where_kernel<T>>("where", l, {cond.storage(), a.storage(), b.storage()},
                                                  {out.storage()});
  });
}

void masked_fill(const Tensor& out, const Tensor& a, const Tensor& mask, double value, bool fill_when) {
  dispatch_all(out.dtype(), "masked_fill", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const MaskedFillArgs<T> args{make_layout<3>(out, {&a, &mask}), convert<T>(value)};
    if (fill_when) {
      current_stream(kCPU).launch<&masked_fill_kernel<T, true>>("masked_fill", args, {a.storage(), mask.storage()},
                                                                 {out.storage()});
    } else {
      current_stream(kCPU).launch<&masked_fill_kernel<T, false>>("masked_fill", args, {a.storage(), mask.storage()},
                                                                  {out.storage()});
    }
  });
}

}  // namespace encore::cpu
