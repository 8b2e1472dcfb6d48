// The two allocators capture installs with AllocatorOverride. Both are
// process-lifetime singletons, because a Storage frees into the allocator it
// came from, possibly long after capture() returned; the per-capture state
// they consult is installed on the thread only while a phase runs.
//
//  - The recording allocator serves from the default caching allocator and
//    tells the thread's Recorder (if any) about every allocation and free.
//  - The arena allocator hands out arena + offset[i] for the i-th
//    allocation, checks its size against the recorded one, and ignores frees.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "src/core/allocator.h"

namespace encore::capture_internal {

class AllocationListener {
 public:
  virtual ~AllocationListener() = default;
  virtual void on_allocate(void* p, int64_t nbytes, Device device) = 0;
  virtual void on_free(void* p) = 0;
};

struct ArenaPlan {
  char* base = nullptr;
  std::vector<int64_t> offsets;     // per allocation index
  std::vector<int64_t> sizes;       // recorded bytes per allocation index
  int64_t next = 0;                 // allocations served so far
  int64_t kernels_so_far = 0;       // for messages
  const char* last_op = "(start of step)";
};

// Routes this thread's allocations on the CPU and on `gpu` (when set)
// through the recording allocators of those devices.
class RecordingScope {
 public:
  RecordingScope(AllocationListener* listener, std::optional<Device> gpu);
  ~RecordingScope();

 private:
  AllocatorOverride cpu_;
  std::optional<AllocatorOverride> gpu_;
};

// Routes this thread's allocations on `device` into `plan`'s arena.
class ArenaScope {
 public:
  ArenaScope(ArenaPlan* plan, Device device);
  ~ArenaScope();

 private:
  AllocatorOverride override_;
};

}  // namespace encore::capture_internal
