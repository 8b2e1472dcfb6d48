// Trains a character-level GPT on a text file, eagerly, on the CPU.
//
//   build/examples/train_gpt                          # /usr/share/dict/words (Debian wamerican)
//   build/examples/train_gpt --text=book.txt --steps=2000 --n_layer=4
//
// Each step: sample B windows of T+1 characters, predict every next
// character, AdamW update with warm-up then cosine decay. Prints one progress
// line every --log_every steps and a text sample at the end.
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/status/statusor.h"
#include "encore/encore.h"
#include "encore/nn.h"
#include "encore/optim.h"

ABSL_FLAG(std::string, text, "/usr/share/dict/words", "Text file to train on (any bytes).");
ABSL_FLAG(int64_t, steps, 300, "Training steps.");
ABSL_FLAG(int64_t, batch, 16, "Sequences per step (B).");
ABSL_FLAG(int64_t, seq, 32, "Characters per sequence (T); also the model's block size.");
ABSL_FLAG(int64_t, n_layer, 2, "Transformer blocks.");
ABSL_FLAG(int64_t, n_head, 4, "Attention heads per block.");
ABSL_FLAG(int64_t, n_embd, 64, "Model width (C).");
ABSL_FLAG(double, dropout, 0.0, "Dropout probability.");
ABSL_FLAG(double, lr, 3e-3, "Peak learning rate (AdamW).");
ABSL_FLAG(int64_t, log_every, 25, "Print a progress line every this many steps.");
ABSL_FLAG(int64_t, sample_chars, 200, "Characters to sample after training (0: none).");
ABSL_FLAG(uint64_t, seed, 1337, "Seed for initialisation, batches and sampling.");

