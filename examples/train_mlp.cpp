// Trains an MLP student to imitate a fixed random teacher network, eagerly.
//
//   build/examples/train_mlp [--steps=1000] [--batch=128] [--hidden=128]
//
// The task generates itself: inputs x ~ N(0, 1) of width 32, labels = argmax
// of a random teacher MLP 32-64-10 (tanh). The student (32-hidden-10, ReLU)
// sees fresh batches every step and must reach a cross-entropy below
// --target_loss on a held-out batch; the exit status says whether it did.
#include <chrono>
#include <cstdio>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "encore/encore.h"
#include "encore/nn.h"
#include "encore/optim.h"
#include "tools/flags.h"

ABSL_FLAG(int64_t, steps, 1000, "Training steps, 1..100000000.");
ABSL_FLAG(int64_t, batch, 128, "Examples per step, 1..65536.");
ABSL_FLAG(int64_t, hidden, 128, "Student hidden width, 1..65536.");
ABSL_FLAG(double, lr, 3e-3, "AdamW learning rate, in [0, 1e6].");
ABSL_FLAG(double, target_loss, 0.35, "Held-out loss the student must reach.");
ABSL_FLAG(uint64_t, seed, 1, "Seed for teacher, student and data.");

int main(int argc, char** argv) {
  using namespace encore;
  absl::SetProgramUsageMessage("Trains an MLP to imitate a random teacher network (eager, CPU).");
  if (tools::parse_flags(argc, argv, "train_mlp").size() != 1) {
    std::fprintf(stderr, "train_mlp: unexpected arguments (see --help)\n");
    return 2;
  }
  for (absl::Status s : {tools::in_range("--steps", absl::GetFlag(FLAGS_steps), 1, 100000000),
                         tools::in_range("--batch", absl::GetFlag(FLAGS_batch), 1, 65536),
                         tools::in_range("--hidden", absl::GetFlag(FLAGS_hidden), 1, 65536),
                         tools::finite_in_range("--lr", absl::GetFlag(FLAGS_lr), 0, 1e6),
                         tools::finite_in_range("--target_loss", absl::GetFlag(FLAGS_target_loss), 0, 1e6)}) {
    if (!s.ok()) return tools::flag_error("train_mlp", s);
  }
  const int64_t B = absl::GetFlag(FLAGS_batch), steps = absl::GetFlag(FLAGS_steps);
  double held_out = 0;
  absl::Status status = status_of([&] {
    manual_seed(absl::GetFlag(FLAGS_seed));
    Generator data_gen(absl::GetFlag(FLAGS_seed) + 1);
    nn::Mlp teacher({32, 64, 10}, nn::Activation::kTanh);
    nn::Mlp student({32, absl::GetFlag(FLAGS_hidden), 10});
    optim::AdamW opt(student.parameters(), {.lr = absl::GetFlag(FLAGS_lr), .weight_decay = 0.0});
    auto make_batch = [&](Tensor& x, Tensor& y) {
      NoGradGuard no_grad;
      x.copy_(randn({B, 32}, kFloat32, kCPU, &data_gen));
      y.copy_(argmax(teacher.forward(x), 1));
    };
    Tensor x = zeros({B, 32}), y = zeros({B}, kInt64);
    // Each line: the mean time of the steps since the line before (100, or
    // fewer in the last stretch of a run).
    auto t0 = std::chrono::steady_clock::now();
    int64_t timed_from = 1;   // the first step since t0
    for (int64_t step = 1; step <= steps; ++step) {
      make_batch(x, y);
      opt.zero_grad();
      Tensor loss = cross_entropy(student.forward(x), y);
      loss.backward();
      opt.step();
      if (step % 100 == 0 || step == steps) {
        const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
        std::printf("step %4lld  loss %.4f  %.3f ms/step\n", static_cast<long long>(step), loss.item<double>(),
                    ms / static_cast<double>(step - timed_from + 1));
        t0 = std::chrono::steady_clock::now();
        timed_from = step + 1;
      }
    }
    NoGradGuard no_grad;
    make_batch(x, y);
    held_out = cross_entropy(student.forward(x), y).item<double>();
  });
  if (!status.ok()) {
    std::fprintf(stderr, "train_mlp: %s\n", status.ToString().c_str());
    return 1;
  }
  const bool reached = held_out < absl::GetFlag(FLAGS_target_loss);
  std::printf("held-out loss %.4f (target %.2f): %s\n", held_out, absl::GetFlag(FLAGS_target_loss),
              reached ? "reached" : "NOT reached");
  return reached ? 0 : 1;
}
