// A small convolutional network trained on scikit-learn's handwritten digits
// (1,797 8x8 images; ./run fetches the file from Debian's python3-sklearn):
// conv - batch norm - ReLU - max pool, twice, then a linear classifier, SGD
// with momentum. Two copies of the model train side by side on the same
// batches: one eagerly, one through a GraphedStep (eager warm-up, capture,
// then every step a replay). Prints held-out accuracy, ms per step of both
// (timed in the same period, alternating), the arena against its lower
// bound, and whether the two copies stayed equal bit for bit (every loss,
// every parameter, the running statistics).
//
//   build/examples/train_cnn                         # data/digits.csv.gz, 8 epochs
//   build/examples/train_cnn --epochs=20 --device=cuda
//   OMP_NUM_THREADS=1 mpirun -np 2 build/examples/train_cnn   # data parallel
//
// Under mpirun (or srun) both copies are wrapped in DistributedDataParallel:
// each step's global batch of --batch x ranks images is split between the
// ranks, gradients are averaged inside the step (captured too), and rank 0
// prints. Batch norm's running statistics follow rank 0's (broadcast after
// every step's backward, inside the captured step too), so every rank holds
// the same model and the same held-out accuracy.
//
// Exit status 1 when held-out accuracy is below --min_accuracy, when the
// copies differ in any bit, or when a graphed step fell back to eager.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <random>
#include <string>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_format.h"
#include "encore/encore.h"
#include "examples/digits.h"
#include "examples/example_main.h"
#include "tools/flags.h"

ABSL_FLAG(std::string, data, "data/digits.csv.gz", "scikit-learn's digits.csv.gz (or the unzipped CSV).");
ABSL_FLAG(int64_t, epochs, 8, "Passes over the training split, 1..10000.");
ABSL_FLAG(int64_t, batch, 32, "Images per step, 1..1024 (the last partial batch of an epoch is dropped).");
ABSL_FLAG(double, lr, 0.05, "SGD learning rate (momentum 0.9), in [1e-12, 1e6].");
ABSL_FLAG(double, min_accuracy, 0.95, "Exit 1 below this held-out accuracy, in [0, 1].");
ABSL_FLAG(uint64_t, seed, 0, "Seed for the split, the initialisation and the batch order.");
ABSL_FLAG(std::string, device, "cpu", "cpu or cuda.");

