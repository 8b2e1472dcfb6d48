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

// NOTE [ Staged host-to-device copies ]: a copy from pageable host memory to
// a device goes through pinned blocks: the host copies a chunk into a block,
// queues cudaMemcpyAsync from it on encore's stream, and records the block's
// event there; the block is handed out again only once that event has
// completed. So a host-to-device copy returns without waiting for the GPU
// (the host source may be reused at once; the device side is written in
// stream order, after the work queued before it), and the host runs at most
// a few blocks ahead of the GPU. Per device: blocks of 1 MiB for chunks up to
// 1 MiB (up to 8 of them) and of kStagingChunk otherwise (up to 4), made on
// first need and kept for the process (a thread that finds every block of a
// size taken by other threads makes one more).
inline constexpr int64_t kStagingChunk = int64_t{16} << 20;   // bytes: the largest chunk of one copy
struct StagingBlock {
  void* data;      // page-locked host memory
  int64_t bytes;   // 1 MiB or kStagingChunk
};
// A block of at least `nbytes` (<= kStagingChunk) for copies to device
// `index` whose last copy has run; waits for the oldest one of its size when
// all are in flight.
StagingBlock* take_staging_block(int index, int64_t nbytes);
// Hands `block` back. With `queued`, a copy from it was just queued on
// encore's stream of device `index`: the block is reused once that has run.
void give_back_staging_block(int index, StagingBlock* block, bool queued);

// A page-locked host buffer of at least `nbytes`, reused between calls (grows
// when needed), for device-to-host copies, which wait for their copies
// anyway. Callers hold pinned_staging_mutex() from the call until their
// copies through it have completed.
struct PinnedBuffer {
  void* data;
  int64_t nbytes;
};
std::mutex& pinned_staging_mutex();
PinnedBuffer pinned_staging(int64_t nbytes);

}  // namespace encore::cuda
