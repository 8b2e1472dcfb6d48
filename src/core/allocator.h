// Device memory allocators, and the per-thread hook that capture/ uses to
// route allocations into a planned arena.
//
//   Allocator& a = encore::default_allocator(encore::kCPU);  // caching, never frees to the OS
//   void* p = a.allocate(1024);                               // bytes, 64-byte aligned
//   a.deallocate(p, 1024);
//
//   encore::AllocatorOverride scope(&my_allocator);           // this thread's CPU
//   encore::Tensor t = encore::empty({10});                  //   allocations use it
#pragma once

#include <cstdint>
#include <string_view>

#include "encore/device.h"

namespace encore {

class Allocator {
 public:
  virtual ~Allocator() = default;
  // nbytes > 0 (a zero-byte request is served as 1 byte). Memory is 64-byte
  // aligned and not initialised. Throws encore::Error(kResourceExhausted).
  virtual void* allocate(int64_t nbytes) = 0;
  // p came from allocate(nbytes) of this allocator.
  virtual void deallocate(void* p, int64_t nbytes) = 0;
};

// The largest request any allocator serves, in bytes: no machine or device
// holds 2^62 bytes, and below it the allocators' roundings to their size
// classes and segments stay inside int64.
inline constexpr int64_t kMaxAllocationBytes = int64_t{1} << 62;
// Throws encore::Error(kResourceExhausted), "<name> allocator: out of memory
// allocating <nbytes> bytes ...", when nbytes > kMaxAllocationBytes.
void refuse_beyond_max_allocation(std::string_view name, int64_t nbytes);

// Byte counters of an allocator; "in use" counts the blocks handed out
// (requests rounded up to the allocator's size classes).
struct AllocatorStats {
  int64_t in_use_bytes = 0;
  int64_t peak_in_use_bytes = 0;
  int64_t reserved_bytes = 0;   // held from the system, cached or in use
  int64_t allocations = 0;      // allocate() calls
};

// The caching allocator of a device: exact size classes, free lists that keep
// memory (and its touched pages) for reuse; nothing goes back to the system
// until empty_cache(), or until the system refuses a request: then the free
// lists are emptied and the request tried once more before it throws.
Allocator& default_allocator(Device device);
// peak_in_use_bytes: the high-water mark since the last reset_peak_stats()
// (or the start of the process); a PeakMeasurement never lowers it.
AllocatorStats allocator_stats(Device device);
void reset_peak_stats(Device device);   // peak := current in-use
void empty_cache(Device device);

// Measures one device's in-use peak from construction on, for encore's own
// reports (capture()'s eager_peak_bytes), without changing the peak that
// allocator_stats() reports (NOTE [ Measured peaks ] in allocator.cpp): a
// user tracking the peak of a training loop sees the same high-water mark
// before, during and after. One measurement per device at a time: a later
// one (or a reset_peak_stats()) restarts the earlier one's count.
//
//   PeakMeasurement m(kCPU);
//   run();
//   int64_t grew = m.peak_above_start();   // bytes
class PeakMeasurement {
 public:
  explicit PeakMeasurement(Device device);
  // Bytes: the in-use peak since construction minus what was in use then.
  int64_t peak_above_start() const;

 private:
  Device device_;
  int64_t in_use_at_start_;   // bytes
};

// The allocator that Storage::allocate uses on this thread for `device`:
// an override if one is installed, else default_allocator(device). Throws
// encore::Error(kFailedPrecondition) for a CUDA device other than the one the
// installed CUDA override serves (one slot per device type).
Allocator& current_allocator(Device device);

// Installs an allocator for one device on this thread for its scope.
class AllocatorOverride {
 public:
  AllocatorOverride(Device device, Allocator* allocator);
  ~AllocatorOverride();
  AllocatorOverride(const AllocatorOverride&) = delete;
  AllocatorOverride& operator=(const AllocatorOverride&) = delete;

 private:
  Device device_;
  Allocator* prev_;
  int prev_index_ = 0;
};

}  // namespace encore
