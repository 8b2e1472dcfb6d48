#include "src/backends/cuda/allocator.h"

#include <cuda_runtime.h>

#include <array>
#include <mutex>
#include <set>
#include <tuple>

#include "absl/container/flat_hash_map.h"
#include "encore/error.h"
#include "src/backends/cuda/runtime.h"

namespace encore::cuda {

// NOTE [ CUDA size classes ]: requests round up to 512 bytes. Small requests
// (up to 1 MiB) are carved from 2 MiB segments; large ones from segments of
// their size rounded up to 2 MiB. A free block is split when the remainder is
// at least 512 bytes (small pool) or more than 1 MiB (large pool), and merges
// with free neighbours of its segment when freed, so the same memory serves
// differently sized requests over time. Best fit: the smallest free block that
// holds the request, lowest address among equals.
class CachingAllocator final : public Allocator {
 public:
  explicit CachingAllocator(int device) : device_(device) {}

  void* allocate(int64_t nbytes) override {
    const int64_t size = round_up(nbytes <= 0 ? 1 : nbytes, kRound);
    const bool small = size <= kSmallLimit;
    std::lock_guard<std::mutex> lock(mu_);
    Pool& pool = small ? small_ : large_;
    Block* b = take_best_fit(pool, size);
    if (b == nullptr) b = new_segment(small ? kSmallSegment : round_up(size, kSmallSegment), small, nbytes);
    if (b->size - size >= (small ? kRound : kSmallLimit + 1)) split(pool, b, size);
    b->allocated = true;
    live_.emplace(b->ptr, b);
    stats_.in_use_bytes += b->size;
    stats_.peak_in_use_bytes = std::max(stats_.peak_in_use_bytes, stats_.in_use_bytes);
    ++stats_.allocations;
    return b->ptr;
  }

  void deallocate(void* p, int64_t) override {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = live_.find(p);
    ENCORE_CHECK_CODE(it != live_.end(), kInternal, "cuda:%d allocator: freeing %p, which it did not allocate",
                      device_, p);
    Block* b = it->second;
    live_.erase(it);
    stats_.in_use_bytes -= b->size;
    b->allocated = false;
    Pool& pool = b->small ? small_ : large_;
    if (b->prev != nullptr && !b->prev->allocated) {
      Block* lo = b->prev;
      pool.erase(lo);
      b = absorb(lo, b);
    }
    if (b->next != nullptr && !b->next->allocated) {
      pool.erase(b->next);
      b = absorb(b, b->next);
    }
    pool.insert(b);
  }

  AllocatorStats stats() {
    std::lock_guard<std::mutex> lock(mu_);
    return stats_;
  }
  void reset_peak() {
    std::lock_guard<std::mutex> lock(mu_);
    stats_.peak_in_use_bytes = stats_.in_use_bytes;
  }
  void empty_cache() {
    std::lock_guard<std::mutex> lock(mu_);
    release_free_segments();
  }

 private:
  static constexpr int64_t kRound = 512;
  static constexpr int64_t kSmallLimit = int64_t{1} << 20;
  static constexpr int64_t kSmallSegment = int64_t{2} << 20;

  struct Block {
    char* ptr;
    int64_t size;           // bytes
    int64_t segment_size;   // bytes of the cudaMalloc this block is part of
    bool small;             // from the small pool
    bool allocated = false;
    Block* prev = nullptr;  // neighbours in the same segment, by address
    Block* next = nullptr;
  };
  struct BySizeThenAddress {
    bool operator()(const Block* a, const Block* b) const {
      return std::tie(a->size, a->ptr) < std::tie(b->size, b->ptr);
    }
  };
  using Pool = std::set<Block*, BySizeThenAddress>;

  static int64_t round_up(int64_t n, int64_t m) { return (n + m - 1) / m * m; }

  Block* take_best_fit(Pool& pool, int64_t size) {
    Block key{nullptr, size, 0, false};
    auto it = pool.lower_bound(&key);
    if (it == pool.end()) return nullptr;
    Block* b = *it;
    pool.erase(it);
    return b;
  }

  // Gives whole free segments back to the driver. Holds mu_.
  void release_free_segments() {
    for (Pool* pool : {&small_, &large_}) {
      for (auto it = pool->begin(); it != pool->end();) {
        Block* b = *it;
        if (b->prev == nullptr && b->next == nullptr) {   // a whole free segment
          set_device(device_);
          ENCORE_CUDA_CHECK(cudaFree(b->ptr), "cudaFree");
          stats_.reserved_bytes -= b->size;
          delete b;
          it = pool->erase(it);
        } else {
          ++it;
        }
      }
    }
  }

  // A new segment of `bytes`, as one free block (not in a pool). Holds mu_.
  Block* new_segment(int64_t bytes, bool small, int64_t requested) {
    set_device(device_);
    void* p = nullptr;
    cudaError_t err = cudaMalloc(&p, bytes);
    if (err == cudaErrorMemoryAllocation) {   // give cached segments back and try once more
      (void)cudaGetLastError();
      release_free_segments();
      err = cudaMalloc(&p, bytes);
    }
    if (err == cudaErrorMemoryAllocation) {
      (void)cudaGetLastError();
      throw_error(absl::StatusCode::kResourceExhausted,
                  absl::StrFormat("cuda:%d allocator: out of memory allocating %d bytes (%s); %d bytes in use, "
                                  "%d reserved",
                                  device_, requested, cudaGetErrorString(err), stats_.in_use_bytes,
                                  stats_.reserved_bytes));
    }
    check(err, "cuda allocator: cudaMalloc");   // no driver, a sticky error: not an out-of-memory

    stats_.reserved_bytes += bytes;
    return new Block{static_cast<char*>(p), bytes, bytes, small};
  }

  void split(Pool& pool, Block* b, int64_t size) {
    Block* rest = new Block{b->ptr + size, b->size - size, b->segment_size, b->small};
    rest->prev = b;
    rest->next = b->next;
    if (b->next != nullptr) b->next->prev = rest;
    b->next = rest;
    b->size = size;
    pool.insert(rest);
  }

  // Joins free neighbours lo (below) and hi, neither in a pool; returns lo.
  static Block* absorb(Block* lo, Block* hi) {
    lo->size += hi->size;
    lo->next = hi->next;
    if (hi->next != nullptr) hi->next->prev = lo;
    delete hi;
    return lo;
  }

  const int device_;
  std::mutex mu_;
  Pool small_, large_;
  absl::flat_hash_map<void*, Block*> live_;
  AllocatorStats stats_;
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
AllocatorStats caching_allocator_stats(int index) { return get(index).stats(); }
void reset_caching_allocator_peak(int index) { get(index).reset_peak(); }
void empty_caching_allocator(int index) { get(index).empty_cache(); }

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
