// Captured training steps that use the losses (mse, bce-with-logits, nll),
// the comparisons, gather, index_select, scatter_add, topk and multinomial,
// against eager steps bit for bit on the CPU and (where a GPU answers) on
// CUDA: parameters, losses and the drawn samples of every replay. Bad
// indices inside a replay are reported naming the op.
#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <vector>

#include "capture/graph_impl.h"
#include "encore/capture.h"
#include "encore/encore.h"
#include "encore/optim.h"
#include "tests/backends/cuda_test_util.h"
#include "tests/test_util.h"

namespace encore {
namespace {

constexpr int kSteps = 8;
constexpr int64_t kBatch = 6, kIn = 5, kClasses = 4;

// A small model whose loss sums every new loss over gathered, selected and
// scattered features; the batch (x, y, soft targets) is refilled per step.
struct Rig {
  Device dev;
  Tensor w1, w2, b2;
  Tensor x, y, soft;
  Generator gen;
  std::unique_ptr<optim::AdamW> opt;

  explicit Rig(Device d) : dev(d), gen(11, d) {
    w1 = (testing::random_tensor({8, kIn}, 1) * 0.4).to(dev).requires_grad_();
    w2 = (testing::random_tensor({kClasses, 8}, 2) * 0.4).to(dev).requires_grad_();
    b2 = zeros({kClasses}, kFloat32, dev).requires_grad_();
    x = zeros({kBatch, kIn}, kFloat32, dev);
    y = zeros({kBatch}, kInt64, dev);
    soft = zeros({kBatch, kClasses}, kFloat32, dev);
    opt = std::make_unique<optim::AdamW>(std::vector<Tensor>{w1, w2, b2}, optim::AdamWOptions{.lr = 1e-2});
  }

  void fill(int step) {
    std::vector<int64_t> labels(kBatch);
    for (int64_t i = 0; i < kBatch; ++i) labels[i] = (step * 3 + i) % kClasses;
    if (step % 2 == 1) labels[1] = -100;   // an ignored target
    NoGradGuard no_grad;
    x.copy_(testing::random_tensor({kBatch, kIn}, 100 + step));
    y.copy_(from_vector<int64_t>(labels));
    soft.copy_(sigmoid(testing::random_tensor({kBatch, kClasses}, 200 + step)));
  }

  // {loss, samples drawn from the model's distribution}.
  std::vector<Tensor> step() {
    opt->zero_grad();
    Tensor h = tanh(linear(x, w1));                                     // [B, 8]
    Tensor logits = linear(h, w2, b2);                                  // [B, C]
    Tensor safe_y = where(lt(y, 0.0), zeros({kBatch}, kInt64, dev), y);  // comparisons and where on ids
    Tensor picked = gather(h, 1, safe_y.view({kBatch, 1}).expand({kBatch, 2}));
    Tensor selected = index_select(h, 1, safe_y);
    Tensor scattered = scatter_add(zeros({kBatch, 8}, kFloat32, dev), 1, safe_y.view({kBatch, 1}), picked.slice(1, 0, 1));
    Tensor loss = nll_loss(log_softmax(logits, 1), y) +
                  binary_cross_entropy_with_logits(logits, soft, Tensor(), full({kClasses}, 2.0, kFloat32, dev)) +
                  mse_loss(picked, selected.slice(1, 0, 2)) * 0.5 + mean(topk(h, 3, 1).first) * 0.1 +
                  mean(scattered * h);
    loss.backward();
    opt->step();
    Tensor samples;
    {
      NoGradGuard no_grad;
      samples = multinomial(softmax(logits.detach(), 1), 3, true, &gen);
    }
    return {loss, samples};
  }
};

std::vector<std::vector<float>> observe(const Rig& r, const std::vector<Tensor>& out) {
  std::vector<std::vector<float>> o;
  for (const Tensor& t : out) o.push_back(t.to(kFloat32).to_vector<float>());
  for (const Tensor& t : {r.w1, r.w2, r.b2}) o.push_back(t.to_vector<float>());
  o.push_back(r.gen.state().to(kFloat32).to_vector<float>());
  return o;
}

bool same_bits(const std::vector<std::vector<float>>& a, const std::vector<std::vector<float>>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i].size() != b[i].size() || std::memcmp(a[i].data(), b[i].data(), a[i].size() * sizeof(float)) != 0) {
      return false;
    }
  }
  return true;
}

