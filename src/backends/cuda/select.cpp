// cuda::where and cuda::masked_fill: dtype checks, layouts and the fill value
// converted on the host (exactly as the CPU converts it), then one launch of
// select.cu's kernels through the device's stream.
#include "src/backends/cuda/select.h"

#include <cstring>

#include "src/backends/cpu/copy.h"
#include "src/backends/cpu/dispatch.h"
#include "src/backends/cuda/select_launch.h"
#include "src/backends/tensor_layout.h"
#include "src/core/stream.h"

namespace encore::cuda {

void where(const Tensor& out, const Tensor& cond, const Tensor& a, const Tensor& b) {
  cpu::dispatch_all(out.dtype(), "where", [](auto) {});   // the CPU's dtype check and message
  const WhereArgs args{backend::make_layout<4>(out, {&cond, &a, &b}), out.dtype()};
  current_stream(out.device()).launch<&where_launch>("where", args, {cond.storage(), a.storage(), b.storage()},
                                                     {out.storage()});
}

void masked_fill(const Tensor& out, const Tensor& a, const Tensor& mask, double value, bool fill_when) {
  MaskedFillArgs args{backend::make_layout<3>(out, {&a, &mask}), out.dtype(), 0, fill_when};
  cpu::dispatch_all(out.dtype(), "masked_fill", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T v = cpu::convert<T>(value);   // Half/BFloat16 are bit-compatible with __half/__nv_bfloat16
    std::memcpy(&args.value_bits, &v, sizeof(T));
  });
  current_stream(out.device()).launch<&masked_fill_launch>("masked_fill", args, {a.storage(), mask.storage()},
                                                           {out.storage()});
}

}  // namespace encore::cuda
