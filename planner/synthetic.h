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
//   std::vector<Buffer> big = training_step_trace(
//       {.num_buffers = 1'000'000, .style = TraceStyle::kTransformer});
#ifndef ENCORE_PLANNER_SYNTHETIC_H_
#define ENCORE_PLANNER_SYNTHETIC_H_

#include <cstdint>
#include <vector>

#include "encore/planner.h"

namespace encore::planner {

// kLayers is the trace described above. kTransformer is a transformer
// block stack trained with gradient accumulation over `micro_batches`: per
// layer the attention scores (the largest, seq^2), q/k/v, MLP activations
// (4x), saved until that layer's backward; weight gradients created in the
// first backward and kept until the optimizer; many small temporaries of
// irregular sizes. The peak falls inside a backward pass, where saved
// activations are being freed while gradients accumulate, which is what
// makes greedy orderings miss the lower bound.
enum class TraceStyle { kLayers, kTransformer };

struct TraceOptions {
  int num_buffers = 1000;  // exactly this many buffers are returned
  uint64_t seed = 1;
  int64_t alignment = 256;  // bytes; sizes are multiples of it too
  TraceStyle style = TraceStyle::kLayers;
  int micro_batches = 2;  // kTransformer: forward/backward passes per step
};

[[nodiscard]] std::vector<Buffer> training_step_trace(const TraceOptions& options);

// A problem like MiniMalloc's "challenging" family: time steps and bytes both
// span [0, 2^20), sizes and lifetimes are multiples of 1024, and a plan
// within `capacity` exists by construction. The capacity x time rectangle is
// cut at random grid lines (guillotine cuts) into buffers; then
// `drop_percent` of them are removed and `shrink_percent` have their
// lifetimes shortened, which leaves the packing valid and makes the lower
// bound fall below the capacity, as in C, D and J. Deterministic.
//
// Example:
//   std::vector<Buffer> buffers = challenging_problem({.num_buffers = 300, .seed = 4});
//   // plan_buffers(buffers, {.algorithm = Algorithm::kExact, .capacity = 1 << 20}) fits.
enum class ChallengeCuts {
  kSquarish,      // cut the largest of four random pieces across its longer side (more likely)
  kLargestFirst,  // cut the largest piece, across time or address on a fair coin
};

struct ChallengeOptions {
  int num_buffers = 200;
  uint64_t seed = 1;
  int drop_percent = 15;    // of the pieces, removed
  int shrink_percent = 30;  // of the buffers left, lifetimes shortened
  int64_t capacity = int64_t{1} << 20;  // bytes and time steps
  ChallengeCuts cuts = ChallengeCuts::kSquarish;
};

[[nodiscard]] std::vector<Buffer> challenging_problem(const ChallengeOptions& options);

// NOTE [ Largest-first cuts ]
// Measured against the eleven files of google/minimalloc's
// benchmarks/challenging (bench/RESULTS.md, issue 20, fifth pass), the default
// options differ in character. Shortened lifetimes double the distinct time
// points (about 1 per buffer; the files have 0.47-0.63, and nearly every point
// both ends and starts buffers). Squarish cuts leave no buffer longer than a
// fifth of the time (A-D have 10 % of their buffers above half of it, C and D
// 16-17 spanning all of it). And the largest of four draws leaves a long tail
// of big pieces, where the files' buffer areas are spread evenly up to a
// ceiling (quantiles 10/50/90 % at 0.09-0.15 / 0.42-0.53 / 0.86-0.94 of the largest), which is
// what cutting always the largest piece gives. Cutting the largest piece in a
// random direction, without shortening and with 5-20 % of the pieces dropped,
// matches A-E and I-K on those figures, on the share of buffers followed in
// time by one of the same size (0.2) and on the lower bound (2^20, or below
// it as in C, D and J). F, G and H (small tiles of one shape, 60 % of the area
// filled, yet full sections) are not of this kind.
//
// Example:
//   for (uint64_t seed = 1; seed <= 100; ++seed) {
//     std::vector<Buffer> buffers = minimalloc_like_problem(seed);  // 150-450 buffers, fits 2^20
//   }
[[nodiscard]] std::vector<Buffer> minimalloc_like_problem(uint64_t seed);

// Independent random buffers: sizes in [1, max_size] bytes, lifetimes inside
// [0, horizon) time steps; alignment 1 unless `aligned` (then 1..64, powers
// of two). For property tests.
[[nodiscard]] std::vector<Buffer> random_buffers(int num_buffers, int64_t max_size, int64_t horizon, bool aligned,
                                                 uint64_t seed);

}  // namespace encore::planner

#endif  // ENCORE_PLANNER_SYNTHETIC_H_
