// Core's CUDA runtime table (src/core/device_runtime.h) in a build without
// the CUDA backend: no device is available, and everything else refuses.
#include "encore/error.h"
#include "src/core/device_runtime.h"

namespace encore {
namespace {

[[noreturn]] void refuse(const char* what, int index) {
  throw_error(absl::StatusCode::kUnimplemented,
              absl::StrFormat("%s on cuda:%d: encore was built without CUDA", what, index));
}

}  // namespace

const DeviceRuntime& cuda_runtime() {
  static constexpr DeviceRuntime kRuntime = {
      .name = "cuda (not built)",
      .available = [] { return false; },
      .set_device = [](int index) { refuse("set_device (no stream)", index); },
      .synchronize = [](int index) { refuse("synchronize", index); },
      .allocator = [](int index) -> Allocator& { refuse("no allocator", index); },
      .allocator_stats = [](int index) -> AllocatorStats { refuse("no allocator", index); },
      .reset_peak = [](int index) { refuse("no allocator", index); },
      .empty_cache = [](int index) { refuse("no allocator", index); },
      .take_error_word = [](int index) -> uint32_t { refuse("take_kernel_errors", index); },
  };
  return kRuntime;
}

}  // namespace encore
