// GPU benchmarks (issue 6): launch overhead and bf16 training steps, eager
// against captured-and-replayed, every ratio from figures measured in the same
// run. Built only with the CUDA backend; without a usable GPU it prints
// "no GPU" and exits 0 (1 with ENCORE_REQUIRE_GPU=1).
//
//   build/bench/gpu_bench --benchmark_counters_tabular=true
//   bench/gpu-check build          # runs this beside the CUDA tests and the PyTorch peers
//
// BM_LaunchChain/N: x = add(x, 1) N times on a 256-element f32 CUDA tensor
// under NoGradGuard. Every timed run ends with a synchronize. Counters (medians
// of timed runs, microseconds unless named _ms):
//   eager_us_per_kernel   one eager chain's wall time / N
//   replay_us_per_kernel  one replay()'s wall time / N (replay + synchronize)
//   speedup               eager / replay
//   pdl_us_per_kernel     the same as replay_us_per_kernel for the chain captured with
//                         CaptureOptions::programmatic_launch
//   capture_ms            wall time of encore::capture() (2 eager warm-ups, plan, stream capture,
//                         cudaGraphInstantiate, upload); instantiate_ms = its capture phase alone
//                         (stream capture + instantiate + upload), instantiate_us_per_node = that / N
// The benchmark's own time column is one replay + synchronize.
//
// BM_TrainStep/<model>: bf16 parameters (Module::to(kBFloat16)), AdamW, static
// inputs on the GPU; the models of tools/workloads.h. A step's time is the wall
// time of 20 back-to-back steps ended by one synchronize, / 20 (a training loop
// that does not read the loss every step); median of 7 such batches.
//   eager_ms, replay_ms, speedup = eager_ms / replay_ms
//   eager_gpu_ms, replay_gpu_ms  time per step the GPU spent in kernels, memsets and memcpys
//                                (union of their CUPTI activity intervals), from a separate traced batch
//   eager_busy, replay_busy      gpu_ms / wall ms of the untraced batches (issue target: replay >= 0.95)
//   kernels                      GPU activities per replayed step (CUPTI records / steps)
//   fed_ms                       a replay preceded by host-to-device copies of the batch (x, y), as a
//                                training loop feeding batches from host memory does; fed_ms / replay_ms
//                                is what feeding costs (the copies are staged: no wait for the GPU)
//   pdl_ms, pdl_busy             the same for a graph captured with CaptureOptions::programmatic_launch;
//                                pdl_gain = replay_ms / pdl_ms (> 1: programmatic launch helps)
//   nodes                        nodes of the captured graph; capture_ms as above
// The traced batches replay a second graph captured after tracing began, so
// the figures do not depend on whether CUPTI sees graphs instantiated before
// it was enabled. Without CUPTI (e.g. a sandbox that refuses it) the _gpu_ms
// and _busy counters are absent and the label says why.
#include <benchmark/benchmark.h>
#include <cupti.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "encore/encore.h"
#include "src/backends/cuda/runtime.h"
#include "src/core/stream.h"
#include "tools/workloads.h"

