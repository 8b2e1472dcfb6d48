// Process CPU time for bench/ programs: a clock, and the median of a
// function's CPU time over repeated runs.
//
//   const double ms = encore::bench::median_cpu_ms([&] { (void)graph->replay(); });
#pragma once

#include <algorithm>
#include <ctime>
#include <vector>

namespace encore::bench {

// CPU time of the whole process, in ms.
inline double cpu_now_ms() {
  timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec * 1e-6;
}

// Median CPU time of fn() in ms, after one untimed run (warm caches and lazy
// state), over at least 5 runs and about 0.3 s, at most max_runs runs.
template <typename F>
double median_cpu_ms(F&& fn, size_t max_runs = 200) {
  fn();
  std::vector<double> t;
  const double start = cpu_now_ms();
  while (t.size() < 5 || (cpu_now_ms() - start < 300.0 && t.size() < max_runs)) {
    const double t0 = cpu_now_ms();
    fn();
    t.push_back(cpu_now_ms() - t0);
  }
  std::nth_element(t.begin(), t.begin() + t.size() / 2, t.end());
  return t[t.size() / 2];
}

}  // namespace encore::bench