namespace {

using namespace encore;

struct Corpus {
  std::vector<int64_t> ids;       // the text as token ids
  std::vector<unsigned char> vocab;   // id -> byte
};

absl::StatusOr<Corpus> load_corpus(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError("cannot open text file " + path);
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string text = ss.str();
  if (text.size() < 1000) return absl::InvalidArgumentError(path + " is too short to train on (< 1000 bytes)");
  bool seen[256] = {};
  for (unsigned char ch : text) seen[ch] = true;
  Corpus c;
  int map[256] = {};
  for (int b = 0; b < 256; ++b) {
    if (!seen[b]) continue;
    map[b] = static_cast<int>(c.vocab.size());
    c.vocab.push_back(static_cast<unsigned char>(b));
  }
  c.ids.reserve(text.size());
  for (unsigned char ch : text) c.ids.push_back(map[ch]);
  return c;
}

// Fills x and y ([B, T] i64) with random windows: y is x shifted by one.
void next_batch(const Corpus& c, std::mt19937_64& rng, Tensor& x, Tensor& y) {
  const int64_t B = x.size(0), T = x.size(1);
  std::uniform_int_distribution<int64_t> start(0, static_cast<int64_t>(c.ids.size()) - T - 2);
  std::vector<int64_t> xs(B * T), ys(B * T);
  for (int64_t b = 0; b < B; ++b) {
    const int64_t s = start(rng);
    for (int64_t t = 0; t < T; ++t) {
      xs[b * T + t] = c.ids[s + t];
      ys[b * T + t] = c.ids[s + t + 1];
    }
  }
  NoGradGuard no_grad;
  x.copy_(from_vector<int64_t>(xs, {B, T}));
  y.copy_(from_vector<int64_t>(ys, {B, T}));
}

std::string sample(const nn::Gpt& gpt, const Corpus& c, int64_t n, std::mt19937_64& rng) {
  NoGradGuard no_grad;
  const int64_t T = gpt.config().block_size;
  std::vector<int64_t> context = {c.ids[0]};
  std::string out;
  for (int64_t i = 0; i < n; ++i) {
    const int64_t len = std::min<int64_t>(T, static_cast<int64_t>(context.size()));
    std::vector<int64_t> window(context.end() - len, context.end());
    Tensor logits = gpt.forward(from_vector<int64_t>(window, {1, len}));      // [1, len, V]
    std::vector<float> p = softmax(logits.select(1, len - 1), -1).to_vector<float>();
    std::discrete_distribution<int64_t> pick(p.begin(), p.end());
    const int64_t next = pick(rng);
    context.push_back(next);
    out.push_back(static_cast<char>(c.vocab[next]));
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage("Trains a character-level GPT on a text file (eager, CPU).");
  absl::ParseCommandLine(argc, argv);
  absl::StatusOr<Corpus> corpus = load_corpus(absl::GetFlag(FLAGS_text));
  if (!corpus.ok()) {
    std::fprintf(stderr, "train_gpt: %s\n", std::string(corpus.status().message()).c_str());
    return 1;
  }
  const int64_t B = absl::GetFlag(FLAGS_batch), T = absl::GetFlag(FLAGS_seq), steps = absl::GetFlag(FLAGS_steps);
  nn::GptConfig cfg{.vocab_size = static_cast<int64_t>(corpus->vocab.size()), .block_size = T,
                    .n_layer = absl::GetFlag(FLAGS_n_layer), .n_head = absl::GetFlag(FLAGS_n_head),
                    .n_embd = absl::GetFlag(FLAGS_n_embd), .dropout = absl::GetFlag(FLAGS_dropout),
                    .seed = absl::GetFlag(FLAGS_seed)};
  absl::Status status = status_of([&] {
    manual_seed(absl::GetFlag(FLAGS_seed));
    nn::Gpt gpt(cfg);
    optim::AdamW opt(gpt.parameters(), {.lr = absl::GetFlag(FLAGS_lr), .weight_decay = 0.1});
    optim::WarmupCosine schedule(opt, {.base_lr = absl::GetFlag(FLAGS_lr), .min_lr = absl::GetFlag(FLAGS_lr) / 10,
                                       .warmup_steps = std::max<int64_t>(1, steps / 10), .total_steps = steps});
    std::mt19937_64 rng(absl::GetFlag(FLAGS_seed));
    Tensor x = zeros({B, T}, kInt64), y = zeros({B, T}, kInt64);   // static inputs, refilled every step
    std::printf("char-level GPT: %zu-byte text, vocab %lld, %lld layers, width %lld, B=%lld T=%lld; "
                "uniform-guess loss %.3f\n",
                corpus->ids.size(), static_cast<long long>(cfg.vocab_size), static_cast<long long>(cfg.n_layer),
                static_cast<long long>(cfg.n_embd), static_cast<long long>(B), static_cast<long long>(T),
                std::log(static_cast<double>(cfg.vocab_size)));
    auto t0 = std::chrono::steady_clock::now();
    for (int64_t step = 1; step <= steps; ++step) {
      next_batch(*corpus, rng, x, y);
      opt.zero_grad();
      Tensor loss = gpt.loss(x, y);
      loss.backward();
      opt.step();
      schedule.step();
      if (step % absl::GetFlag(FLAGS_log_every) == 0 || step == steps) {
        const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count() /
                          absl::GetFlag(FLAGS_log_every);
        std::printf("step %5lld  loss %.4f  %.2f ms/step  %.0f tokens/s\n", static_cast<long long>(step),
                    loss.item<double>(), ms, B * T / ms * 1000.0);
        t0 = std::chrono::steady_clock::now();
      }
    }
    if (absl::GetFlag(FLAGS_sample_chars) > 0) {
      gpt.eval();
      std::printf("sample:\n%s\n", sample(gpt, *corpus, absl::GetFlag(FLAGS_sample_chars), rng).c_str());
    }
  });
  if (!status.ok()) {
    std::fprintf(stderr, "train_gpt: %s\n", status.ToString().c_str());
    return 1;
  }
  return 0;
}
