// Data-parallel training steps on the CPU (issue 22), run under mpirun:
//
//   mpirun -np 1 build/bench/dist_bench        # one rank: the baseline
//   mpirun -np 2 --oversubscribe build/bench/dist_bench
//   (OMP_NUM_THREADS=1 per rank; rank 0 prints one JSON line)
//
// One MLP step (zero_grad, forward, backward with DistributedDataParallel's
// bucketed all-reduces, AdamW), local batch fixed per rank. Figures, each
// the median of --reps windows of --steps steps, the four kinds timed in
// turn within each round, all in this run:
//   eager_ms        an eager step with the all-reduces
//   local_ms        the same step under no_sync() (the compute alone, no communication)
//   comm_ms         the step's all-reduces alone, blocking, one bucket after the other
//   replay_ms       the step captured (capture()) and replayed, collectives as graph nodes
//   hidden          1 - blocked / in flight, over the eager steps' all-reduces
//                   (src/dist/engine.h's clocks: time from a bucket's start
//                   to its completion, and time the step then waited for
//                   it): the share of the communication that backward hid
//   exposed_ms      eager_ms - local_ms: what the communication added to a step
//   steps_per_s     1000 / eager_ms, and samples_per_s over every rank
//   barrier_us      one barrier: since every collective first agrees on the
//                   call (NOTE [ Ranks agree on each call ] in
//                   src/dist/engine.cpp), a barrier is that agreement alone
//   small_us        one all-reduce of one float32: the agreement plus the
//                   data's call, so small_us - barrier_us is about what the
//                   data alone would cost, and barrier_us what agreeing adds
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_format.h"
#include "encore/capture.h"
#include "encore/dist.h"
#include "encore/encore.h"
#include "src/dist/engine.h"

ABSL_FLAG(int, steps, 10, "steps per timed window");
ABSL_FLAG(int, reps, 15, "rounds of timed windows (the median is reported)");
ABSL_FLAG(int, batch, 64, "samples per rank and step");
ABSL_FLAG(int, width, 512, "hidden width of the MLP (in: 256, out: 10, two hidden layers)");
ABSL_FLAG(int64_t, bucket_mb, 1, "bucket size in MiB (DDP's default 25 would make one bucket here)");

