#include "capture/allocators.h"

#include <array>
#include <mutex>

#include "encore/error.h"
#include "encore/tensor.h"

namespace encore::capture_internal {
namespace {

thread_local AllocationListener* tls_listener = nullptr;
thread_local ArenaPlan* tls_plan = nullptr;

class RecordingAllocator final : public Allocator {
 public:
  explicit RecordingAllocator(Device device) : device_(device) {}
  void* allocate(int64_t nbytes) override {
    void* p = default_allocator(device_).allocate(nbytes);
    if (tls_listener != nullptr) tls_listener->on_allocate(p, nbytes, device_);
    return p;
  }
  void deallocate(void* p, int64_t nbytes) override {
    if (tls_listener != nullptr) tls_listener->on_free(p);
    default_allocator(device_).deallocate(p, nbytes);
  }

 private:
  const Device device_;
};

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
    return plan->base + plan->offsets[i];
  }
  void deallocate(void* p, int64_t nbytes) override {}   // the arena lives with its Graph
};

Allocator& recording_allocator(Device device) {
  static auto* cpu = new RecordingAllocator(kCPU);
  if (device.is_cpu()) return *cpu;
  static std::mutex mu;
  static std::array<RecordingAllocator*, 64> cuda{};   // per CUDA ordinal, created on first use
  std::lock_guard<std::mutex> lock(mu);
  RecordingAllocator*& a = cuda.at(device.index);
  if (a == nullptr) a = new RecordingAllocator(device);
  return *a;
}
Allocator& arena_allocator() {
  static auto* a = new ArenaAllocator();
  return *a;
}

}  // namespace

RecordingScope::RecordingScope(AllocationListener* listener, std::optional<Device> gpu)
    : cpu_(kCPU, &recording_allocator(kCPU)) {
  if (gpu.has_value()) gpu_.emplace(*gpu, &recording_allocator(*gpu));
  tls_listener = listener;
}
RecordingScope::~RecordingScope() { tls_listener = nullptr; }

ArenaScope::ArenaScope(ArenaPlan* plan, Device device) : override_(device, &arena_allocator()) { tls_plan = plan; }
ArenaScope::~ArenaScope() { tls_plan = nullptr; }

}  // namespace encore::capture_internal
