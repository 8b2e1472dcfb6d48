#include "capture/arena.h"

#include <string>

#include "encore/error.h"

namespace encore::capture_internal {
namespace {

thread_local ArenaPlan* tls_plan = nullptr;   // the innermost ArenaScope's plan on this thread

class ArenaAllocator final : public Allocator {
 public:
  void* allocate(int64_t nbytes) override {
    ArenaPlan* plan = tls_plan;
    ENCORE_CHECK_CODE(plan != nullptr, kInternal, "arena allocator used outside capture");
    const int64_t i = plan->next++;
    ENCORE_CHECK_CODE(i < static_cast<int64_t>(plan->sizes.size()) && plan->sizes[i] == nbytes, kFailedPrecondition,
                      "capture: the step allocated differently than in the recorded warm-up: allocation #%d "
                      "(after kernel #%d, op '%s') asks for %d bytes, the warm-up asked for %s; the step must "
                      "issue the same work every time (no data-dependent shapes or control flow)",
                      i, plan->kernels_so_far, plan->last_op, nbytes,
                      i < static_cast<int64_t>(plan->sizes.size()) ? std::to_string(plan->sizes[i]) + " bytes"
                                                                   : std::string("nothing more"));
    return plan->addresses[i];
  }
  void deallocate(void* p, int64_t nbytes) override {}   // the arena lives with its Graph
};

Allocator& arena_allocator() {
  static auto* a = new ArenaAllocator();   // never destroyed: see the header
  return *a;
}

}  // namespace

ArenaScope::ArenaScope(ArenaPlan* plan, Device device) : override_(device, &arena_allocator()), prev_(tls_plan) {
  tls_plan = plan;
}
ArenaScope::~ArenaScope() { tls_plan = prev_; }

}  // namespace encore::capture_internal
