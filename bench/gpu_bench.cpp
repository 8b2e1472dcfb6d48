// GPU benchmarks (issue 6): launch overhead and bf16 training steps, eager
// against captured-and-replayed, every ratio from figures measured in the same
// run. Built only with the CUDA backend; without a usable GPU it prints
// "no GPU" and exits 0 (1 with ENCORE_REQUIRE_GPU=1).
//
//   build/bench/gpu_bench --benchmark_counters_tabular=true --benchmark_filter='^BM_(LaunchChain|TrainStep)/'
//   build/bench/gpu_bench --benchmark_filter='^BM_TrainStepBusy/'   # CUPTI: a process of its own
//   bench/gpu-check build          # runs both beside the CUDA tests and the PyTorch peers
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
// that does not read the loss every step); median of at least 5 such batches
// (about 0.2 s of them, at most 50) after an untimed one.
//   eager_ms, replay_ms, speedup = eager_ms / replay_ms
//   pdl_ms                       the same for a graph captured with CaptureOptions::programmatic_launch;
//                                pdl_gain = replay_ms / pdl_ms (> 1: programmatic launch helps)
//   fed_ms                       a replay preceded by host-to-device copies of the batch (x, y), as a
//                                training loop feeding batches from host memory does; fed_ms / replay_ms
//                                is what feeding costs (the copies are staged: no wait for the GPU)
//   nodes                        nodes of the captured graph; capture_ms as above
//
// BM_TrainStepBusy/<model>: GPU ms per step from CUPTI activity records (union
// of kernel, memset and memcpy intervals) of one traced batch each:
// eager_gpu_ms, replay_gpu_ms, pdl_gpu_ms, and kernels (activities per
// replayed step). The replayed graphs are captured after tracing began, so the
// figures do not depend on whether CUPTI sees graphs instantiated before it
// was enabled. Run it in a process of its own, after BM_TrainStep: CUPTI, once
// attached, slows every later timing of its process. bench/gpu-check does, and
// divides: busy = gpu ms / the untraced wall ms of BM_TrainStep (issue target:
// replay >= 0.95). Without CUPTI (a sandbox that refuses it) the benchmark
// reports the error instead.
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
#include <optional>
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
// collection at a time; start(), reset() and stop() are called from the
// benchmark thread, the buffer callbacks from CUPTI's. Only BM_TrainStepBusy
// uses it, in its own process (bench/gpu-check runs it apart): CUPTI, once
// attached, slows everything after it.
class GpuActivity {
 public:
  [[nodiscard]] static absl::Status start() {
    static const absl::Status registered = check(
        cuptiActivityRegisterCallbacks(&buffer_requested, &buffer_completed), "cuptiActivityRegisterCallbacks");
    if (!registered.ok()) return registered;
    {
      std::lock_guard<std::mutex> lock(state().mu);
      state().intervals.clear();
    }
    for (size_t i = 0; i < std::size(kKinds); ++i) {
      absl::Status s = check(cuptiActivityEnable(kKinds[i]), "cuptiActivityEnable");
      if (!s.ok()) {
        for (size_t j = 0; j < i; ++j) (void)cuptiActivityDisable(kKinds[j]);
        return s;
      }
    }
    return absl::OkStatus();
  }

