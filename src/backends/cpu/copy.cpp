// The CPU kernels that create and move data: fill, strided copy with dtype
// conversion, arange and Philox random draws (contracts: FillArgs, CopyArgs,
// ArangeArgs, RandomArgs in src/backends/kernel_table.h).
#include <algorithm>
#include <cstring>
#include <type_traits>

#include "src/backends/convert.h"
#include "src/backends/cpu/dispatch.h"
#include "src/backends/cpu/loops.h"
#include "src/backends/cpu/parallel.h"
#include "src/backends/kernel_table.h"
#include "src/core/philox.h"

namespace encore::cpu {
namespace {

using namespace backend;   // the shared argument structs, kinds and formulas

// ---- kernels ----

// value: a local (not an argument field): a store through p could alias the
// field, forcing a reload per element.
template <typename T>
void fill_loop(const Layout<1>& l, T value) {
  parallel_for(l.numel, kGrainElementwise, [&](int64_t b, int64_t e) {
    if (l.contiguous) {
      T* p = reinterpret_cast<T*>(l.ptr[0]);
      std::fill(p + b, p + e, value);
    } else {
      for_each_element(l, b, e, [value](char** p) { *reinterpret_cast<T*>(p[0]) = value; });
    }
  });
}

template <typename To, typename From>
void copy_loop(const Layout<2>& l) {
  parallel_for(l.numel, kGrainElementwise, [&](int64_t b, int64_t e) {
    if (l.contiguous && std::is_same_v<To, From>) {
      std::memcpy(l.ptr[0] + b * sizeof(To), l.ptr[1] + b * sizeof(From), (e - b) * sizeof(To));
    } else if (l.contiguous) {
      To* d = reinterpret_cast<To*>(l.ptr[0]);
      const From* s = reinterpret_cast<const From*>(l.ptr[1]);
      for (int64_t i = b; i < e; ++i) d[i] = convert<To>(s[i]);
    } else if (l.stride[0][l.ndim - 1] == sizeof(To) && l.stride[1][l.ndim - 1] == sizeof(From)) {
      // Rows dense in both (e.g. a bias broadcast over a batch): one run per row.
      for_each_run(l, b, e, [](char** p, int64_t n) {
        if constexpr (std::is_same_v<To, From>) {
          std::memcpy(p[0], p[1], n * sizeof(To));
        } else {
          To* d = reinterpret_cast<To*>(p[0]);
          const From* s = reinterpret_cast<const From*>(p[1]);
          for (int64_t i = 0; i < n; ++i) d[i] = convert<To>(s[i]);
        }
      });
    } else {
      for_each_element(l, b, e, [](char** p) {
        *reinterpret_cast<To*>(p[0]) = convert<To>(*reinterpret_cast<const From*>(p[1]));
      });
    }
  });
}

// start + step * i in uint64 (wrapping): step * i alone may pass int64 where
// the value itself, which lies between start and the end, does not.
inline int64_t arange_value(int64_t start, int64_t step, int64_t i) {
  return static_cast<int64_t>(static_cast<uint64_t>(start) + static_cast<uint64_t>(step) * static_cast<uint64_t>(i));
}

template <typename T>
void arange_loop(T* out, int64_t n, int64_t start, int64_t step) {
  for (int64_t i = 0; i < n; ++i) out[i] = convert<T>(arange_value(start, step, i));
}

// The largest value of T below 1 (as a float).
template <typename T> inline constexpr float kBelowOne = 0.99999994f;                   // 1 - 2^-24
template <> inline constexpr float kBelowOne<Half> = 0.99951171875f;                     // 1 - 2^-11
template <> inline constexpr float kBelowOne<BFloat16> = 0.99609375f;                    // 1 - 2^-8

// Draw i uses the Philox block at counter offset + i; the offset then moves on by n.
template <typename T, RandomKind kKind>
void random_loop(T* out, int64_t n, int64_t* state) {
  const uint64_t seed = static_cast<uint64_t>(state[0]);
  const uint64_t offset = static_cast<uint64_t>(state[1]);
  parallel_for(n, kGrainTranscendental, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) {
      const philox::Block r = philox::philox4x32(offset + static_cast<uint64_t>(i), seed);
      const float v = kKind == RandomKind::kUniform ? philox::uniform(r.x[0]) : philox::normal(r.x[0], r.x[1]);
      // Rounding a uniform draw to f16/bf16 may reach 1.0; keep [0, 1).
      out[i] = kKind == RandomKind::kUniform ? T(std::min(v, kBelowOne<T>)) : T(v);
    }
  });
  state[1] = static_cast<int64_t>(offset + static_cast<uint64_t>(n));
}

// ---- kernel table entries: the runtime dtypes and kind picked once per launch ----
// (NOTE [ Specialized kernels ] in src/core/kernel.h: a replay calls the loop directly)

template <typename T>
struct FillEntry {
  static void run(const FillArgs& a) { fill_loop<T>(a.l, backend::from_bits<T>(a.value_bits)); }
};

template <typename To, typename From>
void copy_entry(const CopyArgs& a) {
  copy_loop<To, From>(a.l);
}

template <typename T>
struct ArangeEntry {
  static void run(const ArangeArgs& a) { arange_loop<T>(static_cast<T*>(a.out), a.n, a.start, a.step); }
};

template <typename T, RandomKind kKind>
void random_entry(const RandomArgs& a) {
  random_loop<T, kKind>(static_cast<T*>(a.out), a.n, a.state);
}

KernelThunk pick_copy(const CopyArgs& a) {
  return dispatch_all(a.dst_dtype, "copy", [&](auto to) {
    return dispatch_all(a.src_dtype, "copy", [&](auto from) {
      return thunk_of<&copy_entry<typename decltype(to)::type, typename decltype(from)::type>>();
    });
  });
}

KernelThunk pick_random(const RandomArgs& a) {
  return dispatch_float(a.dtype, "random", [&](auto tag) {
    using T = typename decltype(tag)::type;
    return a.kind == RandomKind::kUniform ? thunk_of<&random_entry<T, RandomKind::kUniform>>()
                                          : thunk_of<&random_entry<T, RandomKind::kNormal>>();
  });
}

}  // namespace

extern const CopyKernels kCopy = {
    .fill = specialized_kernel<&pick_all<FillEntry, FillArgs>>(),
    .copy = specialized_kernel<&pick_copy>(),
    .arange = specialized_kernel<&pick_numeric<ArangeEntry, ArangeArgs>>(),
    .random = specialized_kernel<&pick_random>(),
};

}  // namespace encore::cpu
