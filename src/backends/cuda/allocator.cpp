#include "src/backends/cuda/allocator.h"

#include <cuda_runtime.h>

#include <array>
#include <deque>
#include <memory>
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

// Device `index`'s T (constructed from the index on first use, never
// destroyed: tensors and copies may outlive main), one array per T.
template <typename T>
T& per_device(int index) {
  static std::mutex mu;
  static std::array<T*, kMaxDevices> objects{};
  ENCORE_CHECK(index >= 0 && index < kMaxDevices, "cuda:%d: device index out of range", index);
  std::lock_guard<std::mutex> lock(mu);
  if (objects[index] == nullptr) objects[index] = new T(index);
  return *objects[index];
}

CachingAllocator& get(int index) { return per_device<CachingAllocator>(index); }
}  // namespace

Allocator& caching_allocator(int index) { return get(index); }
AllocatorStats caching_allocator_stats(int index) { return get(index).cache().stats(); }
void reset_caching_allocator_peak(int index) { get(index).cache().reset_peak(); }
void empty_caching_allocator(int index) { get(index).cache().empty_cache(); }

namespace {

struct StagingSlot : StagingBlock {
  explicit StagingSlot(int device) : done(device, /*timing=*/false) {}
  Event done;   // recorded after the copy queued from this block; query() is true before any record
};

// NOTE [ Staged host-to-device copies ] in allocator.h.
class StagingPool {
 public:
  explicit StagingPool(int device) : device_(device) {}

  StagingBlock* take(int64_t nbytes) {
    ENCORE_CHECK(nbytes > 0 && nbytes <= kStagingChunk, "take_staging_block: %d bytes (at most %d)", nbytes,
                 kStagingChunk);
    const bool small = nbytes <= kSmallBlock;
    Size& size = small ? small_ : large_;
    std::unique_lock<std::mutex> lock(mu_);
    for (auto it = size.free.begin(); it != size.free.end(); ++it) {   // oldest first
      StagingSlot* b = *it;
      if (b->done.query()) {   // its last copy has run
        size.free.erase(it);
        return b;
      }
    }
    if (size.made < (small ? kMaxSmall : kMaxLarge) || size.free.empty()) {
      StagingSlot* b = make(small ? kSmallBlock : kStagingChunk);   // may throw: counted only once made
      ++size.made;
      return b;
    }
    StagingSlot* b = size.free.front();   // every block of this size in flight: wait for the oldest
    size.free.pop_front();
    lock.unlock();
    try {
      b->done.synchronize();
    } catch (...) {
      give_back(b, /*queued=*/false);   // back to the pool; its event still says when its copy ran
      throw;
    }
    return b;
  }

  void give_back(StagingBlock* block, bool queued) {
    auto* b = static_cast<StagingSlot*>(block);
    if (queued) {
      try {
        b->done.record();
      } catch (...) {   // the copy may still read the block, with no event to say when it is done
        std::lock_guard<std::mutex> lock(mu_);
        --(b->bytes == kSmallBlock ? small_ : large_).made;   // left out of the pool for good
        throw;
      }
    }
    std::lock_guard<std::mutex> lock(mu_);
    (b->bytes == kSmallBlock ? small_ : large_).free.push_back(b);
  }

 private:
  static constexpr int64_t kSmallBlock = int64_t{1} << 20;
  static constexpr int kMaxSmall = 8, kMaxLarge = 4;

  struct Size {
    std::deque<StagingSlot*> free;   // handed back, oldest first
    int made = 0;
  };

  StagingSlot* make(int64_t bytes) {   // never freed: reused by every copy of the process
    set_device(device_);
    auto b = std::make_unique<StagingSlot>(device_);
    b->bytes = bytes;
    ENCORE_CUDA_CHECK(cudaMallocHost(&b->data, bytes), "cudaMallocHost (pinned staging block)");
    return b.release();
  }

  const int device_;
  std::mutex mu_;
  Size small_, large_;
};

StagingPool& staging_pool(int index) { return per_device<StagingPool>(index); }

}  // namespace

StagingBlock* take_staging_block(int index, int64_t nbytes) { return staging_pool(index).take(nbytes); }
void give_back_staging_block(int index, StagingBlock* block, bool queued) {
  staging_pool(index).give_back(block, queued);
}

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
