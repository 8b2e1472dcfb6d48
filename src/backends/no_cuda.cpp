// Core's CUDA runtime table (src/core/device_runtime.h) in a build without
// the CUDA backend: no device is available, and everything else refuses
// (encore::Error, with the texts these paths had before the table).
#include "encore/error.h"
#include "src/core/device_runtime.h"

namespace encore {
namespace {

// The messages of the code paths that knew of no CUDA before the runtime
// table existed (Stream, the allocators, take_kernel_errors).
[[noreturn]] void no_stream(int index) {
  throw_error(absl::StatusCode::kUnimplemented,
              absl::StrFormat("no stream for device cuda:%d: encore was built without CUDA", index));
}
[[noreturn]] void no_allocator(int index) {
  throw_error(absl::StatusCode::kUnimplemented,
              absl::StrFormat("no allocator for device cuda:%d: encore was built without CUDA", index));
}
[[noreturn]] void no_backend(int index) {   // take_kernel_errors: synchronize, then read the word
  throw_error(absl::StatusCode::kInvalidArgument,
              absl::StrFormat("take_kernel_errors: no backend for cuda:%d in this build", index));
}

}  // namespace

const DeviceRuntime& cuda_runtime() {
  static constexpr DeviceRuntime kRuntime = {
      .name = "cuda (not built)",
      .available = [] { return false; },
      .set_device = [](int index) { no_stream(index); },
      .synchronize = [](int index) { no_backend(index); },
      .allocator = [](int index) -> Allocator& { no_allocator(index); },
      .allocator_stats = [](int index) -> AllocatorStats { no_allocator(index); },
      .reset_peak = [](int index) { no_allocator(index); },
      .empty_cache = [](int index) { no_allocator(index); },
      .take_error_word = [](int index) -> uint32_t { no_backend(index); },
  };
  return kRuntime;
}

}  // namespace encore