void expect_replays_match_eager(Device dev) {
  std::vector<std::vector<std::vector<float>>> eager;
  {
    Rig r(dev);
    r.fill(0);
    r.step();   // capture()'s two warm-up steps
    r.step();
    for (int i = 1; i <= kSteps; ++i) {
      r.fill(i);
      eager.push_back(observe(r, r.step()));
    }
  }
  Rig r(dev);
  r.fill(0);
  absl::StatusOr<Graph> graph = capture([&] { return r.step(); });
  ASSERT_TRUE(graph.ok()) << graph.status();
  for (int i = 1; i <= kSteps; ++i) {
    r.fill(i);
    ASSERT_TRUE(graph->replay().ok()) << "step " << i;
    EXPECT_TRUE(same_bits(observe(r, {graph->output(0), graph->output(1)}), eager[i - 1])) << "step " << i;
  }
  // The samples change from replay to replay (the offset advances on the device).
  EXPECT_NE(eager[0][1], eager[1][1]);
}

TEST(LossIndexCaptureTest, ReplaysEqualEagerStepsBitForBit) { expect_replays_match_eager(kCPU); }

TEST(LossIndexCaptureTest, CudaReplaysEqualEagerStepsBitForBit) {
  ENCORE_SKIP_WITHOUT_GPU();
  expect_replays_match_eager(Device::cuda(0));
}

// A bad class id or index in a replayed batch is skipped by the kernels and
// reported, naming the op (NOTE [ Index checks ]).
void expect_replays_report_bad_indices(Device dev) {
  Tensor x = testing::random_tensor({4, 3}, 5).to(dev).requires_grad_();
  Tensor idx = zeros({4, 1}, kInt64, dev), t = zeros({4}, kInt64, dev);
  auto step = [&] {
    Tensor loss = nll_loss(log_softmax(x, 1), t) + sum(gather(x, 1, idx));
    loss.backward();
    return std::vector<Tensor>{loss};
  };
  step();
  absl::StatusOr<Graph> graph = capture(step);
  ASSERT_TRUE(graph.ok()) << graph.status();
  auto replay = [&] {
    absl::Status st = graph->replay();
    if (!st.ok()) return st;
    return status_of([&] { synchronize(dev); });
  };
  EXPECT_TRUE(replay().ok());
  {
    NoGradGuard no_grad;
    idx.copy_(from_vector<int64_t>({0, 1, 7, 2}, {4, 1}).to(dev));
  }
  absl::Status st = replay();
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << st;
  EXPECT_NE(st.message().find("gather"), absl::string_view::npos) << st;
  {
    NoGradGuard no_grad;
    idx.fill_(0);
    t.copy_(from_vector<int64_t>({0, 5, 1, 2}).to(dev));
  }
  st = replay();
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << st;
  EXPECT_NE(st.message().find("nll_loss"), absl::string_view::npos) << st;
  {
    NoGradGuard no_grad;
    t.fill_(1);
  }
  EXPECT_TRUE(replay().ok());
}

TEST(LossIndexCaptureTest, ReplayReportsBadIndices) { expect_replays_report_bad_indices(kCPU); }

// A timed replay (the profiler's) reports bad data as replay() does, and
// its kernels ran: the output holds its value.
TEST(LossIndexCaptureTest, TimedReplayReportsBadIndices) {
  Tensor x = testing::random_tensor({4, 3}, 5).requires_grad_();
  Tensor t = from_vector<int64_t>({1, 1, 1, 1});
  auto step = [&] {
    Tensor loss = nll_loss(log_softmax(x, 1), t);
    loss.backward();
    return std::vector<Tensor>{loss};
  };
  step();
  absl::StatusOr<Graph> graph = capture(step);
  ASSERT_TRUE(graph.ok()) << graph.status();
  {
    NoGradGuard no_grad;
    t.copy_(from_vector<int64_t>({0, 5, 1, 2}));
  }
  std::vector<int64_t> stamps;
  const absl::Status st = graph->internals().replay_timed(stamps);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << st;
  EXPECT_NE(st.message().find("nll_loss"), absl::string_view::npos) << st;
  EXPECT_EQ(stamps.size(), graph->stats().kernels + 1);
  EXPECT_NO_THROW((void)graph->output(0).item<float>());
}

TEST(LossIndexCaptureTest, CudaReplayReportsBadIndices) {
  ENCORE_SKIP_WITHOUT_GPU();
  expect_replays_report_bad_indices(Device::cuda(0));
}

}  // namespace
}  // namespace encore
