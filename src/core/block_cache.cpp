#include "src/core/block_cache.h"

#include <algorithm>
#include <tuple>
#include <utility>

#include "absl/strings/str_format.h"
#include "encore/error.h"

namespace encore {
namespace {
int64_t round_up(int64_t n, int64_t m) { return (n + m - 1) / m * m; }
}  // namespace

bool BlockCache::BySizeThenAddress::operator()(const Block* a, const Block* b) const {
  return std::tie(a->size, a->ptr) < std::tie(b->size, b->ptr);
}

BlockCache::BlockCache(SegmentSource* source, std::string name) : source_(source), name_(std::move(name)) {}

BlockCache::~BlockCache() {
  for (auto& [start, seg] : segments_) {
    for (Block* b = seg.head; b != nullptr;) {
      Block* next = b->next;
      delete b;
      b = next;
    }
    source_->unmap(start, seg.bytes);
  }
}

void* BlockCache::allocate(int64_t nbytes) {
  // Keeps the roundings below from overflowing int64 (within 2 MiB of 2^63
  // they wrapped to a negative size, which the small pool served with a 2 MiB block).
  refuse_beyond_max_allocation(name_, nbytes);
  const int64_t size = round_up(nbytes <= 0 ? 1 : nbytes, kRound);
  const bool small = size <= kSmallLimit;
  std::lock_guard<std::mutex> lock(mu_);
  Pool& pool = small ? small_ : large_;
  Block* b = take_best_fit(pool, size);
  if (b == nullptr) b = new_segment(small ? kSegment : round_up(size, kSegment), small, nbytes);
  if (b->size - size >= (small ? kRound : kSmallLimit + 1)) split(pool, b, size);
  b->allocated = true;
  live_.emplace(b->ptr, b);
  stats_.in_use_bytes += b->size;
  stats_.peak_in_use_bytes = std::max(stats_.peak_in_use_bytes, stats_.in_use_bytes);
  ++stats_.allocations;
  return b->ptr;
}

void BlockCache::deallocate(void* p) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = live_.find(p);
  ENCORE_CHECK_CODE(it != live_.end(), kInternal, "%s allocator: freeing %p, which it did not allocate or freed before",
                    name_, p);
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

AllocatorStats BlockCache::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

void BlockCache::reset_peak() {
  std::lock_guard<std::mutex> lock(mu_);
  stats_.peak_in_use_bytes = stats_.in_use_bytes;
}

void BlockCache::empty_cache() {
  std::lock_guard<std::mutex> lock(mu_);
  release_free_segments();
}

std::vector<BlockCache::SegmentInfo> BlockCache::snapshot() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<SegmentInfo> out;
  out.reserve(segments_.size());
  for (const auto& [start, seg] : segments_) {
    SegmentInfo info{reinterpret_cast<uintptr_t>(start), seg.bytes, seg.head->small, {}};
    for (const Block* b = seg.head; b != nullptr; b = b->next) {
      info.blocks.push_back({reinterpret_cast<uintptr_t>(b->ptr), b->size, b->allocated});
    }
    out.push_back(std::move(info));
  }
  return out;
}

BlockCache::Block* BlockCache::take_best_fit(Pool& pool, int64_t size) {
  Block key{nullptr, size, false};
  auto it = pool.lower_bound(&key);
  if (it == pool.end()) return nullptr;
  Block* b = *it;
  pool.erase(it);
  return b;
}

// Gives whole free segments back to the source. Holds mu_.
void BlockCache::release_free_segments() {
  for (Pool* pool : {&small_, &large_}) {
    for (auto it = pool->begin(); it != pool->end();) {
      Block* b = *it;
      if (b->prev == nullptr && b->next == nullptr) {   // a whole free segment
        source_->unmap(b->ptr, b->size);
        segments_.erase(b->ptr);
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
BlockCache::Block* BlockCache::new_segment(int64_t bytes, bool small, int64_t requested) {
  void* p = source_->map(bytes);
  if (p == nullptr) {   // give cached segments back and try once more
    release_free_segments();
    p = source_->map(bytes);
  }
  if (p == nullptr) {
    throw_error(absl::StatusCode::kResourceExhausted,
                absl::StrFormat("%s allocator: out of memory allocating %d bytes (a new segment of %d bytes); "
                                "%d bytes in use, %d reserved after giving back the free segments",
                                name_, requested, bytes, stats_.in_use_bytes, stats_.reserved_bytes));
  }
  stats_.reserved_bytes += bytes;
  Block* b = new Block{static_cast<char*>(p), bytes, small};
  segments_.emplace(b->ptr, Segment{b, bytes});
  return b;
}

void BlockCache::split(Pool& pool, Block* b, int64_t size) {
  Block* rest = new Block{b->ptr + size, b->size - size, b->small};
  rest->prev = b;
  rest->next = b->next;
  if (b->next != nullptr) b->next->prev = rest;
  b->next = rest;
  b->size = size;
  pool.insert(rest);
}

// Joins free neighbours lo (below) and hi, neither in a pool; returns lo.
BlockCache::Block* BlockCache::absorb(Block* lo, Block* hi) {
  lo->size += hi->size;
  lo->next = hi->next;
  if (hi->next != nullptr) hi->next->prev = lo;
  delete hi;
  return lo;
}

}  // namespace encore
