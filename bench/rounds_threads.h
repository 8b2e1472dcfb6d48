// The command line of the bench programs that take [ROUNDS] [THREADS]
// (gemm_threads_bench, worker_pool_bench): ROUNDS an integer in 1..100000,
// THREADS one in 1..1024, which becomes OpenMP's thread count (and so
// encore's worker count). Bad usage is one line on stderr and exit status 2.
//
//   int main(int argc, char** argv) {
//     const int rounds = encore::bench::rounds_and_threads(argc, argv, /*default_rounds=*/15);
#pragma once

#include <omp.h>

#include <charconv>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace encore::bench {

// argv[i] as an integer in [lo, hi], or `fallback` when absent; exits 2 otherwise.
inline int int_arg(int argc, char** argv, int i, int fallback, int lo, int hi, const char* what) {
  if (argc <= i) return fallback;
  int v = 0;
  const char* end = argv[i] + std::strlen(argv[i]);
  if (const auto [ptr, ec] = std::from_chars(argv[i], end, v); ec != std::errc() || ptr != end || v < lo || v > hi) {
    std::fprintf(stderr, "usage: %s [ROUNDS] [THREADS]; %s must be an integer in %d..%d, not '%s'\n", argv[0], what, lo,
                 hi, argv[i]);
    std::exit(2);
  }
  return v;
}

// Parses both arguments, sets OpenMP's thread count when THREADS is given,
// and returns ROUNDS (`default_rounds` when absent).
inline int rounds_and_threads(int argc, char** argv, int default_rounds) {
  if (argc > 3) {
    std::fprintf(stderr, "usage: %s [ROUNDS] [THREADS]\n", argv[0]);
    std::exit(2);
  }
  const int rounds = int_arg(argc, argv, 1, default_rounds, 1, 100000, "ROUNDS");
  if (argc > 2) omp_set_num_threads(int_arg(argc, argv, 2, 0, 1, 1024, "THREADS"));
  return rounds;
}

}  // namespace encore::bench
