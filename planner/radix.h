// planner/radix.h — a stable LSD radix sort on 64-bit keys; not installed.
//
// The planner's fixed costs at scale are sorts of 10^6-10^7 records by an
// int64 time or a hash (the event order every sweep reads, duplicate ids).
// std::sort costs ~100 ns a record there; an LSD pass costs ~10 ns a record
// on this machine, and only the bits in which keys differ are sorted.
// Example:
//
//   std::vector<TimeEvent> events = ..., scratch;
//   radix_sort(events, scratch, [](const TimeEvent& e) { return ordered_key(e.time); });
#ifndef ENCORE_PLANNER_RADIX_H_
#define ENCORE_PLANNER_RADIX_H_

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <vector>

namespace encore::planner::internal {

// int64 -> uint64 preserving order (flips the sign bit).
inline uint64_t ordered_key(int64_t value) { return static_cast<uint64_t>(value) ^ (uint64_t{1} << 63); }

// Sorts `items` by key(item), stable. `scratch` is working memory (resized
// to items.size(); its contents are lost), so repeated sorts reuse it.
// Keys are sorted relative to their minimum, in as few passes of at most
// 11 bits as their range needs (time steps below 2^22: two passes).
template <typename T, typename Key>
void radix_sort(std::vector<T>& items, std::vector<T>& scratch, Key key) {
  const size_t n = items.size();
  if (n < 2) return;
  if (n < 512) {
    std::stable_sort(items.begin(), items.end(), [&](const T& a, const T& b) { return key(a) < key(b); });
    return;
  }
  uint64_t lowest = ~uint64_t{0}, highest = 0;
  for (const T& item : items) {
    const uint64_t k = key(item);
    lowest = std::min(lowest, k);
    highest = std::max(highest, k);
  }
  const uint64_t range = highest - lowest;
  if (range == 0) return;
  const int bits = 64 - __builtin_clzll(range);
  const int passes = (bits + 10) / 11;
  const int width = (bits + passes - 1) / passes;
  const uint64_t mask = (uint64_t{1} << width) - 1;
  std::vector<size_t> counts(static_cast<size_t>(passes) << width, 0);
  for (const T& item : items) {
    const uint64_t k = key(item) - lowest;
    for (int p = 0; p < passes; ++p) ++counts[(static_cast<size_t>(p) << width) + ((k >> (p * width)) & mask)];
  }
  scratch.resize(n);
  for (int p = 0; p < passes; ++p) {
    size_t* count = counts.data() + (static_cast<size_t>(p) << width);
    size_t sum = 0;
    for (size_t d = 0; d <= mask; ++d) {
      const size_t here = count[d];
      count[d] = sum;
      sum += here;
    }
    const int shift = p * width;
    for (const T& item : items) scratch[count[((key(item) - lowest) >> shift) & mask]++] = item;
    items.swap(scratch);
  }
}

}  // namespace encore::planner::internal

#endif  // ENCORE_PLANNER_RADIX_H_
