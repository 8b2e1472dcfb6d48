// encore against libtorch (Debian's libtorch-dev, 1.13) on the CPU: the same
// training steps, timed alternately in one process at 1 and 2 threads, so a
// busy neighbour or a frequency change hits both.
//
//   OMP_WAIT_POLICY=passive build/bench/torch_cpu_steps [--quick] [--procs=N] [WORKLOAD...]
//   OMP_WAIT_POLICY=passive build/bench/torch_cpu_steps --malloc=default|keep [--quick] [WORKLOAD...]
//
// WORKLOAD names rows to run (all when none; --help lists them).
//
// libtorch's two allocator settings (issue 19). libtorch 1.13's CPU
// allocator (c10::alloc_cpu) has no cache: every tensor is a posix_memalign
// (64-byte aligned) and every release a free(), so glibc decides what a step
// costs. Its default: blocks above the mmap threshold (128 KiB, rising with
// frees to at most 32 MiB) are mmap'ed and unmapped one by one, so their
// pages fault in again every step, and the heap's top is trimmed above 128
// KiB. "keep": mallopt(M_MMAP_MAX, 0) (every block from the heap) and
// mallopt(M_TRIM_THRESHOLD, INT_MAX) (no trim below 2 GiB free), set at the start
// of the process: freed memory stays mapped and is reused. encore's own
// tensors come from its caching allocator (src/core/allocator.h), which keeps
// its blocks in either setting, so the setting is libtorch's.
//
// Without --malloc the program is a driver: for each thread count, row and
// round (--procs, default 3) it runs itself once per setting, in alternating
// order, each child timing that one row (libtorch, encore eager, replay in
// turn); it reports libtorch's median under each setting and encore's ratios
// against libtorch's better one, and (steadier on a shared machine) the
// median over that setting's children of encore / libtorch timed in the same
// process. With --malloc it is such a child, for the
// named rows (all when none) at 1 and 2 threads (--threads=N: only N).
//
// Built only where meson finds libtorch (bench/meson.build). Workloads:
//  - chain20: ten rounds of y = y * w + b on [1, 16], sum, backward (no optimizer);
//  - MLPs 784-128-10 batch 32, 784-512-512-10 batch 128, 1024-4096-4096-1024
//    batch 64: ReLU, cross-entropy on labels i % classes, SGD lr 0.01 momentum 0.9;
//  - the transformer block (tools/workloads.h's make_block) B 8, T 64, C 256,
//    4 heads: pre-norm LayerNorm,
//    non-causal softmax attention, MLP 1024 with exact GELU, loss the mean
//    of squares of its output, AdamW lr 1e-3;
//  - the demo GPT (tools/workloads.h's make_gpt, examples/train_gpt): vocab 64,
//    block 32, 2 layers, 4 heads, C 64, batch 16, tied head, GELU-tanh,
//    AdamW lr 3e-3 weight decay 0.1;
//  - the CNN of issue 21 (tools/workloads.h's make_resnet_cnn, as in bench/train_step_bench.cpp):
//    x [32, 3, 32, 32] -> conv 3->16 3x3, batch norm, ReLU, three residual
//    blocks relu(x + bn2(conv2(relu(bn1(conv1(x)))))) of 16-channel 3x3
//    convolutions (padding 1, no bias), global average pool, flatten,
//    Linear(16, 10); cross-entropy on labels i % 10, SGD lr 0.01 momentum
//    0.9, training mode.
// Per row: median wall ms per step of libtorch, encore eager and encore's
// captured step replayed, timed in turn in runs of 5 steps for at least 7
// rounds and about 1 s of steps (--quick: 0.2 s; above one thread each round
// also sleeps 0.15 s, see run_row); ratios are encore / libtorch.
#include <malloc.h>
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <limits>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "bench/peers/torch_cpu_steps.h"
#include "encore/encore.h"
#include "tools/workloads.h"

extern "C" void openblas_set_num_threads(int);

