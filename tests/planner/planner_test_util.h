// Helpers shared by the planner tests: brute-force optima and problem files.
#ifndef ENCORE_TESTS_PLANNER_PLANNER_TEST_UTIL_H_
#define ENCORE_TESTS_PLANNER_PLANNER_TEST_UTIL_H_

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <numeric>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "encore/planner.h"

namespace encore::planner::testing {

inline bool overlap_in_time(const Buffer& a, const Buffer& b) { return a.lower < b.upper && b.lower < a.upper; }

inline int64_t round_up(int64_t value, int64_t alignment) { return (value + alignment - 1) / alignment * alignment; }

// The best peak over every order of placing the buffers, each put at the
// lowest aligned offset above the buffers placed before it that overlap it in
// time. Every canonical plan (each buffer resting on 0 or on a buffer below)
// arises from some order, so this is the optimum. O(n! n^2): n <= 8.
inline int64_t brute_force_by_orders(const std::vector<Buffer>& buffers) {
  std::vector<int> order(buffers.size());
  std::iota(order.begin(), order.end(), 0);
  int64_t best = std::numeric_limits<int64_t>::max();
  std::vector<int64_t> offset(buffers.size());
  do {
    int64_t peak = 0;
    for (size_t k = 0; k < order.size(); ++k) {
      const Buffer& b = buffers[order[k]];
      int64_t at = 0;
      for (size_t j = 0; j < k; ++j) {
        const Buffer& below = buffers[order[j]];
        if (overlap_in_time(b, below) && b.size > 0 && below.size > 0) {
          at = std::max(at, offset[order[j]] + below.size);
        }
      }
      offset[order[k]] = b.size == 0 ? 0 : round_up(at, b.alignment);
      peak = std::max(peak, offset[order[k]] + b.size);
    }
    best = std::min(best, peak);
  } while (std::next_permutation(order.begin(), order.end()));
  return buffers.empty() ? 0 : best;
}

// The best peak over every assignment of integer offsets below `limit`
// (no canonical-form assumption at all). Exponential: tiny problems only.
inline int64_t brute_force_by_offsets(const std::vector<Buffer>& buffers, int64_t limit) {
  std::vector<int64_t> offset(buffers.size());
  int64_t best = std::numeric_limits<int64_t>::max();
  auto search = [&](auto&& self, size_t i, int64_t peak) -> void {
    if (peak >= best) return;
    if (i == buffers.size()) {
      best = peak;
      return;
    }
    const Buffer& b = buffers[i];
    for (int64_t at = 0; at + b.size <= limit; at += b.alignment) {
      bool clash = false;
      for (size_t j = 0; j < i && !clash; ++j) {
        clash = overlap_in_time(b, buffers[j]) && at < offset[j] + buffers[j].size && offset[j] < at + b.size;
      }
      if (clash) continue;
      offset[i] = at;
      self(self, i + 1, std::max(peak, at + b.size));
    }
  };
  search(search, 0, 0);
  return best;
}

// $ENCORE_SHARED_DIR/data/minimalloc/<name>, or an error saying what is missing.
inline absl::StatusOr<CsvProblem> read_shared_problem(const std::string& name) {
  const char* shared = std::getenv("ENCORE_SHARED_DIR");
  if (shared == nullptr || *shared == '\0') {
    return absl::FailedPreconditionError(
        "ENCORE_SHARED_DIR is not set; run through `meson test` or point it at the shared folder");
  }
  return read_csv(std::string(shared) + "/data/minimalloc/" + name);
}

}  // namespace encore::planner::testing

#endif  // ENCORE_TESTS_PLANNER_PLANNER_TEST_UTIL_H_
