// Who should run a CPU GEMM's threads: encore's worker threads, or OpenBLAS's
// own (NOTE [ One thread pool for GEMMs ] in src/backends/cpu/gemm.cpp)?
// Both in one process, switched between rounds (set_gemm_threading), so a
// busy neighbour or a frequency change hits both alike.
//
//   OMP_WAIT_POLICY=passive build/bench/gemm_threads_bench [ROUNDS] [THREADS]
//
// Workloads: the MLP 1024-4096-4096-1024 batch 64, the transformer block
// (GPT of one block, C 256, 4 heads, B 8, T 64) and the demo GPT (2 layers,
// C 64, B 16, T 32), each with AdamW. Per round and setting: 3 untimed eager
// steps (the switch's first GEMMs), then the median wall time of 7 eager
// steps; the table gives the median over ROUNDS (default 15) rounds of each
// setting, alternating which goes first, and the ratio encore / OpenBLAS
// threads. THREADS (default: OpenMP's count) is the thread count of both.
#include <omp.h>

#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "bench/cpu_time.h"
#include "bench/rounds_threads.h"
#include "encore/encore.h"
#include "src/backends/cpu/gemm_threading.h"
#include "tools/workloads.h"

namespace {

using encore::bench::median;
using encore::bench::median_wall_ms;
using encore::cpu::GemmThreading;
using encore::tools::Workload;

}  // namespace

int main(int argc, char** argv) {
  const int rounds = encore::bench::rounds_and_threads(argc, argv, 15);
  struct Row {
    std::string name;
    std::unique_ptr<Workload> w;
  };
  std::vector<Row> rows;
  rows.push_back({"MLP 1024-4096-4096-1024 b64",
                  encore::tools::make_mlp({.widths = {1024, 4096, 4096, 1024}, .batch = 64})});
  rows.push_back({"transformer block B8 T64 C256",
                  encore::tools::make_gpt({.config = {.vocab_size = 64, .block_size = 64, .n_layer = 1, .n_head = 4,
                                                      .n_embd = 256},
                                           .batch = 8})});
  rows.push_back({"demo GPT 2x64 B16 T32", encore::tools::make_gpt({})});
  std::printf("%d threads, %d rounds; wall ms per eager step, median of rounds\n", omp_get_max_threads(), rounds);
  std::printf("| step | OpenBLAS threads | encore bands | encore / OpenBLAS |\n|---|---|---|---|\n");
  for (Row& row : rows) {
    std::vector<double> blas, ours;
    for (int r = 0; r < rounds; ++r) {
      for (int k = 0; k < 2; ++k) {
        const bool encore_first = r % 2 == 0;
        const bool encore_now = (k == 0) == encore_first;
        encore::cpu::set_gemm_threading(encore_now ? GemmThreading::kEncore : GemmThreading::kOpenBlas);
        (encore_now ? ours : blas).push_back(median_wall_ms([&] { (void)row.w->step(); }));
      }
    }
    const double b = median(blas), o = median(ours);
    std::printf("| %s | %.3f | %.3f | %.3f |\n", row.name.c_str(), b, o, o / b);
    std::fflush(stdout);
  }
  encore::cpu::set_gemm_threading(GemmThreading::kEncore);
  return 0;
}