namespace encore {
namespace {

using tools::Workload;

struct Chain {   // bench/eager_workloads.h's chain, as a Workload-like step
  Tensor x = full({1, 16}, 0.5).requires_grad_();
  Tensor w = full({1, 16}, 0.9).requires_grad_();
  Tensor b = full({1, 16}, 0.1).requires_grad_();
  std::vector<Tensor> step() {
    Tensor y = x;
    for (int i = 0; i < 10; ++i) y = y * w + b;
    Tensor s = y.sum();
    s.backward();
    return {s};
  }
};

// tools/workloads.h's MLP (x ~ N(0, 1), labels i % classes, cross-entropy)
// with SGD lr 0.01, momentum 0.9 in place of its AdamW.
std::unique_ptr<Workload> mlp(std::vector<int64_t> widths, int64_t batch) {
  std::unique_ptr<Workload> w = tools::make_mlp({.widths = widths, .batch = batch});
  w->opt = std::make_unique<optim::SGD>(w->model->parameters(), optim::SgdOptions{.lr = 0.01, .momentum = 0.9});
  return w;
}

bool machine_lines = false;   // --machine: "ROW name threads torch eager replay rounds" per row

double now_ms() {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

double median(std::vector<double> v) {
  std::nth_element(v.begin(), v.begin() + v.size() / 2, v.end());
  return v[v.size() / 2];
}

void set_threads(int n) {
  omp_set_num_threads(n);
  openblas_set_num_threads(n);
  peers::torch_set_threads(n);
}

void run_row(const std::string& name, int threads, double budget_ms) {
  std::unique_ptr<Workload> w;
  std::unique_ptr<Chain> chain;
  std::function<std::vector<Tensor>()> step;
  if (name == "chain20") {
    chain = std::make_unique<Chain>();
    step = [&] { return chain->step(); };
  } else {
    w = name == "block_b8_t64_c256_h4"         ? tools::make_block({})
        : name == "cnn_resnet3x16_b32_3x32x32" ? tools::make_resnet_cnn({.blocks = 3, .channels = 16, .batch = 32})
        : name == "demo_gpt_2x64_b16_t32"
            ? tools::make_gpt({.config = {.vocab_size = 64, .block_size = 32, .n_layer = 2, .n_head = 4, .n_embd = 64},
                               .batch = 16})
        : name == "mlp_784_128_10_b32"         ? mlp({784, 128, 10}, 32)
        : name == "mlp_784_512_512_10_b128"    ? mlp({784, 512, 512, 10}, 128)
                                               : mlp({1024, 4096, 4096, 1024}, 64);
    step = [&] { return w->step(); };
  }
  // libtorch's GEMMs use OpenBLAS's own threads; encore's set OpenBLAS to
  // one thread whenever they run (NOTE [ One thread pool for GEMMs ] in
  // src/backends/cpu/gemm.cpp), so each libtorch step gets them back first.
  std::function<void()> torch_step = [threads, inner = peers::torch_step(name)] {
    openblas_set_num_threads(threads);
    inner();
  };
  for (int i = 0; i < 3; ++i) step();
  absl::StatusOr<Graph> graph = capture([&] { return step(); });
  if (!graph.ok()) {
    std::printf("%s: capture failed: %s\n", name.c_str(), std::string(graph.status().message()).c_str());
    std::exit(1);
  }
  // A refused replay runs nothing and would time as a very fast step: the
  // row fails instead (no ROW line: the driver reports the child failed).
  absl::Status refused;
  const auto replay = [&] {
    if (absl::Status s = graph->replay(); !s.ok() && refused.ok()) refused = s;
  };
  for (int i = 0; i < 3; ++i) {
    torch_step();
    replay();
  }
  std::vector<double> tt, te, tr;
  auto time = [](auto&& fn, std::vector<double>& out) {
    const double t0 = now_ms();
    fn();
    out.push_back(now_ms() - t0);
  };
  // Rounds of kRun steps each: libtorch, encore eager, replay. Above one
  // thread OpenBLAS's workers spin (sched_yield, up to 2^28 cycles: ~0.1 s)
  // after libtorch's GEMMs and would take the cores from encore's OpenMP
  // workers, which run encore's GEMMs too (NOTE [ One thread pool for GEMMs ]
  // in src/backends/cpu/gemm.cpp); so after libtorch's run the round sleeps
  // until they have given up. Each run starts with one untimed step.
  constexpr int kRun = 5;
  const auto quiesce = [threads] {
    if (threads > 1) std::this_thread::sleep_for(std::chrono::milliseconds(150));
  };
  const double start = now_ms();
  while (tt.size() < 7 * kRun || (now_ms() - start < budget_ms && tt.size() < 2000)) {
    torch_step();
    for (int i = 0; i < kRun; ++i) time(torch_step, tt);
    quiesce();
    step();
    for (int i = 0; i < kRun; ++i) time([&] { step(); }, te);
    replay();
    for (int i = 0; i < kRun; ++i) time(replay, tr);
  }
  if (!refused.ok()) {
    std::printf("%s: replay refused: %s\n", name.c_str(), refused.ToString().c_str());
    std::exit(1);
  }
  const double mt = median(tt), me = median(te), mr = median(tr);
  if (machine_lines) {
    std::printf("ROW %s %d %.6g %.6g %.6g %zu\n", name.c_str(), threads, mt, me, mr, tt.size());
  } else {
    std::printf("| %s | %d | %.4g | %.4g | %.4g | %.2fx | %.2fx | %zu |\n", name.c_str(), threads, mt, me, mr,
                me / mt, mr / mt, tt.size());
  }
  std::fflush(stdout);
}

}  // namespace
}  // namespace encore

namespace {

struct Row {
  std::string name;
  int threads = 0;
  double torch_ms = 0, eager_ms = 0, replay_ms = 0;
};

// Runs this program as a child for one row, thread count and setting;
// returns its result line, parsed (false when the child failed).
bool run_child(const std::string& self, const std::string& row, int threads, const std::string& setting, bool quick,
               Row& out) {
  const std::string cmd = self + " --malloc=" + setting + " --threads=" + std::to_string(threads) + " --machine " +
                          (quick ? "--quick " : "") + row;
  FILE* f = popen(cmd.c_str(), "r");
  if (f == nullptr) return false;
  char line[512];
  bool ok = false;
  while (std::fgets(line, sizeof line, f) != nullptr) {
    char name[128];
    int t = 0;
    if (std::sscanf(line, "ROW %127s %d %lf %lf %lf", name, &t, &out.torch_ms, &out.eager_ms, &out.replay_ms) == 5) {
      out.name = name;
      out.threads = t;
      ok = true;
    }
  }
  return pclose(f) == 0 && ok;
}

int drive(const std::string& self, const std::vector<std::string>& rows, bool quick, int procs) {
  std::printf("libtorch under glibc's default allocator and with freed memory kept (--malloc=keep); %d processes "
              "per setting, alternating; medians over processes of each process's median step.\n\n",
              procs);
  std::printf("| workload | threads | libtorch default ms | libtorch keep ms | encore eager ms | encore replay ms | "
              "eager / best libtorch | replay / best libtorch | same process, better setting: eager / libtorch, "
              "replay / libtorch |\n|---|---|---|---|---|---|---|---|---|\n");
  std::fflush(stdout);
  for (int threads : {1, 2}) {
    for (const std::string& row : rows) {
      std::vector<double> torch_default, torch_keep, eager, replay;
      std::vector<double> in_eager[2], in_replay[2];   // per child: encore / libtorch of the same process
      for (int p = 0; p < procs; ++p) {
        for (int k = 0; k < 2; ++k) {
          const bool keep = (p + k) % 2 == 1;   // default first in even rounds, keep first in odd ones
          Row r;
          if (!run_child(self, row, threads, keep ? "keep" : "default", quick, r)) {
            std::fprintf(stderr, "%s at %d threads (%s): the child failed\n", row.c_str(), threads,
                         keep ? "keep" : "default");
            return 1;
          }
          (keep ? torch_keep : torch_default).push_back(r.torch_ms);
          eager.push_back(r.eager_ms);
          replay.push_back(r.replay_ms);
          in_eager[keep].push_back(r.eager_ms / r.torch_ms);
          in_replay[keep].push_back(r.replay_ms / r.torch_ms);
        }
      }
      const double td = encore::median(torch_default), tk = encore::median(torch_keep);
      const double best = std::min(td, tk), me = encore::median(eager), mr = encore::median(replay);
      const int b = tk < td ? 1 : 0;   // libtorch's better setting
      std::printf("| %s | %d | %.4g | %.4g | %.4g | %.4g | %.2fx | %.2fx | %.2fx / %.2fx |\n", row.c_str(), threads, td,
                  tk, me, mr, me / best, mr / best, encore::median(in_eager[b]), encore::median(in_replay[b]));
      std::fflush(stdout);
    }
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const std::vector<std::string> all = {"chain20",
                                        "mlp_784_128_10_b32",
                                        "mlp_784_512_512_10_b128",
                                        "mlp_1024_4096_4096_1024_b64",
                                        "block_b8_t64_c256_h4",
                                        "demo_gpt_2x64_b16_t32",
                                        "cnn_resnet3x16_b32_3x32x32"};
  bool quick = false;
  std::string malloc_setting;   // empty: the driver
  int only_threads = 0, procs = 3;
  std::vector<std::string> rows;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--quick") {
      quick = true;
    } else if (arg == "--machine") {
      encore::machine_lines = true;
    } else if (arg.rfind("--malloc=", 0) == 0) {
      malloc_setting = arg.substr(9);
      if (malloc_setting != "default" && malloc_setting != "keep") {
        std::fprintf(stderr, "--malloc takes default or keep, not %s\n", malloc_setting.c_str());
        return 2;
      }
    } else if (arg.rfind("--threads=", 0) == 0) {
      only_threads = std::atoi(arg.c_str() + 10);
      if (arg.substr(10) != "1" && arg.substr(10) != "2") {   // the rows run at 1 and 2 threads only
        std::fprintf(stderr, "--threads takes 1 or 2, not %s\n", arg.c_str() + 10);
        return 2;
      }
    } else if (arg.rfind("--procs=", 0) == 0) {
      procs = std::atoi(arg.c_str() + 8);
      if (procs < 1 || procs > 1000 || arg.substr(8) != std::to_string(procs)) {
        std::fprintf(stderr, "--procs takes a count in 1..1000, not %s\n", arg.c_str() + 8);
        return 2;
      }
    } else if (arg == "--help" || arg == "-h") {
      std::printf("usage: %s [--quick] [--procs=N] [--malloc=default|keep [--threads=N]] [WORKLOAD...]\n"
                  "workloads (all when none is named):\n",
                  argv[0]);
      for (const std::string& r : all) std::printf("  %s\n", r.c_str());
      return 0;
    } else if (std::find(all.begin(), all.end(), arg) != all.end()) {
      rows.push_back(arg);
    } else {
      std::fprintf(stderr, "unknown workload or flag: %s (see --help)\n", arg.c_str());
      return 2;
    }
  }
  if (rows.empty()) rows = all;
  if (malloc_setting.empty()) {   // the children run this binary (resolved here: popen goes through sh)
    std::error_code ec;
    const std::filesystem::path self = std::filesystem::read_symlink("/proc/self/exe", ec);
    return drive(ec ? std::string(argv[0]) : self.string(), rows, quick, procs);
  }
  if (malloc_setting == "keep") {   // before libtorch or encore allocates anything big
    mallopt(M_MMAP_MAX, 0);
    mallopt(M_TRIM_THRESHOLD, static_cast<int>(std::numeric_limits<int>::max()));
  }
  if (!encore::machine_lines) {
    std::printf("| workload | threads | libtorch ms | encore eager ms | encore replay ms | eager / libtorch | "
                "replay / libtorch | rounds |\n|---|---|---|---|---|---|---|---|\n");
  }
  for (int threads : {1, 2}) {
    if (only_threads != 0 && threads != only_threads) continue;
    encore::set_threads(threads);
    for (const std::string& row : rows) encore::run_row(row, threads, quick ? 200.0 : 1000.0);
  }
  return 0;
}
