// The planned arena allocator: during capture()'s capture run it hands out
// arena + offset[i] for the step's i-th allocation, checks its size against
// the recorded warm-up's, and ignores frees (the arena lives with its Graph).
//
//   ArenaPlan plan{.addresses = where_each_goes, .sizes = recorded_sizes, .regions = {{arena, arena_end}}};
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
#include <utility>
#include <vector>

#include "src/core/allocator.h"

namespace encore::capture_internal {

struct ArenaPlan {
  std::vector<char*> addresses;     // where allocation i goes (inside one of regions; not owned)
  std::vector<int64_t> sizes;       // recorded bytes per allocation index
  // The memory the addresses lie in, [begin, end): the arena, and a graph's
  // own output region when its outputs live apart (GraphedStep).
  std::vector<std::pair<const char*, const char*>> regions;
  bool contains(const void* p) const {
    for (const auto& [begin, end] : regions) {
      if (p >= begin && p < end) return true;
    }
    return false;
  }
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
