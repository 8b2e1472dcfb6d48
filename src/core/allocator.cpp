#include "src/core/allocator.h"

#include <algorithm>
#include <cstdlib>
#include <atomic>
#include <mutex>
#include <vector>

#include "encore/error.h"
#include "src/core/device_runtime.h"

namespace encore {
namespace {

constexpr int64_t kAlignment = 64;

// NOTE [ CPU size classes ]: requests up to 4 KiB round up to 64 bytes; larger
// ones to one of 4 steps per power of two (at most 25% waste). A freed block
// waits in its class's free list for the next request of that class; pages
// stay touched, which matters here: a first touch costs ~16 us per 4 KiB page.
int size_class(int64_t nbytes, int64_t* rounded) {
  if (nbytes <= 4096) {
    *rounded = (nbytes + kAlignment - 1) & ~(kAlignment - 1);
    return static_cast<int>(*rounded / kAlignment);   // 1..64
  }
  const int log2 = 63 - __builtin_clzll(static_cast<uint64_t>(nbytes - 1));   // 2^log2 < n <= 2^(log2+1)
  const int64_t step = int64_t{1} << (log2 - 2);
  *rounded = (nbytes + step - 1) / step * step;
  const int sub = static_cast<int>((*rounded >> (log2 - 2)) - 4);              // 1..4
  return 64 + (log2 - 12) * 4 + sub;
}

// A test-and-set lock: the allocator's critical sections are a few dozen
// instructions, far below what a pthread mutex costs uncontended.
class SpinLock {
 public:
  void lock() {
    while (flag_.test_and_set(std::memory_order_acquire)) {
      while (flag_.test(std::memory_order_relaxed)) {}
    }
  }
  void unlock() { flag_.clear(std::memory_order_release); }

 private:
  std::atomic_flag flag_ = ATOMIC_FLAG_INIT;
};

class CpuCachingAllocator final : public Allocator {
 public:
  void* allocate(int64_t nbytes) override {
    if (nbytes <= 0) nbytes = 1;
    // Keeps size_class's rounding from overflowing (found by fuzz/ops_fuzz: arange of 2^60 i64).
    refuse_beyond_max_allocation("CPU", nbytes);
    int64_t rounded = 0;
    const int cls = size_class(nbytes, &rounded);
    {
      std::lock_guard<SpinLock> lock(mu_);
      count_in_use(rounded);
      if (cls < static_cast<int>(free_.size()) && !free_[cls].empty()) {
        void* p = free_[cls].back();
        free_[cls].pop_back();
        return p;
      }
    }
    void* p = std::aligned_alloc(kAlignment, static_cast<size_t>(rounded));   // outside the lock
    if (p == nullptr) {
      // The blocks cached in other size classes may be what the system lacks
      // (a limit on the address space, a container's memory cap): give them
      // back and ask once more, as the CUDA block cache does.
      empty_cache();
      p = std::aligned_alloc(kAlignment, static_cast<size_t>(rounded));
    }
    std::lock_guard<SpinLock> lock(mu_);
    if (p == nullptr) {
      stats_.in_use_bytes -= rounded;
      throw_error(absl::StatusCode::kResourceExhausted,
                  absl::StrFormat("CPU allocator: out of memory allocating %d bytes", nbytes));
    }
    stats_.reserved_bytes += rounded;
    return p;
  }

  void deallocate(void* p, int64_t nbytes) override {
    if (nbytes <= 0) nbytes = 1;
    int64_t rounded = 0;
    const int cls = size_class(nbytes, &rounded);
    std::lock_guard<SpinLock> lock(mu_);
    stats_.in_use_bytes -= rounded;
    if (cls >= static_cast<int>(free_.size())) free_.resize(cls + 1);
    free_[cls].push_back(p);
  }

  AllocatorStats stats() {
    std::lock_guard<SpinLock> lock(mu_);
    return stats_;
  }
  // Returns the peak it replaced.
  int64_t reset_peak() {
    std::lock_guard<SpinLock> lock(mu_);
    const int64_t old = stats_.peak_in_use_bytes;
    stats_.peak_in_use_bytes = stats_.in_use_bytes;
    return old;
  }
  void empty_cache() {
    std::lock_guard<SpinLock> lock(mu_);
    for (int cls = 0; cls < static_cast<int>(free_.size()); ++cls) {
      for (void* p : free_[cls]) std::free(p);
      stats_.reserved_bytes -= class_bytes(cls) * static_cast<int64_t>(free_[cls].size());
      free_[cls].clear();
    }
  }

