// Device memory for the CUDA backend: a caching allocator per device (size
// classes, block splitting and merging, stream-ordered reuse: core's
// BlockCache over cudaMalloc segments), and pinned host memory for transfers.
// core/allocator.cpp routes CUDA devices here.
//
//   Allocator& a = encore::cuda::caching_allocator(0);   // cuda:0
//   void* p = a.allocate(1 << 20);                        // device bytes, 512-byte aligned
//   a.deallocate(p, 1 << 20);                             // cached for the next request
//
// NOTE [ Stream-ordered reuse ]: encore issues every kernel of a device on
// one stream (runtime.h), so a block freed on the host may be handed to the
// next request at once: any kernel that used it was queued before any kernel
// that will use it again. A second stream would need events per block.
#pragma once

#include <cstdint>
#include <mutex>

#include "src/core/allocator.h"

namespace encore::cuda {

// The caching allocator of device `index` (created on first use, never
// destroyed: tensors may outlive main).
Allocator& caching_allocator(int index);
AllocatorStats caching_allocator_stats(int index);
void reset_caching_allocator_peak(int index);
// Returns cached segments that hold no live block to the driver.
void empty_caching_allocator(int index);

// A page-locked host buffer of at least `nbytes`, reused between calls (grows
// when needed). Only for transfers: callers hold pinned_staging_mutex() from
// the call until their copies through it have completed.
struct PinnedBuffer {
  void* data;
  int64_t nbytes;
};
std::mutex& pinned_staging_mutex();
PinnedBuffer pinned_staging(int64_t nbytes);

}  // namespace encore::cuda
