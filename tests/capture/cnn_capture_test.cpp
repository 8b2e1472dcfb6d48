// A convolutional training step (conv, batch norm, ReLU, max pool, conv,
// batch norm, average pool, flatten, linear, cross-entropy, SGD with
// momentum) captured on the CPU and replayed: every replay equals the eager
// step bit for bit, the loss, the parameters and the batch-norm running
// statistics (updated inside the captured step) included; an eval step
// captured beside it reads the running statistics the training replays wrote.
// With momentum = nullopt (a cumulative average) the update factor is read
// from num_batches_tracked on the device, so it changes at every replay.
#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "encore/capture.h"
#include "encore/encore.h"
#include "encore/nn.h"
#include "encore/optim.h"
#include "tests/test_util.h"

namespace encore {
namespace {

constexpr int kSteps = 12;

class SmallCnn : public nn::Module {
 public:
  explicit SmallCnn(std::optional<double> momentum) {
    conv1 = &register_module("conv1", std::make_unique<nn::Conv2d>(1, 6, 3, 1, 1));
    bn1 = &register_module("bn1", std::make_unique<nn::BatchNorm2d>(6, 1e-5, momentum));
    conv2 = &register_module("conv2", std::make_unique<nn::Conv2d>(6, 8, 3, 1, 1, 1, 2));   // grouped
    bn2 = &register_module("bn2", std::make_unique<nn::BatchNorm2d>(8, 1e-5, momentum));
    fc = &register_module("fc", std::make_unique<nn::Linear>(8 * 2 * 2, 4));
  }
  Tensor forward(const Tensor& x) const {
    Tensor h = nn::MaxPool2d(2).forward(relu(bn1->forward(conv1->forward(x))));   // [B, 6, 4, 4]
    h = nn::AvgPool2d(2).forward(relu(bn2->forward(conv2->forward(h))));           // [B, 8, 2, 2]
    return fc->forward(nn::Flatten().forward(h));
  }
  nn::Conv2d* conv1;
  nn::BatchNorm2d* bn1;
  nn::Conv2d* conv2;
  nn::BatchNorm2d* bn2;
  nn::Linear* fc;
};

struct Rig {
  std::unique_ptr<SmallCnn> model;
  std::unique_ptr<optim::SGD> opt;
  Tensor x = zeros({6, 1, 8, 8}), y = zeros({6}, kInt64);
  std::vector<Tensor> step() {
    opt->zero_grad();
    Tensor loss = cross_entropy(model->forward(x), y);
    loss.backward();
    opt->step();
    return {loss};
  }
  void fill(int i) {
    NoGradGuard no_grad;
    x.copy_(testing::random_tensor({6, 1, 8, 8}, 200 + i));
    y.copy_(from_vector<int64_t>({0, 1, 2, 3, i % 4, (i + 1) % 4}));
  }
};

std::unique_ptr<Rig> make_rig(std::optional<double> momentum) {
  manual_seed(11);
  auto r = std::make_unique<Rig>();
  r->model = std::make_unique<SmallCnn>(momentum);
  r->opt = std::make_unique<optim::SGD>(r->model->parameters(), optim::SgdOptions{.lr = 0.05, .momentum = 0.9});
  return r;
}

// Every parameter and buffer (running stats, num_batches_tracked) as bytes.
std::vector<std::vector<char>> state_bytes(const nn::Module& m) {
  std::vector<std::vector<char>> out;
  std::vector<Tensor> all = m.parameters();
  for (auto& [name, b] : m.named_buffers()) all.push_back(b);
  for (const Tensor& t : all) {
    const Tensor c = t.contiguous();
    const char* p = static_cast<const char*>(c.data_ptr());
    out.emplace_back(p, p + c.numel() * dtype_size(c.dtype()));
  }
  return out;
}

// kSteps replays of the captured training step against an eager twin, bit
// for bit; returns the replayed rig.
std::unique_ptr<Rig> expect_replays_equal_eager(std::optional<double> momentum) {
  std::vector<float> eager_losses;
  std::vector<std::vector<std::vector<char>>> eager_state;
  {
    auto r = make_rig(momentum);
    r->fill(0);
    r->step();   // what capture()'s warm-up runs: two steps on batch 0
    r->step();
    for (int i = 1; i <= kSteps; ++i) {
      r->fill(i);
      eager_losses.push_back(r->step()[0].item<float>());
      eager_state.push_back(state_bytes(*r->model));
    }
  }
  auto r = make_rig(momentum);
  r->fill(0);
  absl::StatusOr<Graph> graph = capture([&] { return r->step(); });
  EXPECT_TRUE(graph.ok()) << graph.status();
  if (!graph.ok()) return nullptr;
  for (int i = 1; i <= kSteps; ++i) {
    r->fill(i);
    EXPECT_TRUE(graph->replay().ok());
    const float loss = graph->output(0).item<float>();
    EXPECT_EQ(std::memcmp(&loss, &eager_losses[i - 1], sizeof(float)), 0)
        << "step " << i << ": replay " << loss << " eager " << eager_losses[i - 1];
    const auto st = state_bytes(*r->model);
    EXPECT_EQ(st.size(), eager_state[i - 1].size());
    for (size_t k = 0; k < st.size() && k < eager_state[i - 1].size(); ++k) {
      EXPECT_EQ(st[k], eager_state[i - 1][k]) << "step " << i << " tensor " << k;
    }
  }
  return r;
}

TEST(CnnCaptureTest, TrainingReplaysEqualEagerStepsWithRunningStats) {
  std::unique_ptr<Rig> r = expect_replays_equal_eager(0.1);
  ASSERT_NE(r, nullptr);
  // The running statistics moved away from their initial values, and the
  // batch counter counts the two warm-up steps and every replay.
  EXPECT_NE(r->model->bn1->running_mean.to_vector<float>(), std::vector<float>(6, 0.f));
  EXPECT_EQ(r->model->bn1->num_batches_tracked.item<int64_t>(), 2 + kSteps);

  // Eval: a captured forward uses the running statistics the training replays wrote.
  r->model->eval();
  Tensor logits;
  {
    NoGradGuard no_grad;
    logits = r->model->forward(r->x);
  }
  absl::StatusOr<Graph> eval_graph = capture([&] {
    NoGradGuard no_grad;
    return std::vector<Tensor>{r->model->forward(r->x)};
  });
  ASSERT_TRUE(eval_graph.ok()) << eval_graph.status();
  ASSERT_TRUE(eval_graph->replay().ok());
  EXPECT_EQ(eval_graph->output(0).to_vector<float>(), logits.to_vector<float>());
  EXPECT_EQ(r->model->bn1->num_batches_tracked.item<int64_t>(), 2 + kSteps);   // eval counts nothing
}

// momentum = nullopt: each replay's factor is 1 / the count it reaches. A
// factor frozen at the capture run's 1/3 would leave the running mean of the
// eager twin after the first replay; the last replay's factor is 1 / (2 +
// kSteps), so the running mean is the mean of every batch's mean.
TEST(CnnCaptureTest, CumulativeBatchNormReplaysEqualEagerSteps) {
  std::unique_ptr<Rig> r = expect_replays_equal_eager(std::nullopt);
  ASSERT_NE(r, nullptr);
  EXPECT_EQ(r->model->bn1->num_batches_tracked.item<int64_t>(), 2 + kSteps);
  absl::StatusOr<Graph> g = capture([&] { return r->step(); });
  ASSERT_TRUE(g.ok()) << g.status();
  int factors = 0;   // the batch norms' momentum arguments: unused (0), the factor is not frozen
  for (const FrozenValue& f : g->frozen()) {
    if (std::string(f.op) != "batch_norm" || f.name != "momentum") continue;
    EXPECT_EQ(f.value, "0") << "node " << f.node;
    ++factors;
  }
  EXPECT_EQ(factors, 2);
}

}  // namespace
}  // namespace encore