 private:
  void count_in_use(int64_t rounded) {
    ++stats_.allocations;
    stats_.in_use_bytes += rounded;
    if (stats_.in_use_bytes > stats_.peak_in_use_bytes) stats_.peak_in_use_bytes = stats_.in_use_bytes;
  }
  static int64_t class_bytes(int cls) {
    if (cls <= 64) return cls * kAlignment;
    const int log2 = (cls - 65) / 4 + 12;
    const int sub = (cls - 65) % 4 + 1;
    return (int64_t{4} + sub) << (log2 - 2);
  }
  SpinLock mu_;
  std::vector<std::vector<void*>> free_ = std::vector<std::vector<void*>>(160);
  AllocatorStats stats_;
};

CpuCachingAllocator& cpu_allocator() {
  static auto* a = new CpuCachingAllocator();   // never destroyed: tensors may outlive main
  return *a;
}

// NOTE [ Allocator overrides ]: capture/ serves a step's allocations from a
// planned arena by installing an override for the step's device on the
// capturing thread; one slot per device type (one CUDA device per process).
thread_local Allocator* tls_cpu_override = nullptr;
thread_local Allocator* tls_cuda_override = nullptr;
thread_local int tls_cuda_override_index = 0;   // the CUDA device tls_cuda_override serves

Allocator*& override_slot(Device device) { return device.is_cpu() ? tls_cpu_override : tls_cuda_override; }

// NOTE [ Measured peaks ]: a PeakMeasurement needs the allocator's peak to
// restart at its start, but the peak is also what users read to track their
// own high-water mark. So the measurement resets the allocator's peak and
// keeps the one it replaced as a floor: allocator_stats() reports the larger
// of the two, which is the high-water mark since the user's last reset.
// reset_peak_stats() clears the floor. (CUDA: an allocation on another thread
// between reading the peak and resetting it can raise a peak the floor then
// misses; the CPU does both under its lock.)
struct PeakFloors {
  std::mutex mu;
  std::vector<int64_t> bytes;   // by device: CPU at 0, cuda:i at i + 1
};

PeakFloors& peak_floors() {
  static auto* f = new PeakFloors();   // never destroyed, as the allocators
  return *f;
}

size_t floor_slot(Device device) { return device.is_cpu() ? 0 : static_cast<size_t>(device.index) + 1; }

int64_t peak_floor(Device device) {
  PeakFloors& f = peak_floors();
  std::lock_guard<std::mutex> lock(f.mu);
  const size_t i = floor_slot(device);
  return i < f.bytes.size() ? f.bytes[i] : 0;
}

// floor := max(floor, bytes).
void raise_peak_floor(Device device, int64_t bytes) {
  PeakFloors& f = peak_floors();
  std::lock_guard<std::mutex> lock(f.mu);
  const size_t i = floor_slot(device);
  if (i >= f.bytes.size()) f.bytes.resize(i + 1, 0);
  f.bytes[i] = std::max(f.bytes[i], bytes);
}

void clear_peak_floor(Device device) {
  PeakFloors& f = peak_floors();
  std::lock_guard<std::mutex> lock(f.mu);
  if (const size_t i = floor_slot(device); i < f.bytes.size()) f.bytes[i] = 0;
}

// The allocator's own peak: since its last reset (by a measurement or a user).
int64_t raw_peak(Device device) {
  if (device.is_cpu()) return cpu_allocator().stats().peak_in_use_bytes;
  return cuda_runtime().allocator_stats(device.index).peak_in_use_bytes;
}


}  // namespace

Allocator& default_allocator(Device device) {
  if (device.is_cpu()) return cpu_allocator();
  return cuda_runtime().allocator(device.index);
}

void refuse_beyond_max_allocation(std::string_view name, int64_t nbytes) {
  if (nbytes <= kMaxAllocationBytes) return;
  throw_error(absl::StatusCode::kResourceExhausted,
              absl::StrFormat("%s allocator: out of memory allocating %d bytes (more than the 2^62 bytes any "
                              "machine or device holds)", name, nbytes));
}

AllocatorStats allocator_stats(Device device) {
  AllocatorStats s = device.is_cpu() ? cpu_allocator().stats() : cuda_runtime().allocator_stats(device.index);
  s.peak_in_use_bytes = std::max(s.peak_in_use_bytes, peak_floor(device));   // NOTE [ Measured peaks ]
  return s;
}
void reset_peak_stats(Device device) {
  clear_peak_floor(device);
  if (device.is_cpu()) {
    (void)cpu_allocator().reset_peak();
  } else {
    cuda_runtime().reset_peak(device.index);
  }
}

PeakMeasurement::PeakMeasurement(Device device) : device_(device) {
  // NOTE [ Measured peaks ]: the reported peak (floor included) becomes the floor.
  int64_t replaced = 0;
  if (device.is_cpu()) {
    replaced = cpu_allocator().reset_peak();
  } else {
    replaced = cuda_runtime().allocator_stats(device.index).peak_in_use_bytes;
    cuda_runtime().reset_peak(device.index);
  }
  raise_peak_floor(device, replaced);
  in_use_at_start_ = allocator_stats(device).in_use_bytes;
}

int64_t PeakMeasurement::peak_above_start() const { return raw_peak(device_) - in_use_at_start_; }

void empty_cache(Device device) {
  if (device.is_cpu()) return cpu_allocator().empty_cache();
  cuda_runtime().empty_cache(device.index);
}

Allocator& current_allocator(Device device) {
  Allocator* o = override_slot(device);
  if (o == nullptr) return default_allocator(device);
  ENCORE_CHECK_CODE(device.is_cpu() || device.index == tls_cuda_override_index, kFailedPrecondition,
                    "an allocation on %s while this thread's CUDA allocations are routed for cuda:%d (inside "
                    "capture(), whose step runs on one GPU): keep the step's tensors on one device",
                    device.str(), tls_cuda_override_index);
  return *o;
}

AllocatorOverride::AllocatorOverride(Device device, Allocator* allocator) : device_(device) {
  Allocator*& slot = override_slot(device);
  prev_ = slot;
  slot = allocator;
  if (device.is_cuda()) {
    prev_index_ = tls_cuda_override_index;
    tls_cuda_override_index = device.index;
  }
}
AllocatorOverride::~AllocatorOverride() {
  override_slot(device_) = prev_;
  if (device_.is_cuda()) tls_cuda_override_index = prev_index_;
}

}  // namespace encore
