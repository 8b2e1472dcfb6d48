// cuda::fill, copy, arange and random: dtype checks, layouts and host-side
// value conversion (exactly cpu::convert), then one launch of copy.cu's
// kernels through the device's stream.
#include "src/backends/cuda/copy.h"

#include <cstring>

#include "src/backends/cpu/copy.h"
#include "src/backends/cpu/dispatch.h"
#include "src/backends/cuda/copy_launch.h"
#include "src/backends/tensor_layout.h"
#include "src/core/stream.h"

namespace encore::cuda {

void fill(const Tensor& out, double value) {
  FillArgs args{backend::make_layout<1>(out, {}), out.dtype(), 0};
  cpu::dispatch_all(out.dtype(), "fill", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T v = cpu::convert<T>(value);   // Half/BFloat16 are bit-compatible with __half/__nv_bfloat16
    std::memcpy(&args.value_bits, &v, sizeof(T));
  });
  current_stream(out.device()).launch<&fill_launch>("fill", args, {}, {out.storage()});
}

void copy(const Tensor& dst, const Tensor& src) {
  ENCORE_CHECK(dst.device() == src.device(), "copy: cuda::copy needs one device, got %s and %s (shape %s)",
               dst.device().str(), src.device().str(), shape_str(dst.shape()));
  cpu::dispatch_all(dst.dtype(), "copy", [](auto) {});
  cpu::dispatch_all(src.dtype(), "copy", [](auto) {});
  const CopyArgs args{backend::make_layout<2>(dst, {&src}), dst.dtype(), src.dtype()};
  current_stream(dst.device()).launch<&copy_launch>("copy", args, {src.storage()}, {dst.storage()});
}

void arange(const Tensor& out, double start, double step) {
  cpu::dispatch_numeric(out.dtype(), "arange", [](auto) {});
  ENCORE_CHECK(out.is_contiguous(), "arange: out must be contiguous (shape %s)", shape_str(out.shape()));
  const ArangeArgs args{out.data_ptr(), out.numel(), out.dtype(), start, step};
  current_stream(out.device()).launch<&arange_launch>("arange", args, {}, {out.storage()});
}

void random(const Tensor& out, const Tensor& state, RandomKind kind) {
  const char* name = kind == RandomKind::kUniform ? "rand" : "randn";
  cpu::dispatch_float(out.dtype(), name, [](auto) {});
  ENCORE_CHECK(out.is_contiguous(), "%s: out must be contiguous (shape %s)", name, shape_str(out.shape()));
  ENCORE_CHECK(state.dtype() == kInt64 && state.numel() == 2 && state.is_contiguous() &&
                   state.device() == out.device(),
               "%s: generator state must be a dense i64 [2] on %s, got %s %s on %s", name, out.device().str(),
               shape_str(state.shape()), dtype_name(state.dtype()), state.device().str());
  const RandomArgs args{out.data_ptr(), out.numel(), state.data<int64_t>(), out.dtype(), kind};
  current_stream(out.device()).launch<&random_launch>(name, args, {state.storage()},
                                                      {out.storage(), state.storage()});
}

}  // namespace encore::cuda
