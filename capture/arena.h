// The planned arena allocator: during capture()'s capture run it hands out
// arena + offset[i] for the step's i-th allocation, checks its size against
// the recorded warm-up's, and ignores frees (the arena lives with its Graph).
//
//   ArenaPlan plan{.base = arena_data, .offsets = offsets, .sizes = recorded_sizes};
//   {
//     ArenaScope scope(&plan, device);   // this thread's allocations on `device`
//     outputs = step();                  //   come from the arena
//   }                                    // the allocator and plan before it come back
//   plan.next;                           // allocations served
//
// Lifetimes: the allocator is one process-lifetime object, because a Storage
// frees into the allocator it came from, possibly long after capture()
// returned (an output tensor kept by the user); the plan it serves from is
// the caller's and is installed on the thread only while an ArenaScope lives.
#pragma once

#include <cstdint>
#include <vector>

#include "src/core/allocator.h"

namespace encore::capture_internal {

struct ArenaPlan {
  char* base = nullptr;             // the arena (not owned)
  std::vector<int64_t> offsets;     // bytes from base, per allocation index
  std::vector<int64_t> sizes;       // recorded bytes per allocation index
  int64_t next = 0;                 // allocations served so far
  int64_t kernels_so_far = 0;       // for messages: launches of the capture run so far
  const char* last_op = "(start of step)";
};

// Routes this thread's allocations on `device` into `plan`'s arena for its
// scope; restores the allocator and plan installed before it.
class ArenaScope {
 public:
  ArenaScope(ArenaPlan* plan, Device device);
  ~ArenaScope();
  ArenaScope(const ArenaScope&) = delete;
  ArenaScope& operator=(const ArenaScope&) = delete;

 private:
  AllocatorOverride override_;
  ArenaPlan* prev_;
};

}  // namespace encore::capture_internal