namespace {

using namespace encore;
using Clock = std::chrono::steady_clock;

double median_ms(int reps, int steps, const std::function<void()>& fn) {
  std::vector<double> t;
  for (int r = 0; r < reps; ++r) {
    const auto t0 = Clock::now();
    for (int s = 0; s < steps; ++s) fn();
    t.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count() / steps);
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  if (absl::GetFlag(FLAGS_steps) < 1 || absl::GetFlag(FLAGS_reps) < 1 || absl::GetFlag(FLAGS_batch) < 1 ||
      absl::GetFlag(FLAGS_width) < 1 || absl::GetFlag(FLAGS_bucket_mb) < 1 || absl::GetFlag(FLAGS_bucket_mb) > 4096) {
    std::fprintf(stderr, "dist_bench: --steps, --reps, --batch and --width must be >= 1, --bucket_mb in 1..4096\n");
    return 2;
  }
  auto made = dist::ProcessGroup::create();
  if (!made.ok()) {
    std::fprintf(stderr, "dist_bench: %s\n", std::string(made.status().message()).c_str());
    return 1;
  }
  std::shared_ptr<dist::ProcessGroup> pg = *made;
  const int steps = absl::GetFlag(FLAGS_steps), reps = absl::GetFlag(FLAGS_reps);
  const int64_t batch = absl::GetFlag(FLAGS_batch), width = absl::GetFlag(FLAGS_width);
  manual_seed(1);
  nn::Mlp model({256, width, width, 10});
  dist::DistributedDataParallel ddp(model, pg, {.bucket_cap_bytes = absl::GetFlag(FLAGS_bucket_mb) << 20});
  // lr 0: every kernel of the update still runs, but the weights stay as
  // they are, so every timed step computes on the same values (training on
  // one fixed batch would drive gradients into denormals, which are slow).
  optim::AdamW opt(model.parameters(), {.lr = 0.0, .weight_decay = 0.0});
  Tensor x = randn({batch, 256});
  std::vector<int64_t> labels(batch);
  for (int64_t i = 0; i < batch; ++i) labels[i] = (i * 7 + pg->rank()) % 10;
  Tensor y = from_vector<int64_t>(labels);
  auto step = [&] {
    opt.zero_grad();
    Tensor loss = cross_entropy(model.forward(x), y);
    loss.backward();
    ddp.finish();
    opt.step();
    return std::vector<Tensor>{loss};
  };
  for (int i = 0; i < 3; ++i) step();
  // The same all-reduces, blocking, on buffers of the buckets' sizes.
  std::vector<Tensor> buffers;
  for (const auto& b : ddp.bucket_parameters()) {
    int64_t n = 0;
    for (int64_t i : b) n += model.parameters()[i].numel();
    buffers.push_back(zeros({n}));
  }
  absl::StatusOr<Graph> g = capture(step);
  if (!g.ok()) {
    std::fprintf(stderr, "dist_bench: %s\n", std::string(g.status().message()).c_str());
    return 1;
  }
  constexpr int kLatencyCalls = 100;   // small calls per step of the last two kinds
  Tensor one = zeros({1});
  // The kinds in turn, one window each per round, so that a shared
  // machine's load falls on all of them alike; medians over the rounds.
  const std::vector<std::function<void()>> kinds = {
      step,
      [&] {
        auto scope = ddp.no_sync();
        step();
      },
      [&] {
        for (const Tensor& b : buffers) pg->all_reduce(b, dist::ReduceOp::kAverage);
      },
      [&] {
        absl::Status s = g->replay();
        if (!s.ok()) throw Error(s);
      },
      [&] {
        for (int i = 0; i < kLatencyCalls; ++i) pg->barrier();
      },
      [&] {
        for (int i = 0; i < kLatencyCalls; ++i) pg->all_reduce(one);
      }};
  std::vector<std::vector<double>> ms(kinds.size());
  double in_flight_s = 0, blocked_s = 0;   // of the eager steps' all-reduces (the engine's clocks)
  for (int r = 0; r < reps; ++r) {
    for (size_t k = 0; k < kinds.size(); ++k) {
      pg->barrier();
      const dist_internal::EngineTimes t0 = dist_internal::engine_times();
      ms[k].push_back(median_ms(1, steps, kinds[k]));
      const dist_internal::EngineTimes t1 = dist_internal::engine_times();
      if (k == 0) {
        in_flight_s += t1.in_flight_s - t0.in_flight_s;
        blocked_s += t1.blocked_s - t0.blocked_s;
      }
    }
  }
  auto median = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };
  const double eager_ms = median(ms[0]), local_ms = median(ms[1]), comm_ms = median(ms[2]), replay_ms = median(ms[3]);
  // Every rank's worst figure: a data-parallel step is as slow as its slowest rank.
  auto worst = [&](double v) {
    std::vector<uint64_t> all = pg->all_gather(static_cast<uint64_t>(v * 1e6));
    return static_cast<double>(*std::max_element(all.begin(), all.end())) / 1e6;
  };
  const double e = worst(eager_ms), l = worst(local_ms), c = worst(comm_ms), r = worst(replay_ms);
  const double barrier_us = worst(median(ms[4])) * 1000 / kLatencyCalls,
               small_us = worst(median(ms[5])) * 1000 / kLatencyCalls;
  if (std::getenv("DIST_BENCH_VERBOSE") != nullptr) {
    std::fprintf(stderr, "rank %d: eager %.3f local %.3f comm %.3f replay %.3f ms; local windows:", pg->rank(),
                 eager_ms, local_ms, comm_ms, replay_ms);
    for (double v : ms[1]) std::fprintf(stderr, " %.2f", v);
    std::fprintf(stderr, "\n");
  }
  if (pg->rank() == 0) {
    // No all-reduce time in flight (one rank): nothing to hide, null rather than 0.
    const std::string hidden = in_flight_s > 0 ? absl::StrFormat("%.2f", 1.0 - blocked_s / in_flight_s) : "null";
    std::printf(
        "{\"ranks\": %d, \"batch_per_rank\": %lld, \"width\": %lld, \"buckets\": %zu, \"eager_ms\": %.3f, "
        "\"local_ms\": %.3f, \"comm_ms\": %.3f, \"replay_ms\": %.3f, \"hidden\": %s, \"steps_per_s\": %.1f, "
        "\"samples_per_s\": %.0f, \"replay_speedup\": %.2f, \"exposed_ms\": %.3f, \"barrier_us\": %.2f, "
        "\"small_us\": %.2f}\n",
        pg->world_size(), static_cast<long long>(batch), static_cast<long long>(width), buffers.size(), e, l, c, r,
        hidden.c_str(), 1000.0 / e, 1000.0 / e * batch * pg->world_size(), e / r, e - l, barrier_us, small_us);
  }
  return 0;
}