namespace {

using namespace encore;
using examples::Digits;

// [B, 1, 8, 8] -> [B, 10].
std::unique_ptr<nn::Sequential> make_model(uint64_t seed, Device device) {
  manual_seed(seed);   // the layers draw their initial weights from the default generator
  auto net = std::make_unique<nn::Sequential>();
  net->emplace<nn::Conv2d>(1, 16, 3, 1, 1);     // [B, 16, 8, 8]
  net->emplace<nn::BatchNorm2d>(16);
  net->emplace<nn::ReLU>();
  net->emplace<nn::MaxPool2d>(2);               // [B, 16, 4, 4]
  net->emplace<nn::Conv2d>(16, 32, 3, 1, 1);    // [B, 32, 4, 4]
  net->emplace<nn::BatchNorm2d>(32);
  net->emplace<nn::ReLU>();
  net->emplace<nn::MaxPool2d>(2);               // [B, 32, 2, 2]
  net->emplace<nn::Flatten>();                  // [B, 128]
  net->emplace<nn::Linear>(128, Digits::kClasses);
  net->to(device);
  return net;
}

struct Copy {
  Copy(uint64_t seed, Device device, const std::shared_ptr<dist::ProcessGroup>& pg)
      : net(make_model(seed, device)),
        ddp(pg->world_size() > 1 ? std::make_unique<dist::DistributedDataParallel>(*net, pg) : nullptr),
        opt(net->parameters(), {.lr = absl::GetFlag(FLAGS_lr), .momentum = 0.9}) {}
  std::vector<Tensor> step(const std::vector<Tensor>& in) {
    opt.zero_grad();
    Tensor loss = cross_entropy(net->forward(in[0]), in[1]);
    loss.backward();
    if (ddp) ddp->finish();   // a no-op: backward waited for the last bucket
    opt.step();
    return {loss};
  }
  std::unique_ptr<nn::Sequential> net;
  std::unique_ptr<dist::DistributedDataParallel> ddp;   // with more than one process
  optim::SGD opt;
};

double accuracy(nn::Sequential& net, const Digits& d, const std::vector<int64_t>& idx, Device device) {
  NoGradGuard no_grad;
  net.eval();
  int64_t right = 0;
  for (size_t i = 0; i < idx.size(); i += 128) {
    const size_t n = std::min<size_t>(128, idx.size() - i);
    std::vector<int64_t> guess = argmax(net.forward(d.images(idx, i, n).to(device)), 1).to_vector<int64_t>();
    std::vector<int64_t> truth = d.labels(idx, i, n).to_vector<int64_t>();
    for (size_t k = 0; k < n; ++k) right += guess[k] == truth[k];
  }
  net.train();
  return static_cast<double>(right) / static_cast<double>(idx.size());
}

// The flags' ranges (tools/flags.h: one message, exit 2).
absl::Status check_flags() {
  const std::string device = absl::GetFlag(FLAGS_device);
  for (absl::Status s : {tools::in_range("--epochs", absl::GetFlag(FLAGS_epochs), 1, 10000),
                         tools::in_range("--batch", absl::GetFlag(FLAGS_batch), 1, 1024),
                         tools::finite_in_range("--lr", absl::GetFlag(FLAGS_lr), 1e-12, 1e6),
                         tools::finite_in_range("--min_accuracy", absl::GetFlag(FLAGS_min_accuracy), 0, 1)}) {
    if (!s.ok()) return s;
  }
  return examples::check_device_flag(device);
}

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int run();

int main(int argc, char** argv) { return examples::example_main("train_cnn", argc, argv, check_flags, run); }

int run() {
  absl::StatusOr<std::shared_ptr<dist::ProcessGroup>> pg = dist::ProcessGroup::create();
  if (!pg.ok()) {
    std::cerr << pg.status() << "\n";
    return 1;
  }
  const int64_t ranks = (*pg)->world_size(), rank = (*pg)->rank();
  if (rank != 0 && std::freopen("/dev/null", "w", stdout) == nullptr) return 1;   // only rank 0 prints
  const Device device = absl::GetFlag(FLAGS_device) == "cpu" ? kCPU : ranks > 1 ? (*pg)->device() : Device::cuda(0);
  absl::StatusOr<Digits> digits = examples::load_digits(absl::GetFlag(FLAGS_data));
  if (!digits.ok()) {
    std::cerr << digits.status() << "\n";
    return 1;
  }
  const uint64_t seed = absl::GetFlag(FLAGS_seed);
  const examples::Split split = digits->split(0.2, seed);
  const int64_t B = absl::GetFlag(FLAGS_batch), epochs = absl::GetFlag(FLAGS_epochs);
  const int64_t steps_per_epoch = static_cast<int64_t>(split.train.size()) / (B * ranks);
  std::printf("digits: %lld images (%zu train, %zu held out), 8x8; batch %lld x %lld ranks, %lld steps per epoch\n",
              static_cast<long long>(digits->count()), split.train.size(), split.test.size(),
              static_cast<long long>(B), static_cast<long long>(ranks), static_cast<long long>(steps_per_epoch));

  Copy eager(seed, device, *pg), graphed_copy(seed, device, *pg);
  GraphedStep graphed([&](const std::vector<Tensor>& in) { return graphed_copy.step(in); });
  std::mt19937_64 rng(seed);
  std::vector<int64_t> order = split.train;
  std::vector<double> eager_ms, replay_ms;
  bool losses_equal = true;
  float loss = 0;
  auto ms_since = [](std::chrono::steady_clock::time_point t) {
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t).count();
  };
  for (int64_t epoch = 1; epoch <= epochs; ++epoch) {
    std::shuffle(order.begin(), order.end(), rng);
    for (int64_t s = 0; s < steps_per_epoch; ++s) {
      const size_t first = static_cast<size_t>((s * ranks + rank) * B);   // this rank's share of the global batch
      const std::vector<Tensor> in = {digits->images(order, first, B).to(device),
                                      digits->labels(order, first, B).to(device)};
      auto t0 = std::chrono::steady_clock::now();
      const Tensor le = eager.step(in)[0];
      const float eager_loss = le.item<float>();
      eager_ms.push_back(ms_since(t0));
      t0 = std::chrono::steady_clock::now();
      const Tensor lg = graphed(in)[0];
      const float graphed_loss = lg.item<float>();
      if (graphed.stats().replays > 1) replay_ms.push_back(ms_since(t0));   // past warm-up and capture
      losses_equal = losses_equal && std::memcmp(&eager_loss, &graphed_loss, sizeof(float)) == 0;
      loss = graphed_loss;
    }
    std::printf("epoch %lld  loss %.4f  held-out accuracy %.1f%%\n", static_cast<long long>(epoch), loss,
                100 * accuracy(*graphed_copy.net, *digits, split.test, device));
  }
  const bool state_equal = examples::same_bits(eager.net->state_tensors(), graphed_copy.net->state_tensors());
  const double acc_eager = accuracy(*eager.net, *digits, split.test, device);
  const double acc = accuracy(*graphed_copy.net, *digits, split.test, device);
  const GraphedStats& s = graphed.stats();
  const std::vector<GraphedGraph> graphs = graphed.graphs();   // a copy: keep it while reading it
  if (graphs.empty()) {
    std::cerr << "the graphed step captured no graph\n";
    return 1;
  }
  const CaptureStats& c = graphs.front().capture;
  std::printf("held-out accuracy: graphed %.2f%%, eager %.2f%% (%zu images)\n", 100 * acc, 100 * acc_eager,
              split.test.size());
  // No plain replay ran in a run of three steps or fewer (two eager calls, then the capture): no ratio then.
  const std::string replay_text =
      replay_ms.empty() ? std::string("replay n/a (no plain replay ran)")
                        : absl::StrFormat("replay %.3f (%.2fx)", median(replay_ms), median(eager_ms) / median(replay_ms));
  std::printf("ms/step (median, same period): eager %.3f, %s; %lld replays, %lld eager calls\n", median(eager_ms),
              replay_text.c_str(), static_cast<long long>(s.replays), static_cast<long long>(s.eager_calls));
  std::printf("arena %.1f KiB, lower bound %.1f KiB (%.2fx); %lld kernels per step\n", c.arena_bytes / 1024.0,
              c.lower_bound_bytes / 1024.0, c.arena_bytes / std::max(1.0, static_cast<double>(c.lower_bound_bytes)),
              static_cast<long long>(c.kernels));
  const bool equal = losses_equal && state_equal;
  std::printf("replay matched eager bit for bit: %s (every loss %s, parameters and running statistics %s)\n",
              equal ? "yes" : "NO", losses_equal ? "equal" : "DIFFER", state_equal ? "equal" : "DIFFER");
  return acc >= absl::GetFlag(FLAGS_min_accuracy) && equal && s.eager_fallbacks == 0 ? 0 : 1;
}
