// parallel_for: splits [0, n) over the CPU cores when the work is big enough.
//
//   parallel_for(n, kGrainElementwise, [&](int64_t begin, int64_t end) {
//     for (int64_t i = begin; i < end; ++i) out[i] = a[i] + b[i];
//   });
//
// Below `grain` units of work the body runs inline on the calling thread: no
// thread is woken for tiny tensors. Above it, [0, n) splits into at most
// worker_threads() equal ranges, one per task of run_tasks (workers.h): the
// ranges depend only on n, grain and the thread count, so a kernel's bits do
// too.
#pragma once

#include "src/backends/cpu/workers.h"

#include <algorithm>
#include <cstdint>

namespace encore::cpu {

inline constexpr int64_t kGrainElementwise = 32768;   // cheap per-element ops
inline constexpr int64_t kGrainTranscendental = 8192; // exp, tanh, erf, ...

template <typename F>
void parallel_for(int64_t n, int64_t grain, F&& body) {
  if (n <= grain) {
    if (n > 0) body(int64_t{0}, n);
    return;
  }
  const int64_t max_chunks = (n + grain - 1) / grain;
  const int threads = static_cast<int>(std::min<int64_t>(worker_threads(), max_chunks));
  if (threads <= 1) {
    body(int64_t{0}, n);
    return;
  }
  const int64_t chunk = (n + threads - 1) / threads;
  run_tasks(threads, [&](int t) {
    const int64_t begin = std::min(n, t * chunk);
    const int64_t end = std::min(n, begin + chunk);
    if (begin < end) body(begin, end);
  });
}

}  // namespace encore::cpu