  // Synchronizes the GPU, flushes the records and drops them, still collecting
  // (e.g. after a capture, whose graph CUPTI saw instantiated, before its replays).
  // On failure collection stops: stop() need not follow.
  [[nodiscard]] static absl::Status reset() {
    absl::Status s = status_of([] { sync(); });
    if (s.ok()) s = check(cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED), "cuptiActivityFlushAll");
    if (!s.ok()) {
      disable();
      return s;
    }
    std::lock_guard<std::mutex> lock(state().mu);
    state().intervals.clear();
    return absl::OkStatus();
  }

  // Synchronizes the GPU, flushes the records and stops collecting (also when
  // the synchronize or the flush fails).
  [[nodiscard]] static absl::StatusOr<ActivityTotals> stop() {
    absl::Status s = status_of([] { sync(); });
    if (s.ok()) s = check(cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED), "cuptiActivityFlushAll");
    disable();
    if (!s.ok()) return s;
    std::lock_guard<std::mutex> lock(state().mu);
    return totals(state().intervals);
  }

 private:
  static constexpr CUpti_ActivityKind kKinds[] = {CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL, CUPTI_ACTIVITY_KIND_MEMSET,
                                                   CUPTI_ACTIVITY_KIND_MEMCPY};
  static constexpr size_t kBufferBytes = 8 << 20;

  struct State {
    std::mutex mu;
    std::vector<std::pair<uint64_t, uint64_t>> intervals;   // [start, end) ns of each record
  };
  // Never destroyed: CUPTI may deliver a last buffer while the process exits.
  static State& state() {
    static State* s = new State();
    return *s;
  }

  static void disable() {
    for (CUpti_ActivityKind kind : kKinds) (void)cuptiActivityDisable(kind);
  }

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
    std::lock_guard<std::mutex> lock(state().mu);
    CUpti_Activity* rec = nullptr;
    while (cuptiActivityGetNextRecord(buffer, valid, &rec) == CUPTI_SUCCESS) {
      switch (rec->kind) {
        case CUPTI_ACTIVITY_KIND_KERNEL:
        case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL: {
          const auto* k = reinterpret_cast<const CUpti_ActivityKernel10*>(rec);
          state().intervals.emplace_back(k->start, k->end);
          break;
        }
        case CUPTI_ACTIVITY_KIND_MEMSET: {
          const auto* m = reinterpret_cast<const CUpti_ActivityMemset4*>(rec);
          state().intervals.emplace_back(m->start, m->end);
          break;
        }
        case CUPTI_ACTIVITY_KIND_MEMCPY: {
          const auto* m = reinterpret_cast<const CUpti_ActivityMemcpy6*>(rec);
          state().intervals.emplace_back(m->start, m->end);
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
};

// ---- launch overhead ----

// A replay inside a timed batch that keeps the first refusal: a refused
// replay launches nothing and would make the step look free.
struct Replays {
  absl::Status refused;
  void operator()(Graph& g) {
    absl::Status s = g.replay();
    if (!s.ok() && refused.ok()) refused = s;
  }
};

void launch_chain(benchmark::State& state) {
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
  Replays replay;
  const double replay_ms = median_ms([&] { replay(*g); sync(); });
  if (!replay.refused.ok()) return state.SkipWithError(("replay: " + replay.refused.ToString()).c_str());
  // The replayed chain must have added 1 n times to zeros: a wrong graph fails here.
  const float got = g->output(0).to_vector<float>()[0];
  if (got != static_cast<float>(n)) {
    return state.SkipWithError(absl::StrFormat("replayed chain gave %g, expected %d", got, n).c_str());
  }
  // The chain captured with programmatic dependent launch: each kernel launches
  // while the one before it finishes. Checked the same way.
  absl::StatusOr<Graph> pdl = capture(chain, {.programmatic_launch = true});
  if (!pdl.ok()) return state.SkipWithError(("capture (programmatic launch): " + pdl.status().ToString()).c_str());
  const double pdl_ms = median_ms([&] { replay(*pdl); sync(); });
  if (!replay.refused.ok()) {
    return state.SkipWithError(("replay (programmatic launch): " + replay.refused.ToString()).c_str());
  }
  const float pdl_got = pdl->output(0).to_vector<float>()[0];
  if (pdl_got != static_cast<float>(n)) {
    return state.SkipWithError(absl::StrFormat("programmatic-launch chain gave %g, expected %d", pdl_got, n).c_str());
  }
  for (auto _ : state) {
    replay(*g);
    sync();
  }
  if (!replay.refused.ok()) return state.SkipWithError(("replay: " + replay.refused.ToString()).c_str());
  state.counters["eager_us_per_kernel"] = eager_ms * 1e3 / n;
  state.counters["replay_us_per_kernel"] = replay_ms * 1e3 / n;
  state.counters["pdl_us_per_kernel"] = pdl_ms * 1e3 / n;
  state.counters["speedup"] = eager_ms / replay_ms;
  state.counters["capture_ms"] = capture_ms;
  state.counters["instantiate_ms"] = g->stats().capture_ms;
  state.counters["instantiate_us_per_node"] = g->stats().capture_ms * 1e3 / n;
  state.counters["nodes"] = static_cast<double>(g->stats().kernels);
}
void BM_LaunchChain(benchmark::State& state) {
  const absl::Status s = status_of([&] { launch_chain(state); });
  if (!s.ok()) state.SkipWithError(s.ToString().c_str());
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

void train_step(benchmark::State& state, const MakeWorkload& make) {
  std::unique_ptr<tools::Workload> w = on_gpu_bf16(make());
  const double eager_ms = ms_per_step([&] { w->step(); });
  const double t0 = now_ms();
  absl::StatusOr<Graph> g = capture([&] { return w->step(); });
  const double capture_ms = now_ms() - t0;
  if (!g.ok()) return state.SkipWithError(("capture: " + g.status().ToString()).c_str());
  Replays replay;
  const double replay_ms = ms_per_step([&] { replay(*g); });
  if (!replay.refused.ok()) return state.SkipWithError(("replay: " + replay.refused.ToString()).c_str());
  const float loss = g->output(0).item<float>();
  if (!std::isfinite(loss)) return state.SkipWithError(absl::StrFormat("replayed loss is %g", loss).c_str());
  // The same step captured with programmatic dependent launch, timed right after.
  absl::StatusOr<Graph> pdl = capture([&] { return w->step(); }, {.programmatic_launch = true});
  if (!pdl.ok()) return state.SkipWithError(("capture (programmatic launch): " + pdl.status().ToString()).c_str());
  const double pdl_ms = ms_per_step([&] { replay(*pdl); });
  // A training loop that feeds each step a batch from host memory (the same
  // one each time here): two host-to-device copies, then the replay.
  const Tensor host_x = w->x.to(kCPU), host_y = w->y.to(kCPU);
  const double fed_ms = ms_per_step([&] {
    w->x.copy_(host_x);
    w->y.copy_(host_y);
    replay(*g);
  });
  for (auto _ : state) {
    for (int i = 0; i < kStepsPerBatch; ++i) replay(*g);
    sync();
  }
  if (!replay.refused.ok()) return state.SkipWithError(("replay: " + replay.refused.ToString()).c_str());
  state.counters["eager_ms"] = eager_ms;
  state.counters["replay_ms"] = replay_ms;
  state.counters["speedup"] = eager_ms / replay_ms;
  state.counters["capture_ms"] = capture_ms;
  state.counters["nodes"] = static_cast<double>(g->stats().kernels);
  state.counters["loss"] = loss;
  state.counters["pdl_ms"] = pdl_ms;
  state.counters["pdl_gain"] = replay_ms / pdl_ms;
  state.counters["fed_ms"] = fed_ms;
}

void BM_TrainStep(benchmark::State& state, MakeWorkload make) {
  const absl::Status s = status_of([&] { train_step(state, make); });
  if (!s.ok()) state.SkipWithError(s.ToString().c_str());
}

// GPU ms per step (union of activity intervals) and records per step of one
// traced batch of `step`, which `prepare` (run while tracing, then dropped)
// may set up, e.g. a capture whose graph CUPTI must see instantiated.
absl::StatusOr<ActivityTotals> traced_per_step(const std::function<void()>& prepare,
                                               const std::function<void()>& step) {
  sync();
  absl::Status s = GpuActivity::start();
  if (!s.ok()) return s;
  absl::Status run = status_of(prepare);
  if (run.ok()) {
    run = GpuActivity::reset();
    if (!run.ok()) return run;   // reset() stopped collecting
  }
  if (run.ok()) run = status_of([&] {
    for (int i = 0; i < kStepsPerBatch; ++i) step();
  });
  absl::StatusOr<ActivityTotals> t = GpuActivity::stop();
  if (!run.ok()) return run;
  if (!t.ok()) return t;
  t->busy_ms /= kStepsPerBatch;
  t->records /= kStepsPerBatch;
  return t;
}

// GPU time per step from CUPTI of eager steps, replays and programmatic-launch
// replays; the wall times to divide by come from BM_TrainStep of the same
// model, which bench/gpu-check runs in another process (CUPTI slows a process
// it is attached to for good).
void train_step_busy(benchmark::State& state, const MakeWorkload& make) {
  std::unique_ptr<tools::Workload> w = on_gpu_bf16(make());
  for (int i = 0; i < 3; ++i) w->step();   // lazy state, cuBLAS, the caching allocator
  std::optional<Graph> graph;
  Replays replay;
  auto traced_replays = [&](const CaptureOptions& options) {
    return traced_per_step(
        [&] {
          absl::StatusOr<Graph> g = capture([&] { return w->step(); }, options);
          if (!g.ok()) throw Error(g.status());
          graph = std::move(*g);
        },
        [&] { replay(*graph); });
  };
  const absl::StatusOr<ActivityTotals> eager = traced_per_step([] {}, [&] { w->step(); });
  const absl::StatusOr<ActivityTotals> plain = traced_replays({});
  const absl::StatusOr<ActivityTotals> pdl = traced_replays({.programmatic_launch = true});
  for (auto _ : state) {
  }
  for (const absl::StatusOr<ActivityTotals>* t : {&eager, &plain, &pdl}) {
    if (!t->ok()) return state.SkipWithError(t->status().ToString().c_str());
  }
  if (!replay.refused.ok()) return state.SkipWithError(("replay: " + replay.refused.ToString()).c_str());
  if (plain->records == 0 || pdl->records == 0) {
    state.SetLabel("CUPTI saw no activity in the replays: no busy figures");
    return;
  }
  state.counters["eager_gpu_ms"] = eager->busy_ms;
  state.counters["replay_gpu_ms"] = plain->busy_ms;
  state.counters["pdl_gpu_ms"] = pdl->busy_ms;
  state.counters["kernels"] = static_cast<double>(plain->records);
}

void BM_TrainStepBusy(benchmark::State& state, MakeWorkload make) {
  const absl::Status s = status_of([&] { train_step_busy(state, make); });
  if (!s.ok()) state.SkipWithError(s.ToString().c_str());
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
const nn::GptConfig kBlock{.vocab_size = 64, .block_size = 64, .n_layer = 1, .n_head = 4, .n_embd = 256};
BENCHMARK_CAPTURE(BM_TrainStep, mlp_784_128_10_b32, mlp_of({784, 128, 10}, 32))
    ->Iterations(5)->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_TrainStep, block_b8_t64_c256_h4, gpt_of(kBlock, 8))
    ->Iterations(5)->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_TrainStep, demo_gpt_2x64_b16_t32, gpt_of(tools::GptSpec{}.config, tools::GptSpec{}.batch))
    ->Iterations(5)->UseRealTime()->Unit(benchmark::kMillisecond);
// Registered last, and run by bench/gpu-check in a process of their own.
BENCHMARK_CAPTURE(BM_TrainStepBusy, mlp_784_128_10_b32, mlp_of({784, 128, 10}, 32))->Iterations(1)->UseRealTime();
BENCHMARK_CAPTURE(BM_TrainStepBusy, block_b8_t64_c256_h4, gpt_of(kBlock, 8))->Iterations(1)->UseRealTime();
BENCHMARK_CAPTURE(BM_TrainStepBusy, demo_gpt_2x64_b16_t32, gpt_of(tools::GptSpec{}.config, tools::GptSpec{}.batch))
    ->Iterations(1)->UseRealTime();

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
