// Trains a character-level GPT on a text file on the CPU, twice from one
// seed: eagerly, and through an encore::GraphedStep, which runs the first
// calls eagerly, captures the next and replays the rest.
//
//   build/examples/train_gpt                          # /usr/share/dict/words (Debian wamerican)
//   build/examples/train_gpt --text=book.txt --steps=2000 --n_layer=4 --json
//
// Each step: sample B windows of T+1 characters, predict every next
// character, AdamW update with warm-up then cosine decay. Both runs are the
// same loop (batch, step, schedule.step()): every call of the graphed step is
// one training step, so the loop has no special cases for capture. For the
// first --eager_steps steps the two runs alternate step by step (timed under
// the same machine load, losses compared bit for bit); then the graphed run
// trains on alone to --steps. Prints progress lines, the figures, and a text
// sample at the end.
//
// Data parallel under mpirun (or srun): every rank trains both runs on its
// own batches (its own stream of windows, seeded by its rank), gradients
// averaged across ranks by DistributedDataParallel inside the step, so the
// graphed run's captured graph holds the all-reduces. Only rank 0 prints;
// the exit status says whether every rank's replays matched its eager steps.
//
//   mpirun -np 2 build/examples/train_gpt --steps=200         # one machine, 2 processes
//   mpirun -np 8 --hostfile hosts build/examples/train_gpt    # several machines
//   srun -N 2 --ntasks-per-node=4 build/examples/train_gpt    # Slurm
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_format.h"
#include "encore/dist.h"
#include "encore/encore.h"
#include "encore/nn.h"
#include "encore/optim.h"
#include "examples/example_main.h"
#include "examples/text_file.h"
#include "tools/flags.h"

ABSL_FLAG(std::string, text, "/usr/share/dict/words", "Text file to train on (any bytes).");
ABSL_FLAG(int64_t, steps, 1500, "Training steps of the graphed run (the first two run eagerly, the third captures).");
ABSL_FLAG(int64_t, eager_steps, 40,
          "Steps of the eager reference run, in lockstep with the graphed run: timed and compared bit for bit.");
ABSL_FLAG(bool, json, false, "End with one JSON line of the figures.");
ABSL_FLAG(int64_t, batch, 16, "Sequences per step (B), 1..4096.");
ABSL_FLAG(int64_t, seq, 32, "Characters per sequence (T), 1..4096; also the model's block size.");
ABSL_FLAG(int64_t, n_layer, 2, "Transformer blocks, 1..256.");
ABSL_FLAG(int64_t, n_head, 4, "Attention heads per block, 1..1024.");
ABSL_FLAG(int64_t, n_embd, 64, "Model width (C), 1..16384.");
ABSL_FLAG(double, dropout, 0.0, "Dropout probability, in [0, 1).");
ABSL_FLAG(double, lr, 3e-3, "Peak learning rate (AdamW), in [0, 1e6].");
ABSL_FLAG(int64_t, log_every, 100, "Print a progress line every this many steps.");
ABSL_FLAG(int64_t, sample_chars, 200, "Characters to sample after training (0: none).");
ABSL_FLAG(uint64_t, seed, 1337, "Seed for initialisation, batches and sampling.");
ABSL_FLAG(std::string, device, "cpu", "Where to train: cpu, cuda (cuda:0), or auto (cuda when a GPU answers).");

