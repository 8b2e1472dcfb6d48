// Which threads should run encore's parallel CPU kernels: encore's own
// spinning workers, or an OpenMP region per kernel (NOTE [ Spinning workers ]
// in src/backends/cpu/workers.cpp)? Both in one process, switched between
// rounds (set_worker_pool), so a busy neighbour or a frequency change hits
// both alike. Run it under each OpenMP wait policy:
//
//   OMP_WAIT_POLICY=passive build/bench/worker_pool_bench [ROUNDS] [THREADS]
//   GOMP_SPINCOUNT=30000 build/bench/worker_pool_bench [ROUNDS] [THREADS]
//
// Workloads (tools/workloads.h, AdamW unless said): the MLPs 784-512-512-10
// batch 128 and 1024-4096-4096-1024 batch 64, the transformer block (B 8,
// T 64, C 256, 4 heads), the demo GPT (2 layers, C 64, B 16, T 32) and the
// CNN (3 residual blocks of 16 channels, batch 32, SGD momentum), each eager
// and as a captured step replayed. Per round and pool: 3 untimed steps,
// then the median wall time of 7; the table gives the median over ROUNDS
// (default 11) rounds of each pool, alternating which goes first, and the
// ratio encore / OpenMP. THREADS (default: OpenMP's count) is both pools'.
#include <omp.h>

#include <cstdio>
#include <cstdlib>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "bench/cpu_time.h"
#include "bench/rounds_threads.h"
#include "encore/encore.h"
#include "src/backends/cpu/workers.h"
#include "tools/workloads.h"

namespace {

using encore::bench::median;
using encore::bench::median_wall_ms;
using encore::cpu::WorkerPool;
using encore::tools::Workload;

}  // namespace

int main(int argc, char** argv) {
  const int rounds = encore::bench::rounds_and_threads(argc, argv, 11);
  struct Row {
    std::string name;
    std::unique_ptr<Workload> w;
  };
  std::vector<Row> rows;
  rows.push_back({"MLP 784-512-512-10 b128", encore::tools::make_mlp({.widths = {784, 512, 512, 10}, .batch = 128})});
  rows.push_back({"MLP 1024-4096-4096-1024 b64",
                  encore::tools::make_mlp({.widths = {1024, 4096, 4096, 1024}, .batch = 64})});
  rows.push_back({"transformer block B8 T64 C256", encore::tools::make_block({})});
  rows.push_back({"demo GPT 2x64 B16 T32", encore::tools::make_gpt({})});
  rows.push_back({"CNN resnet 3x16 b32", encore::tools::make_resnet_cnn({})});
  const char* policy = std::getenv("OMP_WAIT_POLICY");
  const char* spin = std::getenv("GOMP_SPINCOUNT");
  const WorkerPool start = encore::cpu::worker_pool();
  std::printf("%d threads, %d rounds, OMP_WAIT_POLICY=%s GOMP_SPINCOUNT=%s (start-up pool: %s); "
              "wall ms per step, median of rounds\n",
              omp_get_max_threads(), rounds, policy ? policy : "(unset)", spin ? spin : "(unset)",
              start == WorkerPool::kEncore ? "encore" : "openmp");
  std::printf("| step | mode | OpenMP region per kernel | encore's workers | encore / OpenMP |\n"
              "|---|---|---|---|---|\n");
  for (Row& row : rows) {
    Workload& w = *row.w;
    absl::StatusOr<encore::Graph> g = encore::capture([&] { return w.step(); });
    if (!g.ok()) {
      std::fprintf(stderr, "%s: capture failed: %s\n", row.name.c_str(), g.status().ToString().c_str());
      return 1;
    }
    for (const bool replay : {false, true}) {
      // A refused replay runs nothing and would time as a very fast step: stop there.
      const std::function<void()> step = replay ? std::function<void()>([&] {
        if (absl::Status s = g->replay(); !s.ok()) {
          std::fprintf(stderr, "%s: replay refused: %s\n", row.name.c_str(), s.ToString().c_str());
          std::exit(1);
        }
      })
                                                : std::function<void()>([&] { (void)w.step(); });
      std::vector<double> omp, ours;
      for (int r = 0; r < rounds; ++r) {
        for (int k = 0; k < 2; ++k) {
          const bool encore_now = (k == 0) == (r % 2 == 0);
          encore::cpu::set_worker_pool(encore_now ? WorkerPool::kEncore : WorkerPool::kOpenMp);
          (encore_now ? ours : omp).push_back(median_wall_ms(step));
        }
      }
      const double o = median(omp), e = median(ours);
      std::printf("| %s | %s | %.3f | %.3f | %.3f |\n", row.name.c_str(), replay ? "replay" : "eager", o, e, e / o);
      std::fflush(stdout);
    }
  }
  encore::cpu::set_worker_pool(start);
  return 0;
}
