// A program outside encore's tree that uses it as a user would: through the
// installed headers and libraries (pkg-config) or as a meson subproject.
// It trains a small MLP with a captured step and checks that the replayed
// steps give the same parameters, bit for bit, as eager steps from the same
// start; the exit status says whether they did. tests/consumer/consumer_test.sh
// builds it each way and runs it.
#include <cstdio>
#include <cstring>
#include <vector>

#include <encore/encore.h>

namespace {

using namespace encore;
constexpr int kWarmup = 2;   // capture()'s eager warm-up steps, on the first batch

// Trains from seed 1 for `steps` steps, eagerly or captured; returns the
// parameters' values and prints the last loss.
std::vector<std::vector<float>> train(bool captured, int steps) {
  manual_seed(1);
  nn::Mlp model({8, 16, 4});
  optim::AdamW opt(model.parameters(), {.lr = 1e-2});
  Generator data(2);
  Tensor x = zeros({32, 8}), y = zeros({32}, kInt64);
  auto refill = [&] {
    NoGradGuard no_grad;
    x.copy_(randn({32, 8}, kFloat32, kCPU, &data));
    y.copy_(argmax(x.slice(1, 0, 4), 1));   // the label: the largest of the first four inputs
  };
  Tensor loss;
  auto step = [&] {
    opt.zero_grad();
    Tensor l = cross_entropy(model.forward(x), y);
    l.backward();
    opt.step();
    return std::vector<Tensor>{l};
  };
  refill();
  if (captured) {
    absl::StatusOr<Graph> graph = capture(step, {.warmup = kWarmup, .inputs = {&x, &y}});
    if (!graph.ok()) {
      std::fprintf(stderr, "capture: %s\n", graph.status().ToString().c_str());
      return {};
    }
    for (int s = kWarmup; s < steps; ++s) {   // the warm-ups were training steps
      refill();
      if (absl::Status st = graph->replay(); !st.ok()) {
        std::fprintf(stderr, "replay: %s\n", st.ToString().c_str());
        return {};
      }
    }
    loss = graph->output(0);
  } else {
    for (int s = 0; s < steps; ++s) {
      if (s >= kWarmup) refill();
      loss = step()[0];
    }
  }
  std::printf("%s: loss after %d steps %.4f\n", captured ? "captured" : "eager", steps, loss.item<double>());
  std::vector<std::vector<float>> values;
  for (const Tensor& p : model.parameters()) values.push_back(p.to_vector<float>());
  return values;
}

}  // namespace

int main() {
  const std::vector<std::vector<float>> eager = train(false, 20), replayed = train(true, 20);
  bool same = !eager.empty() && eager.size() == replayed.size();
  for (size_t i = 0; same && i < eager.size(); ++i) {
    same = eager[i].size() == replayed[i].size() &&
           std::memcmp(eager[i].data(), replayed[i].data(), eager[i].size() * sizeof(float)) == 0;
  }
  std::printf("replayed steps %s the eager steps\n", same ? "equal" : "DIFFER FROM");
  return same ? 0 : 1;
}
