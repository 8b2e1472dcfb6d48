#include "src/backends/cpu/copy.h"

#include <algorithm>
#include <cstring>

#include "src/backends/cpu/dispatch.h"
#include "src/backends/cpu/loops.h"
#include "src/backends/cpu/parallel.h"
#include "src/core/philox.h"
#include "src/core/stream.h"

namespace encore::cpu {
namespace {

// ---- kernels ----

template <typename T>
struct FillArgs { Layout<1> l; T value; };

template <typename T>
void fill_kernel(const FillArgs<T>& a) {
  const T value = a.value;   // a local: a store through p could alias a.value, forcing a reload per element
  parallel_for(a.l.numel, kGrainElementwise, [&](int64_t b, int64_t e) {
    if (a.l.contiguous) {
      T* p = reinterpret_cast<T*>(a.l.ptr[0]);
      std::fill(p + b, p + e, value);
    } else {
      for_each_element(a.l, b, e, [value](char** p) { *reinterpret_cast<T*>(p[0]) = value; });
    }
  });
}

template <typename To, typename From>
void copy_kernel(const Layout<2>& l) {
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

template <typename T>
struct ArangeArgs { T* out; int64_t n; double start, step; };

template <typename T>
void arange_kernel(const ArangeArgs<T>& a) {
  for (int64_t i = 0; i < a.n; ++i) a.out[i] = convert<T>(a.start + a.step * static_cast<double>(i));
}

// The largest value of T below 1 (as a float).
template <typename T> inline constexpr float kBelowOne = 0.99999994f;                   // 1 - 2^-24
template <> inline constexpr float kBelowOne<Half> = 0.99951171875f;                     // 1 - 2^-11
template <> inline constexpr float kBelowOne<BFloat16> = 0.99609375f;                    // 1 - 2^-8

template <typename T>
struct RandomArgs { T* out; int64_t n; int64_t* state; };

// Draw i uses the Philox block at counter offset + i; the offset then moves on by n.
template <typename T, RandomKind kKind>
void random_kernel(const RandomArgs<T>& a) {
  const uint64_t seed = static_cast<uint64_t>(a.state[0]);
  const uint64_t offset = static_cast<uint64_t>(a.state[1]);
  parallel_for(a.n, kGrainTranscendental, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) {
      const philox::Block r = philox::philox4x32(offset + static_cast<uint64_t>(i), seed);
      const float v = kKind == RandomKind::kUniform ? philox::uniform(r.x[0]) : philox::normal(r.x[0], r.x[1]);
      // Rounding a uniform draw to f16/bf16 may reach 1.0; keep [0, 1).
      a.out[i] = kKind == RandomKind::kUniform ? T(std::min(v, kBelowOne<T>)) : T(v);
    }
  });
  a.state[1] = static_cast<int64_t>(offset + static_cast<uint64_t>(a.n));
}

}  // namespace

// ---- launchers ----

void fill(const Tensor& out, double value) {
  dispatch_all(out.dtype(), "fill", [&](auto tag) {
    using T = typename decltype(tag)::type;
    FillArgs<T> args{make_layout<1>(out, {}), convert<T>(value)};
    current_stream(kCPU).launch<&fill_kernel<T>>("fill", args, {}, {out.storage()});
  });
}

void copy(const Tensor& dst, const Tensor& src) {
  const Layout<2> l = make_layout<2>(dst, {&src});
  dispatch_all(dst.dtype(), "copy", [&](auto to) {
    dispatch_all(src.dtype(), "copy", [&](auto from) {
      using To = typename decltype(to)::type;
      using From = typename decltype(from)::type;
      current_stream(kCPU).launch<&copy_kernel<To, From>>("copy", l, {src.storage()}, {dst.storage()});
    });
  });
}

void arange(const Tensor& out, double start, double step) {
  dispatch_numeric(out.dtype(), "arange", [&](auto tag) {
    using T = typename decltype(tag)::type;
    ArangeArgs<T> args{out.data<T>(), out.numel(), start, step};
    current_stream(kCPU).launch<&arange_kernel<T>>("arange", args, {}, {out.storage()});
  });
}

void random(const Tensor& out, const Tensor& state, RandomKind kind) {
  dispatch_float(out.dtype(), kind == RandomKind::kUniform ? "rand" : "randn", [&](auto tag) {
    using T = typename decltype(tag)::type;
    RandomArgs<T> args{out.data<T>(), out.numel(), state.data<int64_t>()};
    if (kind == RandomKind::kUniform) {
      current_stream(kCPU).launch<&random_kernel<T, RandomKind::kUniform>>("rand", args, {state.storage()},
                                                                             {out.storage(), state.storage()});
    } else {
      current_stream(kCPU).launch<&random_kernel<T, RandomKind::kNormal>>("randn", args, {state.storage()},
                                                                            {out.storage(), state.storage()});
    }
  });
}

}  // namespace encore::cpu