namespace encore {
namespace {

constexpr Device kGpu = Device::cuda(0);

double now_ms() {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

void sync() { current_stream(kGpu).synchronize(); }

// Median wall time (ms) of fn() over at least 5 runs and about 0.2 s (at most
// 50 runs), after one untimed run. fn must end with a synchronize.
template <typename F>
double median_ms(F&& fn) {
  fn();
  std::vector<double> t;
  const double start = now_ms();
  while (t.size() < 5 || (now_ms() - start < 200.0 && t.size() < 50)) {
    const double t0 = now_ms();
    fn();
    t.push_back(now_ms() - t0);
  }
  std::nth_element(t.begin(), t.begin() + t.size() / 2, t.end());
  return t[t.size() / 2];
}

// ---- CUPTI activity: time the GPU spent working ----

// Totals of the activity records collected between GpuActivity::start() and stop().
struct ActivityTotals {
  int64_t records = 0;     // kernels, memsets and memcpys
  double busy_ms = 0;      // union of their [start, end) intervals
};

// Collects kernel, memset and memcpy activity records through CUPTI. One
// collection at a time; start() and stop() are called from the benchmark thread,
// the buffer callbacks from CUPTI's.
class GpuActivity {
 public:
  [[nodiscard]] static absl::Status start() {
    static const absl::Status registered = check(
        cuptiActivityRegisterCallbacks(&buffer_requested, &buffer_completed), "cuptiActivityRegisterCallbacks");
    if (!registered.ok()) return registered;
    {
      std::lock_guard<std::mutex> lock(mu_);
      intervals_.clear();
    }
    for (CUpti_ActivityKind kind : kKinds) {
      absl::Status s = check(cuptiActivityEnable(kind), "cuptiActivityEnable");
      if (!s.ok()) return s;
    }
    return absl::OkStatus();
  }

  // Synchronizes the GPU, flushes the records and stops collecting.
  [[nodiscard]] static absl::StatusOr<ActivityTotals> stop() {
    sync();
    absl::Status flushed = check(cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED), "cuptiActivityFlushAll");
    for (CUpti_ActivityKind kind : kKinds) (void)cuptiActivityDisable(kind);
    if (!flushed.ok()) return flushed;
    std::lock_guard<std::mutex> lock(mu_);
    return totals(intervals_);
  }

 private:
  static constexpr CUpti_ActivityKind kKinds[] = {CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL, CUPTI_ACTIVITY_KIND_MEMSET,
                                                   CUPTI_ACTIVITY_KIND_MEMCPY};
  static constexpr size_t kBufferBytes = 8 << 20;

  static absl::Status check(CUptiResult r, const char* what) {
    if (r == CUPTI_SUCCESS) return absl::OkStatus();
    const char* msg = "unknown CUPTI error";
    cuptiGetResultString(r, &msg);
    return absl::UnavailableError(absl::StrFormat("%s: %s", what, msg));
  }

  static void CUPTIAPI buffer_requested(uint8_t** buffer, size_t* size, size_t* max_records) {
    *buffer = static_cast<uint8_t*>(std::aligned_alloc(8, kBufferBytes));
    *size = kBufferBytes;
    *max_records = 0;
  }

  static void CUPTIAPI buffer_completed(CUcontext, uint32_t, uint8_t* buffer, size_t, size_t valid) {
    std::lock_guard<std::mutex> lock(mu_);
    CUpti_Activity* rec = nullptr;
    while (cuptiActivityGetNextRecord(buffer, valid, &rec) == CUPTI_SUCCESS) {
      switch (rec->kind) {
        case CUPTI_ACTIVITY_KIND_KERNEL:
        case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL: {
          const auto* k = reinterpret_cast<const CUpti_ActivityKernel10*>(rec);
          intervals_.emplace_back(k->start, k->end);
          break;
        }
        case CUPTI_ACTIVITY_KIND_MEMSET: {
          const auto* m = reinterpret_cast<const CUpti_ActivityMemset4*>(rec);
          intervals_.emplace_back(m->start, m->end);
          break;
        }
        case CUPTI_ACTIVITY_KIND_MEMCPY: {
          const auto* m = reinterpret_cast<const CUpti_ActivityMemcpy6*>(rec);
          intervals_.emplace_back(m->start, m->end);
          break;
        }
        default:
          break;
      }
    }
    std::free(buffer);
  }

  // Count and union length of [start, end) intervals in ns.
  static ActivityTotals totals(std::vector<std::pair<uint64_t, uint64_t>> iv) {
    ActivityTotals t;
    t.records = static_cast<int64_t>(iv.size());
    std::sort(iv.begin(), iv.end());
    uint64_t covered = 0, lo = 0, hi = 0;
    for (size_t i = 0; i < iv.size(); ++i) {
      if (i == 0 || iv[i].first > hi) {
        covered += hi - lo;
        lo = iv[i].first;
        hi = iv[i].second;
      } else {
        hi = std::max(hi, iv[i].second);
      }
    }
    covered += hi - lo;
    t.busy_ms = static_cast<double>(covered) * 1e-6;
    return t;
  }

  static inline std::mutex mu_;
  static inline std::vector<std::pair<uint64_t, uint64_t>> intervals_;
};

// ---- launch overhead ----

void BM_LaunchChain(benchmark::State& state) {
  const int64_t n = state.range(0);
  Tensor x0 = zeros({256}, kFloat32, kGpu);
  auto chain = [&] {
    NoGradGuard no_grad;
    Tensor x = x0;
    for (int64_t i = 0; i < n; ++i) x = add(x, 1.0);
    return std::vector<Tensor>{x};
  };
  double eager_ms = 0;
  absl::Status eager = status_of([&] { eager_ms = median_ms([&] { chain(); sync(); }); });
  if (!eager.ok()) return state.SkipWithError(("eager chain: " + eager.ToString()).c_str());

  const double t0 = now_ms();
  absl::StatusOr<Graph> g = capture(chain);
  const double capture_ms = now_ms() - t0;
  if (!g.ok()) return state.SkipWithError(("capture: " + g.status().ToString()).c_str());
  const double replay_ms = median_ms([&] { (void)g->replay(); sync(); });
  // The replayed chain must have added 1 n times to zeros: a wrong graph fails here.
  const float got = g->output(0).to_vector<float>()[0];
  if (got != static_cast<float>(n)) {
    return state.SkipWithError(absl::StrFormat("replayed chain gave %g, expected %d", got, n).c_str());
  }
  // The chain captured with programmatic dependent launch: each kernel launches
  // while the one before it finishes. Checked the same way.
  absl::StatusOr<Graph> pdl = capture(chain, {.programmatic_launch = true});
  if (!pdl.ok()) return state.SkipWithError(("capture (programmatic launch): " + pdl.status().ToString()).c_str());
  const double pdl_ms = median_ms([&] { (void)pdl->replay(); sync(); });
  const float pdl_got = pdl->output(0).to_vector<float>()[0];
  if (pdl_got != static_cast<float>(n)) {
    return state.SkipWithError(absl::StrFormat("programmatic-launch chain gave %g, expected %d", pdl_got, n).c_str());
  }
  for (auto _ : state) {
    absl::Status s = g->replay();
    sync();
    if (!s.ok()) return state.SkipWithError(s.ToString().c_str());
  }
  state.counters["eager_us_per_kernel"] = eager_ms * 1e3 / n;
  state.counters["replay_us_per_kernel"] = replay_ms * 1e3 / n;
  state.counters["pdl_us_per_kernel"] = pdl_ms * 1e3 / n;
  state.counters["speedup"] = eager_ms / replay_ms;
  state.counters["capture_ms"] = capture_ms;
  state.counters["instantiate_ms"] = g->stats().capture_ms;
  state.counters["instantiate_us_per_node"] = g->stats().capture_ms * 1e3 / n;
  state.counters["nodes"] = static_cast<double>(g->stats().kernels);
}
BENCHMARK(BM_LaunchChain)->Arg(10)->Arg(100)->Arg(1000)->Arg(10000)->Iterations(20)->UseRealTime()
    ->Unit(benchmark::kMicrosecond);

// ---- training steps ----

using MakeWorkload = std::function<std::unique_ptr<tools::Workload>()>;

// Moves a workload to the GPU in bf16: parameters moved and converted in place, a
// new AdamW with the same options (Module::to(DType) must precede the
// optimizer), float inputs converted, integer inputs (ids, labels) kept.
std::unique_ptr<tools::Workload> on_gpu_bf16(std::unique_ptr<tools::Workload> w) {
  const optim::AdamWOptions options = dynamic_cast<optim::AdamW&>(*w->opt).options();
  w->model->to(kGpu);
  w->model->to(kBFloat16);
  w->opt = std::make_unique<optim::AdamW>(w->model->parameters(), options);
  w->x = (is_floating(w->x.dtype()) ? w->x.to(kBFloat16) : w->x).to(kGpu);
  w->y = w->y.to(kGpu);
  return w;
}

constexpr int kStepsPerBatch = 20;

// Wall ms per step of `step` run kStepsPerBatch times back to back, then synchronized.
template <typename F>
double ms_per_step(F&& step) {
  return median_ms([&] {
           for (int i = 0; i < kStepsPerBatch; ++i) step();
           sync();
         }) /
         kStepsPerBatch;
}

// GPU busy ms per step and activity records per step of one traced batch.
template <typename F>
absl::StatusOr<ActivityTotals> traced_per_step(F&& step) {
  sync();
  absl::Status started = GpuActivity::start();
  if (!started.ok()) return started;
  for (int i = 0; i < kStepsPerBatch; ++i) step();
  absl::StatusOr<ActivityTotals> t = GpuActivity::stop();
  if (!t.ok()) return t;
  t->busy_ms /= kStepsPerBatch;
  t->records /= kStepsPerBatch;
  return t;
}

// CUPTI figures of replays of a graph captured after tracing began (so they
// do not depend on whether CUPTI sees graphs instantiated before it was enabled).
absl::StatusOr<ActivityTotals> traced_replays(tools::Workload& w, const CaptureOptions& options) {
  absl::Status started = GpuActivity::start();
  if (!started.ok()) return started;
  absl::StatusOr<Graph> g = capture([&] { return w.step(); }, options);
  (void)GpuActivity::stop();
  if (!g.ok()) return absl::Status(g.status().code(), "traced capture: " + std::string(g.status().message()));
  return traced_per_step([&] { (void)g->replay(); });
}

// Sets the _gpu_ms, _busy and kernels counters of eager steps, replays and
// programmatic-launch replays, or the label saying why there are none.
void traced_counters(benchmark::State& state, tools::Workload& w, double eager_ms, double replay_ms,
                     double pdl_ms) {
  absl::StatusOr<ActivityTotals> eager = traced_per_step([&] { w.step(); });
  absl::StatusOr<ActivityTotals> replay = traced_replays(w, {});
  absl::StatusOr<ActivityTotals> pdl = traced_replays(w, {.programmatic_launch = true});
  for (const absl::StatusOr<ActivityTotals>* t : {&eager, &replay, &pdl}) {
    if (t->ok()) continue;
    if (absl::StartsWith(t->status().message(), "traced capture")) {
      return state.SkipWithError(t->status().ToString().c_str());
    }
    state.SetLabel("no CUPTI: " + std::string(t->status().message()));
    return;
  }
  state.counters["eager_gpu_ms"] = eager->busy_ms;
  state.counters["replay_gpu_ms"] = replay->busy_ms;
  state.counters["eager_busy"] = eager->busy_ms / eager_ms;
  state.counters["replay_busy"] = replay->busy_ms / replay_ms;
  state.counters["pdl_busy"] = pdl->busy_ms / pdl_ms;
  state.counters["kernels"] = static_cast<double>(replay->records);
}

void BM_TrainStep(benchmark::State& state, MakeWorkload make) {
  std::unique_ptr<tools::Workload> w;
  double eager_ms = 0;
  absl::Status eager = status_of([&] {
    w = on_gpu_bf16(make());
    eager_ms = ms_per_step([&] { w->step(); });
  });
  if (!eager.ok()) return state.SkipWithError(("eager step: " + eager.ToString()).c_str());
  const double t0 = now_ms();
  absl::StatusOr<Graph> g = capture([&] { return w->step(); });
  const double capture_ms = now_ms() - t0;
  if (!g.ok()) return state.SkipWithError(("capture: " + g.status().ToString()).c_str());
  const double replay_ms = ms_per_step([&] { (void)g->replay(); });
  const float loss = g->output(0).item<float>();
  if (!std::isfinite(loss)) return state.SkipWithError(absl::StrFormat("replayed loss is %g", loss).c_str());
  // The same step captured with programmatic dependent launch, timed right after.
  absl::StatusOr<Graph> pdl = capture([&] { return w->step(); }, {.programmatic_launch = true});
  if (!pdl.ok()) return state.SkipWithError(("capture (programmatic launch): " + pdl.status().ToString()).c_str());
  const double pdl_ms = ms_per_step([&] { (void)pdl->replay(); });
  // A training loop that feeds each step a batch from host memory (the same
  // one each time here): two host-to-device copies, then the replay.
  const Tensor host_x = w->x.to(kCPU), host_y = w->y.to(kCPU);
  const double fed_ms = ms_per_step([&] {
    w->x.copy_(host_x);
    w->y.copy_(host_y);
    (void)g->replay();
  });
  for (auto _ : state) {
    for (int i = 0; i < kStepsPerBatch; ++i) (void)g->replay();
    sync();
  }
  state.counters["eager_ms"] = eager_ms;
  state.counters["replay_ms"] = replay_ms;
  state.counters["speedup"] = eager_ms / replay_ms;
  state.counters["capture_ms"] = capture_ms;
  state.counters["nodes"] = static_cast<double>(g->stats().kernels);
  state.counters["loss"] = loss;
  state.counters["pdl_ms"] = pdl_ms;
  state.counters["pdl_gain"] = replay_ms / pdl_ms;
  state.counters["fed_ms"] = fed_ms;
  traced_counters(state, *w, eager_ms, replay_ms, pdl_ms);
}

MakeWorkload mlp_of(std::vector<int64_t> widths, int64_t batch) {
  return [=] { return tools::make_mlp({.widths = widths, .batch = batch}); };
}

// Built on the GPU: Module::to(Device) moves parameters only, and the
// attention mask is a plain member tensor made on the config's device.
MakeWorkload gpt_of(nn::GptConfig config, int64_t batch) {
  config.device = kGpu;
  return [=] { return tools::make_gpt({.config = config, .batch = batch}); };
}

// The models of the issue: the small MLP, the transformer block (one pre-norm
// block of width 256, 4 heads, MLP 1024, B 8, T 64, with vocab-64 embeddings
// and tied head around it) and the demo GPT of examples/train_gpt.cpp
// (tools::GptSpec's defaults: vocab 65, T 32, 2 layers, 4 heads, width 64, B 16).
BENCHMARK_CAPTURE(BM_TrainStep, mlp_784_128_10_b32, mlp_of({784, 128, 10}, 32))
    ->Iterations(5)->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_TrainStep, block_b8_t64_c256_h4,
                  gpt_of({.vocab_size = 64, .block_size = 64, .n_layer = 1, .n_head = 4, .n_embd = 256}, 8))
    ->Iterations(5)->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_TrainStep, demo_gpt_2x64_b16_t32, gpt_of(tools::GptSpec{}.config, tools::GptSpec{}.batch))
    ->Iterations(5)->UseRealTime()->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace encore

int main(int argc, char** argv) {
  bool listing = false;   // --benchmark_list_tests works without a GPU
  for (int i = 1; i < argc; ++i) listing = listing || std::strncmp(argv[i], "--benchmark_list_tests", 22) == 0;
  benchmark::Initialize(&argc, argv);
  if (!listing && !encore::cuda_available()) {
    const absl::StatusOr<int> n = encore::cuda::device_count();
    std::fprintf(stderr, "gpu_bench: no GPU (%s); nothing measured\n",
                 n.ok() ? "no CUDA device answered" : std::string(n.status().message()).c_str());
    const char* require = std::getenv("ENCORE_REQUIRE_GPU");
    return require != nullptr && std::strcmp(require, "1") == 0 ? 1 : 0;
  }
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
