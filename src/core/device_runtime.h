// The device runtime table: what core needs from a device backend that is not
// a kernel (availability, the current device, synchronization, the caching
// allocator and its statistics, the kernel error word). Core declares it and
// calls it; the backends define it at link time (src/backends/cuda/runtime.cpp,
// or src/backends/no_cuda.cpp in a build without CUDA), so nothing in
// src/core/ includes a backend.
//
//   const DeviceRuntime& rt = cuda_runtime();
//   if (rt.available()) rt.synchronize(0);   // waits for encore's stream on cuda:0
//
// Every function takes the device index within its type; the table and its
// functions live for the whole process. In a build without CUDA, available()
// is false and every other entry throws encore::Error (Unimplemented) saying so.
#pragma once

#include <cstdint>

#include "src/core/allocator.h"

namespace encore {

struct DeviceRuntime {
  const char* name;                            // "cuda"
  bool (*available)();                         // a usable device answers (asked once, then cached)
  void (*set_device)(int index);               // makes it the calling thread's current device
  void (*synchronize)(int index);              // waits for encore's stream; throws if a kernel failed
  Allocator& (*allocator)(int index);          // the device's caching allocator (process lifetime)
  AllocatorStats (*allocator_stats)(int index);
  void (*reset_peak)(int index);               // peak_in_use_bytes = in_use_bytes
  void (*empty_cache)(int index);              // returns cached free blocks to the driver
  uint32_t (*take_error_word)(int index);      // NOTE [ Kernel error words ]: reads and clears, no wait
};

// The runtime of CUDA devices (defined by the backends library).
const DeviceRuntime& cuda_runtime();

}  // namespace encore
