// Trains a character-level GPT on the lines of a text file, each batch a
// set of lines of varying length padded up to a bucket (powers of two by
// default), through one encore::GraphedStep: a graph per bucket, all in one
// arena, every call one training step.
//
//   build/examples/train_lines                                # /usr/share/dict/words: one word a line
//   build/examples/train_lines --text=book.txt --steps=2000 --buckets=8,16,24,32
//
// Padded positions have target ignore_index, so the loss is the mean over
// the real next-character predictions, as without padding. Prints progress
// lines, then per graph its bucket, replays and arena need, and the shared
// arena against the largest single graph's and the eager peak. Exits 1 when
// a call fell back to eager (the graphs should cover every bucket).
#include <cmath>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/numbers.h"
#include "encore/bucketing.h"
#include "encore/encore.h"
#include "encore/nn.h"
#include "encore/optim.h"
#include "examples/lines.h"

ABSL_FLAG(std::string, text, "/usr/share/dict/words", "Text file to train on, one sequence a line.");
ABSL_FLAG(int64_t, steps, 600, "Training steps.");
ABSL_FLAG(int64_t, batch, 16, "Lines per step.");
ABSL_FLAG(int64_t, seq, 32, "The model's block size: longer lines are cut to this many predictions.");
ABSL_FLAG(std::vector<std::string>, buckets, {}, "Ascending padded lengths (default: powers of two up to --seq).");
ABSL_FLAG(double, lr, 3e-3, "Peak learning rate (AdamW, warm-up then cosine decay).");
ABSL_FLAG(int64_t, log_every, 100, "Print a progress line every this many steps.");
ABSL_FLAG(uint64_t, seed, 1337, "Seed for initialisation and batches.");

int main(int argc, char** argv) {
  using namespace encore;
  absl::SetProgramUsageMessage("Trains a character-level GPT on variable-length lines, padded to buckets, graphed.");
  absl::ParseCommandLine(argc, argv);
  const int64_t T = absl::GetFlag(FLAGS_seq), B = absl::GetFlag(FLAGS_batch), steps = absl::GetFlag(FLAGS_steps);
  if (T < 2 || T > 4096 || B < 1 || B > 4096 || steps < 1) {
    std::fprintf(stderr, "train_lines: --seq must be in [2, 4096], --batch in [1, 4096], --steps >= 1\n");
    return 2;
  }
  nn::BucketOptions buckets;
  for (const std::string& b : absl::GetFlag(FLAGS_buckets)) {
    int64_t v = 0;
    if (!absl::SimpleAtoi(b, &v) || v < 1 || v > T) {
      std::fprintf(stderr, "train_lines: --buckets=%s: each bucket a length in [1, --seq=%lld]\n", b.c_str(),
                   static_cast<long long>(T));
      return 2;
    }
    buckets.buckets.push_back(v);
  }
  if (!buckets.buckets.empty() && buckets.buckets.back() != T) buckets.buckets.push_back(T);   // every line fits
  absl::StatusOr<examples::Lines> text = examples::load_lines(absl::GetFlag(FLAGS_text), T + 1);
  if (!text.ok()) {
    std::fprintf(stderr, "train_lines: %s\n", std::string(text.status().message()).c_str());
    return 1;
  }
  const absl::Status status = status_of([&] {
    manual_seed(absl::GetFlag(FLAGS_seed));
    nn::Gpt gpt({.vocab_size = static_cast<int64_t>(text->vocab.size()), .block_size = T, .n_layer = 2,
                 .n_head = 4, .n_embd = 64, .seed = absl::GetFlag(FLAGS_seed)});
    const double lr = absl::GetFlag(FLAGS_lr);
    optim::AdamW opt(gpt.parameters(), {.lr = lr, .weight_decay = 0.1});
    optim::WarmupCosine schedule(opt, {.base_lr = lr, .min_lr = lr / 10,
                                       .warmup_steps = std::max<int64_t>(1, steps / 10), .total_steps = steps});
    GraphedStep train([&](const std::vector<Tensor>& in) {
      opt.zero_grad();
      Tensor loss = gpt.loss(in[0], in[1]);   // mean over the targets that are not ignore_index
      loss.backward();
      opt.step();
      return std::vector<Tensor>{loss};
    });
    std::mt19937_64 rng(absl::GetFlag(FLAGS_seed));
    Progress progress({.total = steps, .every = absl::GetFlag(FLAGS_log_every), .unit = "tokens"});
    for (int64_t s = 1; s <= steps; ++s) {
      const nn::Padded batch = nn::pad_sequences(text->sample(B, rng), buckets);
      const float loss = train({batch.ids, batch.targets})[0].item<float>();
      schedule.step();
      progress.update(s, loss, B * batch.length);   // the longest row's predictions, times B: padding left out
    }
    const GraphedStats& st = train.stats();
    std::printf("\n%lld steps: %lld eager (per bucket, the last recorded), %lld replayed (%lld of them capture "
                "calls), %lld fell back to eager\n",
                static_cast<long long>(steps), static_cast<long long>(st.eager_calls),
                static_cast<long long>(st.replays), static_cast<long long>(st.captures),
                static_cast<long long>(st.eager_fallbacks));
    for (const GraphedGraph& g : train.graphs()) {
      std::printf("graph   [%s]  %lld kernels  %lld replays  arena need %lld bytes\n", g.signature.c_str(),
                  static_cast<long long>(g.capture.kernels), static_cast<long long>(g.replays),
                  static_cast<long long>(g.capture.arena_bytes));
    }
    std::printf("memory  one arena of %lld bytes for %lld graphs = %.3f x the largest graph's need, %.3f x its "
                "eager peak (%lld); outputs %lld, static inputs %lld bytes\n",
                static_cast<long long>(st.arena_bytes), static_cast<long long>(st.graphs),
                static_cast<double>(st.arena_bytes) / std::max<int64_t>(1, st.largest_arena_bytes),
                static_cast<double>(st.arena_bytes) / std::max<int64_t>(1, st.eager_peak_bytes),
                static_cast<long long>(st.eager_peak_bytes), static_cast<long long>(st.output_bytes),
                static_cast<long long>(st.input_bytes));
    if (st.eager_fallbacks > 0) throw Error(absl::InternalError("calls fell back to eager: " + train.last_fallback()));
  });
  if (!status.ok()) {
    std::fprintf(stderr, "train_lines: %s\n", status.ToString().c_str());
    return 1;
  }
  return 0;
}