namespace {

using namespace encore;

struct Corpus {
  std::vector<int64_t> ids;       // the text as token ids
  std::vector<unsigned char> vocab;   // id -> byte
};

absl::StatusOr<Corpus> load_corpus(const std::string& path) {
  absl::StatusOr<std::string> read = examples::read_text_file(path);   // bounded; gzip or plain text
  if (!read.ok()) return read.status();
  const std::string& text = *read;
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

// n characters drawn from the model after c's first character, on the
// model's device without host round trips: the context stays a device
// tensor, each next character comes from multinomial() with a Philox
// generator seeded from `seed` (the same text for the same seed), and the
// text is read back once at the end.
std::string sample(const nn::Gpt& gpt, const Corpus& c, int64_t n, uint64_t seed) {
  NoGradGuard no_grad;
  const Device dev = gpt.config().device;
  const int64_t T = gpt.config().block_size;
  Generator gen(seed, dev);
  Tensor context = from_vector<int64_t>({c.ids[0]}, {1, 1}, dev);
  for (int64_t i = 0; i < n; ++i) {
    const int64_t len = context.size(1);
    const Tensor window = len > T ? context.slice(1, len - T, len) : context;
    const Tensor logits = gpt.forward(window);                                  // [1, len', V]
    const Tensor probs = softmax(logits.select(1, window.size(1) - 1), -1);     // [1, V]
    context = concat({context, multinomial(probs, 1, false, &gen)}, 1);        // [1, len + 1]
  }
  const std::vector<int64_t> ids = context.to_vector<int64_t>();
  std::string out;
  for (size_t i = 1; i < ids.size(); ++i) out.push_back(static_cast<char>(c.vocab[ids[i]]));
  return out;
}

// Seeds the default generator (dropout draws from it) before the model exists.
const nn::GptConfig& seeded(const nn::GptConfig& cfg) {
  manual_seed(cfg.seed);
  return cfg;
}

// One training run's state: model, optimizer, schedule, static inputs and the
// batch stream. Two runs made with the same flags start identical.
struct Run {
  explicit Run(const Corpus& corpus, const nn::GptConfig& cfg, int64_t steps,
               const std::shared_ptr<dist::ProcessGroup>& pg)
      : corpus(corpus),
        gpt(seeded(cfg)),
        opt(gpt.parameters(), {.lr = absl::GetFlag(FLAGS_lr), .weight_decay = 0.1}),
        schedule(opt, {.base_lr = absl::GetFlag(FLAGS_lr), .min_lr = absl::GetFlag(FLAGS_lr) / 10,
                       .warmup_steps = std::max<int64_t>(1, steps / 10), .total_steps = steps}),
        rng(cfg.seed + 1000003ull * static_cast<uint64_t>(pg->rank())),   // each rank its own batches
        x(zeros({absl::GetFlag(FLAGS_batch), cfg.block_size}, kInt64, cfg.device)),
        y(zeros({absl::GetFlag(FLAGS_batch), cfg.block_size}, kInt64, cfg.device)),
        dropout_state(default_generator(cfg.device).state().clone()) {
    // Rank 0's weights everywhere, gradients averaged in the step's backward.
    if (pg->world_size() > 1) ddp = std::make_unique<dist::DistributedDataParallel>(gpt, pg);
  }

  // One training step on a batch: inputs {x, y}, outputs {loss}.
  std::vector<Tensor> step(const std::vector<Tensor>& in) {
    opt.zero_grad();
    Tensor loss = gpt.loss(in[0], in[1]);
    loss.backward();
    if (ddp) ddp->finish();   // a no-op: backward waited for the last bucket
    opt.step();
    return {loss};
  }

  const Corpus& corpus;
  nn::Gpt gpt;
  optim::AdamW opt;
  optim::WarmupCosine schedule;
  std::unique_ptr<dist::DistributedDataParallel> ddp;   // with more than one process
  std::mt19937_64 rng;
  Tensor x, y;   // the batch: refilled before every step
  // The default generator's state (dropout draws from it) as this run left
  // it: the two runs alternate, so each puts its own back before its step.
  Tensor dropout_state;
};

double ms_between(std::chrono::steady_clock::time_point a, std::chrono::steady_clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

// The headline figures are medians of the per-step times, with the 10th
// and 90th percentiles for their spread: one step slowed by another process
// on a shared machine (or the first, cold step) does not move a median.
struct Spread {
  double p10 = 0, median = 0, p90 = 0;
};
Spread spread_of(std::vector<double> v) {
  if (v.empty()) return {};
  std::sort(v.begin(), v.end());
  auto at = [&](double q) { return v[static_cast<size_t>(q * static_cast<double>(v.size() - 1) + 0.5)]; };
  return {at(0.1), at(0.5), at(0.9)};
}

struct Figures {
  Spread eager, replay;
  double eager_ms = 0, replay_ms = 0, replay_all_ms = 0, loss_first = 0, loss_last = 0;
  bool bitwise_equal = false;
  int64_t replays_compared = 0, replays_timed = 0, replays_all = 0;
  CaptureStats stats;
  GraphedStats graphed;
};

// One step of a run on a new batch, then its schedule; returns the loss
// (read back: on a GPU the time includes the step) and adds the ms to `ms`.
template <typename Step>
float timed_step(Run& run, Step&& step, double& ms) {
  next_batch(run.corpus, run.rng, run.x, run.y);
  Tensor generator = default_generator(run.x.device()).state();   // the same storage: its contents swapped
  {
    NoGradGuard no_grad;
    generator.copy_(run.dropout_state);
  }
  const auto t0 = std::chrono::steady_clock::now();
  Tensor loss = step(std::vector<Tensor>{run.x, run.y})[0];
  run.schedule.step();
  const float value = loss.item<float>();
  ms = ms_between(t0, std::chrono::steady_clock::now());
  NoGradGuard no_grad;
  run.dropout_state.copy_(generator);
  return value;
}

}  // namespace

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "Trains a character-level GPT on a text file (CPU by default, or --device=cuda), eagerly and through a\n"
      "GraphedStep (captured and replayed), the two runs in lockstep for the first --eager_steps steps.\n"
      "Prints per-step times, the speedup, arena bytes against the eager peak and the lower bound, and\n"
      "whether the replayed steps matched the eager ones bit for bit.");
  if (encore::tools::parse_flags(argc, argv, "train_gpt").size() != 1) {
    std::fprintf(stderr, "train_gpt: unexpected arguments (see --help)\n");
    return 2;
  }
  for (absl::Status s : {encore::tools::in_range("--steps", absl::GetFlag(FLAGS_steps), 1, 100000000),
                         encore::tools::in_range("--eager_steps", absl::GetFlag(FLAGS_eager_steps), 0, 100000000),
                         encore::tools::in_range("--batch", absl::GetFlag(FLAGS_batch), 1, 4096),
                         encore::tools::in_range("--seq", absl::GetFlag(FLAGS_seq), 1, 4096),
                         encore::tools::in_range("--n_layer", absl::GetFlag(FLAGS_n_layer), 1, 256),
                         encore::tools::in_range("--n_head", absl::GetFlag(FLAGS_n_head), 1, 1024),
                         encore::tools::in_range("--n_embd", absl::GetFlag(FLAGS_n_embd), 1, 16384),
                         encore::tools::in_range("--log_every", absl::GetFlag(FLAGS_log_every), 1, 100000000),
                         encore::tools::in_range("--sample_chars", absl::GetFlag(FLAGS_sample_chars), 0, 1000000),
                         encore::tools::finite_in_range("--lr", absl::GetFlag(FLAGS_lr), 0, 1e6)}) {
    if (!s.ok()) return encore::tools::flag_error("train_gpt", s);
  }
  if (const double p = absl::GetFlag(FLAGS_dropout); !(p >= 0 && p < 1)) {
    std::fprintf(stderr, "train_gpt: --dropout must be in [0, 1), got %g\n", p);
    return 2;
  }
  absl::StatusOr<std::shared_ptr<dist::ProcessGroup>> pg = dist::ProcessGroup::create();
  if (!pg.ok()) {
    std::fprintf(stderr, "train_gpt: %s\n", std::string(pg.status().message()).c_str());
    return 1;
  }
  if ((*pg)->rank() != 0 && std::freopen("/dev/null", "w", stdout) == nullptr) return 1;   // only rank 0 prints
  absl::StatusOr<Corpus> corpus = load_corpus(absl::GetFlag(FLAGS_text));
  if (!corpus.ok()) {
    std::fprintf(stderr, "train_gpt: %s\n", std::string(corpus.status().message()).c_str());
    return 1;
  }
  const std::string device_flag = absl::GetFlag(FLAGS_device);
  if (device_flag != "cpu" && device_flag != "cuda" && device_flag != "auto") {
    std::fprintf(stderr, "train_gpt: --device=%s: expected cpu, cuda or auto\n", device_flag.c_str());
    return 2;
  }
  Device device = device_flag == "cpu" ? kCPU : device_flag == "cuda" ? Device::cuda(0) : default_device();
  if (device.is_cuda() && (*pg)->world_size() > 1) device = (*pg)->device();   // one GPU per process: cuda(local_rank)
  if (device.is_cuda() && !cuda_available()) {
    std::fprintf(stderr, "train_gpt: --device=cuda but no usable GPU (or encore was built without CUDA)\n");
    return 2;
  }
  const int64_t B = absl::GetFlag(FLAGS_batch), T = absl::GetFlag(FLAGS_seq);
  const int64_t steps = absl::GetFlag(FLAGS_steps), eager_steps = std::min<int64_t>(steps, absl::GetFlag(FLAGS_eager_steps));
  nn::GptConfig cfg{.vocab_size = static_cast<int64_t>(corpus->vocab.size()), .block_size = T,
                    .n_layer = absl::GetFlag(FLAGS_n_layer), .n_head = absl::GetFlag(FLAGS_n_head),
                    .n_embd = absl::GetFlag(FLAGS_n_embd), .dropout = absl::GetFlag(FLAGS_dropout),
                    .seed = absl::GetFlag(FLAGS_seed), .device = device};
  Figures fig;
  absl::Status status = status_of([&] {
    std::printf("char-level GPT on %s: %zu-byte text, vocab %lld, %lld layers, width %lld, B=%lld T=%lld; "
                "uniform-guess loss %.3f\n",
                device.str().c_str(), corpus->ids.size(), static_cast<long long>(cfg.vocab_size), static_cast<long long>(cfg.n_layer),
                static_cast<long long>(cfg.n_embd), static_cast<long long>(B), static_cast<long long>(T),
                std::log(static_cast<double>(cfg.vocab_size)));
    // Two runs from one seed, the same loop: the eager step, and the step
    // through a GraphedStep (calls 1 and 2 eager, the second recorded; call
    // 3 captures and replays; the rest replay). For the first eager_steps
    // steps they go in lockstep (eager step s, then graphed step s), so both
    // medians are taken under the same machine load and every loss is
    // compared bit for bit; then the graphed run trains on alone.
    if ((*pg)->world_size() > 1) {
      std::printf("data parallel: %d processes (%s), B=%lld each, %lld sequences per step\n", (*pg)->world_size(),
                  (*pg)->environment().launcher.c_str(), static_cast<long long>(B),
                  static_cast<long long>(B * (*pg)->world_size()));
    }
    Run eager(*corpus, cfg, steps, *pg), run(*corpus, cfg, steps, *pg);
    GraphedStep graphed([&](const std::vector<Tensor>& in) { return run.step(in); });
    std::vector<double> eager_ms, replay_ms, replay_all_ms;
    Progress progress({.total = steps, .every = absl::GetFlag(FLAGS_log_every), .unit = "tokens", .label = "graphed"});
    fig.bitwise_equal = true;
    for (int64_t s = 1; s <= steps; ++s) {
      float eager_loss = 0;
      double ms = 0;
      if (s <= eager_steps) {
        eager_loss = timed_step(eager, [&](const std::vector<Tensor>& in) { return eager.step(in); }, ms);
        eager_ms.push_back(ms);
      }
      const GraphedStats before = graphed.stats();
      const float loss = timed_step(run, graphed, ms);
      // Plain replays only: not the eager calls, nor the call that captured.
      if (graphed.stats().replays > before.replays && graphed.stats().captures == before.captures) {
        replay_all_ms.push_back(ms);
        if (s <= eager_steps) replay_ms.push_back(ms);
      }
      if (s <= eager_steps) {
        fig.bitwise_equal &= std::memcmp(&loss, &eager_loss, sizeof(float)) == 0;
        fig.replays_compared += graphed.stats().replays > before.replays;
      }
      if (s == eager_steps) {   // the lockstep ends: the whole state too, not only the losses
        fig.bitwise_equal &= examples::same_bits(eager.gpt.state_tensors(), run.gpt.state_tensors()) &&
                             examples::same_bits(eager.opt.state(), run.opt.state());
      }
      if (s == 1) fig.loss_first = loss;   // an eager call: the eager run's first loss, bit for bit
      fig.loss_last = loss;
      progress.update(s, loss, B * T);
    }
    fig.eager = spread_of(eager_ms);
    fig.replay = spread_of(replay_ms);
    fig.eager_ms = fig.eager.median;
    fig.replay_ms = fig.replay.median;
    fig.replay_all_ms = spread_of(replay_all_ms).median;
    fig.replays_all = static_cast<int64_t>(replay_all_ms.size());
    fig.replays_timed = static_cast<int64_t>(replay_ms.size());
    fig.graphed = graphed.stats();
    if (graphed.graphs().empty()) throw Error(absl::InternalError("the graphed step captured no graph"));
    fig.stats = graphed.graphs()[0].capture;
    if (absl::GetFlag(FLAGS_sample_chars) > 0) {
      run.gpt.eval();
      std::printf("sample:\n%s\n", sample(run.gpt, *corpus, absl::GetFlag(FLAGS_sample_chars), absl::GetFlag(FLAGS_seed)).c_str());
    }
  });
  if (!status.ok()) {
    std::fprintf(stderr, "train_gpt: %s\n", status.ToString().c_str());
    return 1;
  }
  const CaptureStats& st = fig.stats;
  // A figure no step measured (no eager steps, or no replay among them: the
  // first two calls run eagerly, the third captures) is "n/a" in the text
  // and null in the JSON line, never a 0 or an inf.
  const bool eager_timed = eager_steps > 0, replay_timed = fig.replays_timed > 0;
  auto spread_text = [](bool measured, const Spread& s) {
    return measured ? absl::StrFormat("%.3f ms/step [%.3f, %.3f]", s.median, s.p10, s.p90) : std::string("n/a");
  };
  const bool both_timed = eager_timed && replay_timed;
  std::printf("\neager   %s   replay %s   speedup %s\n"
              "        (medians [10th, 90th percentiles] of %lld eager steps and the %lld replays in lockstep with "
              "them; all %lld replays: median %s)\n",
              spread_text(eager_timed, fig.eager).c_str(), spread_text(replay_timed, fig.replay).c_str(),
              both_timed ? absl::StrFormat("%.2fx", fig.eager_ms / fig.replay_ms).c_str() : "n/a",
              static_cast<long long>(eager_steps), static_cast<long long>(fig.replays_timed),
              static_cast<long long>(fig.replays_all),
              fig.replays_all > 0 ? absl::StrFormat("%.3f ms", fig.replay_all_ms).c_str() : "n/a");
  // Each step is one call: eager (warm-up or recorded), replayed (a capture's
  // call replays too), or run eagerly for a reason; captures are counted apart.
  std::printf("calls   %lld steps: %lld eager (the last recorded), %lld replayed (%lld of them capture calls), "
              "%lld fell back\n",
              static_cast<long long>(steps), static_cast<long long>(fig.graphed.eager_calls),
              static_cast<long long>(fig.graphed.replays), static_cast<long long>(fig.graphed.captures),
              static_cast<long long>(fig.graphed.eager_fallbacks));
  std::printf("graph   %lld kernels, %lld temporaries; recorded call %.1f ms, plan %.1f ms, capture run %.1f ms\n",
              static_cast<long long>(st.kernels), static_cast<long long>(st.temporaries), st.warmup_ms, st.plan_ms,
              st.capture_ms);
  std::printf("memory  arena %lld bytes = %.4f x lower bound (%lld), %.3f x eager peak (%lld)\n",
              static_cast<long long>(st.arena_bytes), static_cast<double>(st.arena_bytes) / st.lower_bound_bytes,
              static_cast<long long>(st.lower_bound_bytes), static_cast<double>(st.arena_bytes) / st.eager_peak_bytes,
              static_cast<long long>(st.eager_peak_bytes));
  if (fig.replays_compared == 0) {
    std::printf("check   none: no replayed step ran in lockstep with an eager one (--eager_steps=%lld)\n",
                static_cast<long long>(eager_steps));
  } else {
    std::printf("check   steps 1-%lld (%lld of them replayed) %s the eager steps bit for bit (every loss, then "
                "the weights and optimizer state)\n",
                static_cast<long long>(eager_steps), static_cast<long long>(fig.replays_compared),
                fig.bitwise_equal ? "match" : "DO NOT match");
  }
  std::printf("loss    %.4f -> %.4f\n", fig.loss_first, fig.loss_last);
  if (absl::GetFlag(FLAGS_json)) {
    auto number_or_null = [](bool measured, double v) {
      return measured ? absl::StrFormat("%.4f", v) : std::string("null");
    };
    std::printf("{\"eager_ms_per_step\": %s, \"replay_ms_per_step\": %s, \"speedup\": %s, \"arena_bytes\": %lld, "
                "\"lower_bound_bytes\": %lld, \"eager_peak_bytes\": %lld, \"bitwise_equal\": %s, \"loss_first\": %.6f, "
                "\"loss_last\": %.6f}\n",
                number_or_null(eager_timed, fig.eager_ms).c_str(), number_or_null(replay_timed, fig.replay_ms).c_str(),
                number_or_null(both_timed, fig.eager_ms / fig.replay_ms).c_str(), static_cast<long long>(st.arena_bytes),
                static_cast<long long>(st.lower_bound_bytes), static_cast<long long>(st.eager_peak_bytes),
                fig.replays_compared == 0 ? "null" : fig.bitwise_equal ? "true" : "false", fig.loss_first,
                fig.loss_last);
  }
  // Every rank's replays must have matched its eager steps.
  const std::vector<uint64_t> equal = (*pg)->all_gather(fig.bitwise_equal ? 1 : 0);
  for (uint64_t e : equal) {
    if (e == 0) return 1;
  }
  return 0;
}
