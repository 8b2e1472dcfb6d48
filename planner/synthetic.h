// planner/synthetic.h — generated problems for tests and benchmarks.
//
// training_step_trace() imitates what encore records for one captured
// training step of a deep network: activations allocated in forward order and
// freed in reverse during backward (nested lifetimes), gradients handed from
// one layer's backward to the next, and many short-lived temporaries. Most
// buffers are small and a few are large. Deterministic for a given seed.
//
// Example:
//   std::vector<Buffer> buffers = training_step_trace({.num_buffers = 10000, .seed = 7});
#ifndef ENCORE_PLANNER_SYNTHETIC_H_
#define ENCORE_PLANNER_SYNTHETIC_H_

#include <cstdint>
#include <vector>

#include "encore/planner.h"

namespace encore::planner {

struct TraceOptions {
  int num_buffers = 1000;  // exactly this many buffers are returned
  uint64_t seed = 1;
  int64_t alignment = 256;  // bytes; sizes are multiples of it too
};

[[nodiscard]] std::vector<Buffer> training_step_trace(const TraceOptions& options);

// A problem like MiniMalloc's "challenging" family: time steps and bytes both
// span [0, 2^20), sizes and lifetimes are multiples of 1024, and a plan
// within `capacity` exists by construction. The capacity x time rectangle is
// cut at random grid lines (guillotine cuts, the larger pieces first) into
// buffers; then `drop_percent` of them are removed and `shrink_percent` have
// their lifetimes shortened, which leaves the packing valid and makes the
// lower bound fall below the capacity, as in C, D and J. Deterministic.
//
// Example:
//   std::vector<Buffer> buffers = challenging_problem({.num_buffers = 300, .seed = 4});
//   // plan_buffers(buffers, {.algorithm = Algorithm::kExact, .capacity = 1 << 20}) fits.
struct ChallengeOptions {
  int num_buffers = 200;
  uint64_t seed = 1;
  int drop_percent = 15;    // of the pieces, removed
  int shrink_percent = 30;  // of the buffers left, lifetimes shortened
  int64_t capacity = int64_t{1} << 20;  // bytes and time steps
};

[[nodiscard]] std::vector<Buffer> challenging_problem(const ChallengeOptions& options);

// Independent random buffers: sizes in [1, max_size] bytes, lifetimes inside
// [0, horizon) time steps; alignment 1 unless `aligned` (then 1..64, powers
// of two). For property tests.
[[nodiscard]] std::vector<Buffer> random_buffers(int num_buffers, int64_t max_size, int64_t horizon, bool aligned,
                                                 uint64_t seed);

}  // namespace encore::planner

#endif  // ENCORE_PLANNER_SYNTHETIC_H_
