// Timing for bench/ programs: process CPU time (a clock, and the median of a
// function's CPU time over repeated runs) and, where threads spin or sleep
// and CPU time would count the spinning, the median of its wall time.
//
//   const double ms = encore::bench::median_cpu_ms([&] { (void)graph->replay(); });
//   const double wall = encore::bench::median_wall_ms([&] { (void)w->step(); });
#pragma once

#include <algorithm>
#include <chrono>
#include <ctime>
#include <utility>
#include <vector>

namespace encore::bench {

// The median of v (the upper one of an even count); v must not be empty.
inline double median(std::vector<double> v) {
  std::nth_element(v.begin(), v.begin() + v.size() / 2, v.end());
  return v[v.size() / 2];
}

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
  return median(std::move(t));
}

// Median wall time of fn() in ms over `runs` runs, after `warmup` untimed ones.
template <typename F>
double median_wall_ms(F&& fn, int warmup = 3, int runs = 7) {
  for (int i = 0; i < warmup; ++i) fn();
  std::vector<double> t;
  for (int i = 0; i < runs; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    fn();
    t.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  return median(std::move(t));
}

}  // namespace encore::bench
