// Variable-length training, eager against graphed with buckets: the lines of
// a text (examples/lines.h), B random lines a step padded to a power-of-two
// bucket (encore::nn::pad_sequences), the same char-level GPT trained twice
// from one seed, step by step in lockstep (eager step s, then graphed step
// s, so both see the same machine load). Reports time per real token (all
// calls, warm-ups and captures included), steady-state medians, graphs
// captured, and the shared arena against the largest single graph's arena,
// the sum of separate arenas (one capture() per shape) and the eager peak of
// the largest shape. Checks the two runs' losses bit for bit.
//
//   export OMP_WAIT_POLICY=passive
//   build/bench/bucketed_bench                       # /usr/share/dict/words, 400 steps
//   build/bench/bucketed_bench --steps=1000 --batch=32 --json
//
// Exits 1 when the losses differ or a call fell back to eager.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "encore/bucketing.h"
#include "encore/encore.h"
#include "encore/nn.h"
#include "encore/optim.h"
#include "examples/lines.h"

ABSL_FLAG(std::string, text, "/usr/share/dict/words", "Text file, one sequence a line.");
ABSL_FLAG(int64_t, steps, 400, "Training steps of each run (1..1000000).");
ABSL_FLAG(int64_t, batch, 16, "Lines per step (1..4096).");
ABSL_FLAG(int64_t, seq, 32, "Block size; buckets are the powers of two up to it (2..4096).");
ABSL_FLAG(int64_t, n_layer, 2, "Transformer blocks (1..64).");
ABSL_FLAG(int64_t, n_embd, 64, "Model width, a multiple of 4 (4..4096).");
ABSL_FLAG(bool, json, false, "End with one JSON line of the figures.");

