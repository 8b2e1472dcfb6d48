// Runs one eager workload n times, for instruction counting under callgrind:
//   valgrind --tool=callgrind eager_count add_nograd 2000
// bench/eager_instructions.sh runs two counts and prints instructions per op.
#include <charconv>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "bench/eager_workloads.h"
#include "encore/encore.h"

int main(int argc, char** argv) {
  using namespace encore;
  if (argc != 3) {
    std::fprintf(stderr, "usage: eager_count add_nograd|add_grad|chain N\n");
    return 2;
  }
  long n = 0;
  const char* end = argv[2] + std::strlen(argv[2]);
  if (const auto [ptr, ec] = std::from_chars(argv[2], end, n); ec != std::errc() || ptr != end || n < 1) {
    std::fprintf(stderr, "eager_count: N must be a positive integer, not '%s'\n", argv[2]);
    return 2;
  }
  Tensor a = ones({1}), b = ones({1});
  if (std::strcmp(argv[1], "add_grad") == 0) {
    a.requires_grad_();
    b.requires_grad_();
  } else if (std::strcmp(argv[1], "chain") == 0) {
    bench::Chain chain;
    for (long i = 0; i < n; ++i) chain.step();
    return 0;
  } else if (std::strcmp(argv[1], "add_nograd") != 0) {
    std::fprintf(stderr, "unknown workload %s\n", argv[1]);
    return 2;
  }
  for (long i = 0; i < n; ++i) Tensor c = a + b;
  return 0;
}
