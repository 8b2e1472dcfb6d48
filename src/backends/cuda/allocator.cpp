#include "src/backends/cuda/allocator.h"

#include <cuda_runtime.h>

#include <array>
#include <mutex>

#include "absl/strings/str_format.h"
#include "encore/error.h"
#include "src/backends/cuda/runtime.h"
#include "src/core/block_cache.h"

namespace encore::cuda {

// cudaMalloc / cudaFree for one device's BlockCache (NOTE [ Block cache size
// classes ] in src/core/block_cache.h).
class CudaSegments final : public SegmentSource {
 public:
  explicit CudaSegments(int device) : device_(device) {}

  void* map(int64_t bytes) override {
    set_device(device_);
    void* p = nullptr;
    const cudaError_t err = cudaMalloc(&p, bytes);
    if (err == cudaErrorMemoryAllocation) {
      (void)cudaGetLastError();   // not sticky: clear it, or the next check_launch blames another op
      return nullptr;
    }
    check(err, "cuda allocator: cudaMalloc");   // no driver, a sticky error: not an out-of-memory
    return p;
  }

  void unmap(void* segment, int64_t) override {
    set_device(device_);
    ENCORE_CUDA_CHECK(cudaFree(segment), "cudaFree");
  }

 private:
  const int device_;
};

class CachingAllocator final : public Allocator {
 public:
  explicit CachingAllocator(int device)
      : segments_(device), cache_(&segments_, absl::StrFormat("cuda:%d", device)) {}

  void* allocate(int64_t nbytes) override { return cache_.allocate(nbytes); }
  void deallocate(void* p, int64_t) override { cache_.deallocate(p); }
  BlockCache& cache() { return cache_; }

 private:
  CudaSegments segments_;
  BlockCache cache_;
};

namespace {
constexpr int kMaxDevices = 64;
std::mutex allocators_mu;
std::array<CachingAllocator*, kMaxDevices> allocators{};

CachingAllocator& get(int index) {
  ENCORE_CHECK(index >= 0 && index < kMaxDevices, "cuda:%d: device index out of range", index);
  std::lock_guard<std::mutex> lock(allocators_mu);
  if (allocators[index] == nullptr) allocators[index] = new CachingAllocator(index);   // never destroyed
  return *allocators[index];
}
}  // namespace

Allocator& caching_allocator(int index) { return get(index); }
AllocatorStats caching_allocator_stats(int index) { return get(index).cache().stats(); }
void reset_caching_allocator_peak(int index) { get(index).cache().reset_peak(); }
void empty_caching_allocator(int index) { get(index).cache().empty_cache(); }

std::mutex& pinned_staging_mutex() {
  static std::mutex mu;
  return mu;
}

PinnedBuffer pinned_staging(int64_t nbytes) {
  static void* buffer = nullptr;   // never freed: reused by every transfer of the process
  static int64_t capacity = 0;
  if (nbytes > capacity) {
    if (buffer != nullptr) ENCORE_CUDA_CHECK(cudaFreeHost(buffer), "cudaFreeHost");
    buffer = nullptr;
    capacity = 0;
    const int64_t want = std::max<int64_t>(nbytes, int64_t{1} << 20);
    ENCORE_CUDA_CHECK(cudaMallocHost(&buffer, want), "cudaMallocHost (pinned staging)");
    capacity = want;
  }
  return {buffer, capacity};
}

}  // namespace encore::cuda