namespace {

using namespace encore;
using Clock = std::chrono::steady_clock;

struct Run {
  nn::Gpt gpt;
  optim::AdamW opt;
  // manual_seed first: dropout would draw from the default generator.
  explicit Run(const nn::GptConfig& cfg) : gpt((manual_seed(cfg.seed), cfg)), opt(gpt.parameters(), {.lr = 3e-3}) {}
  std::vector<Tensor> step(const std::vector<Tensor>& in) {
    opt.zero_grad();
    Tensor loss = gpt.loss(in[0], in[1]);
    loss.backward();
    opt.step();
    return {loss};
  }
};

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::nth_element(v.begin(), v.begin() + v.size() / 2, v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage("Variable-length GPT training: eager against graphed with buckets.");
  absl::ParseCommandLine(argc, argv);
  const int64_t steps = absl::GetFlag(FLAGS_steps), B = absl::GetFlag(FLAGS_batch), T = absl::GetFlag(FLAGS_seq);
  const int64_t layers = absl::GetFlag(FLAGS_n_layer), width = absl::GetFlag(FLAGS_n_embd);
  if (steps < 1 || steps > 1000000 || B < 1 || B > 4096 || T < 2 || T > 4096 || layers < 1 || layers > 64 ||
      width < 4 || width > 4096 || width % 4 != 0) {
    std::fprintf(stderr, "bucketed_bench: a flag is out of its range (see --help)\n");
    return 2;
  }
  absl::StatusOr<examples::Lines> text = examples::load_lines(absl::GetFlag(FLAGS_text), T + 1);
  if (!text.ok()) {
    std::fprintf(stderr, "bucketed_bench: %s\n", std::string(text.status().message()).c_str());
    return 1;
  }
  int rc = 0;
  const absl::Status status = status_of([&] {
    const nn::GptConfig cfg{.vocab_size = static_cast<int64_t>(text->vocab.size()), .block_size = T,
                            .n_layer = layers, .n_head = 4, .n_embd = width};
    Run eager(cfg), graphed_run(cfg);
    GraphedStep graphed([&](const std::vector<Tensor>& in) { return graphed_run.step(in); });
    std::mt19937_64 rng(cfg.seed);
    double eager_ms = 0, graphed_ms = 0;
    int64_t tokens = 0, mismatches = 0;
    std::map<int64_t, std::vector<double>> eager_by_bucket, replay_by_bucket;   // steady state, per bucket
    for (int64_t s = 1; s <= steps; ++s) {
      const nn::Padded batch = nn::pad_sequences(text->sample(B, rng));
      for (int64_t t : batch.targets.to_vector<int64_t>()) tokens += t != -100;
      auto t0 = Clock::now();
      const float le = eager.step({batch.ids, batch.targets})[0].item<float>();
      const double e = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
      const GraphedStats before = graphed.stats();
      t0 = Clock::now();
      const float lg = graphed({batch.ids, batch.targets})[0].item<float>();
      const double g = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
      eager_ms += e;
      graphed_ms += g;
      mismatches += std::memcmp(&le, &lg, sizeof(float)) != 0;
      if (graphed.stats().replays > before.replays && graphed.stats().captures == before.captures) {
        eager_by_bucket[batch.bucket].push_back(e);
        replay_by_bucket[batch.bucket].push_back(g);
      }
    }
    const GraphedStats& st = graphed.stats();
    int64_t separate = 0;
    for (const GraphedGraph& g : graphed.graphs()) separate += g.capture.arena_bytes + g.capture.output_bytes;
    std::printf("%lld steps of %lld lines (buckets %s), %lld real tokens; GPT %lld layers, width %lld\n",
                static_cast<long long>(steps), static_cast<long long>(B),
                "powers of two", static_cast<long long>(tokens), static_cast<long long>(layers),
                static_cast<long long>(width));
    std::printf("time    eager %.2f us/token   graphed %.2f us/token (warm-ups and captures included)   "
                "speedup %.2fx\n",
                eager_ms * 1e3 / tokens, graphed_ms * 1e3 / tokens, eager_ms / graphed_ms);
    for (const auto& [bucket, e] : eager_by_bucket) {
      const std::vector<double>& r = replay_by_bucket[bucket];
      std::printf("bucket  %4lld: %4zu replayed steps, median eager %.3f ms, replay %.3f ms (%.2fx)\n",
                  static_cast<long long>(bucket), r.size(), median(e), median(r), median(e) / median(r));
    }
    std::printf("calls   %lld eager, %lld captured, %lld replayed, %lld fell back; %lld graphs held\n",
                static_cast<long long>(st.eager_calls), static_cast<long long>(st.captures),
                static_cast<long long>(st.replays), static_cast<long long>(st.eager_fallbacks),
                static_cast<long long>(st.graphs));
    std::printf("memory  shared arena %lld bytes = %.4f x the largest graph's arena (%lld); outputs %lld bytes;\n"
                "        arena + outputs = %.4f x separate arenas (%lld: one capture() per shape), %.4f x the "
                "largest shape's eager peak (%lld)\n",
                static_cast<long long>(st.arena_bytes),
                static_cast<double>(st.arena_bytes) / std::max<int64_t>(1, st.largest_arena_bytes),
                static_cast<long long>(st.largest_arena_bytes), static_cast<long long>(st.output_bytes),
                static_cast<double>(st.arena_bytes + st.output_bytes) / std::max<int64_t>(1, separate),
                static_cast<long long>(separate),
                static_cast<double>(st.arena_bytes + st.output_bytes) / std::max<int64_t>(1, st.eager_peak_bytes),
                static_cast<long long>(st.eager_peak_bytes));
    std::printf("check   %lld of %lld graphed losses differ from the eager ones bit for bit\n",
                static_cast<long long>(mismatches), static_cast<long long>(steps));
    if (absl::GetFlag(FLAGS_json)) {
      std::printf("{\"eager_us_per_token\": %.4f, \"graphed_us_per_token\": %.4f, \"graphs\": %lld, "
                  "\"captures\": %lld, \"arena_bytes\": %lld, \"largest_arena_bytes\": %lld, \"output_bytes\": %lld, "
                  "\"separate_bytes\": %lld, \"eager_peak_bytes\": %lld, \"mismatches\": %lld}\n",
                  eager_ms * 1e3 / tokens, graphed_ms * 1e3 / tokens, static_cast<long long>(st.graphs),
                  static_cast<long long>(st.captures), static_cast<long long>(st.arena_bytes),
                  static_cast<long long>(st.largest_arena_bytes), static_cast<long long>(st.output_bytes),
                  static_cast<long long>(separate), static_cast<long long>(st.eager_peak_bytes),
                  static_cast<long long>(mismatches));
    }
    rc = mismatches > 0 || st.eager_fallbacks > 0;
  });
  if (!status.ok()) {
    std::fprintf(stderr, "bucketed_bench: %s\n", status.ToString().c_str());
    return 1;
  }
  return rc;
}
