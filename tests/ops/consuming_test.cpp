// The consuming (rvalue) forms of the elementwise ops (NOTE [ Writing into a
// dying temporary ], src/ops/op_utils.h): they write into the operand's
// buffer exactly when nothing else can see it, leave the operand undefined,
// and give the bits of the borrowing forms, forward and backward.
#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "encore/encore.h"
#include "src/autograd/node.h"
#include "tests/test_util.h"

namespace encore {
namespace {

using testing::random_tensor;
using testing::values;

// A fresh temporary of its own buffer: a computed tensor, not a leaf.
Tensor temp(Shape shape, uint64_t seed) { return random_tensor(std::move(shape), seed) * 1.0; }

TEST(ConsumingTest, UnaryWritesIntoASoleTemporaryAndLeavesItUndefined) {
  Tensor t = temp({4, 5}, 1);
  const std::vector<double> in = values(t);
  const void* buffer = t.data_ptr();
  Tensor y = relu(std::move(t));
  EXPECT_FALSE(t.defined());   // NOLINT(bugprone-use-after-move): consumed on purpose
  EXPECT_EQ(y.data_ptr(), buffer);
  const std::vector<double> out = values(y);
  for (size_t i = 0; i < in.size(); ++i) EXPECT_EQ(out[i], in[i] > 0 ? in[i] : 0.0) << i;
}

TEST(ConsumingTest, EveryConsumingFormGivesTheBorrowingFormsBits) {
  const std::vector<std::pair<std::string, std::function<Tensor(Tensor&&)>>> unary = {
      {"exp", [](Tensor&& t) { return exp(std::move(t)); }},
      {"log", [](Tensor&& t) { return log(abs(std::move(t))); }},
      {"sqrt", [](Tensor&& t) { return sqrt(abs(std::move(t))); }},
      {"rsqrt", [](Tensor&& t) { return rsqrt(abs(std::move(t)) + 0.5); }},
      {"pow", [](Tensor&& t) { return pow(std::move(t), 3.0); }},
      {"tanh", [](Tensor&& t) { return tanh(std::move(t)); }},
      {"sigmoid", [](Tensor&& t) { return sigmoid(std::move(t)); }},
      {"relu", [](Tensor&& t) { return relu(std::move(t)); }},
      {"gelu", [](Tensor&& t) { return gelu(std::move(t), GeluApprox::kNone); }},
      {"gelu_tanh", [](Tensor&& t) { return gelu(std::move(t), GeluApprox::kTanh); }},
      {"silu", [](Tensor&& t) { return silu(std::move(t)); }},
      {"clamp", [](Tensor&& t) { return clamp(std::move(t), -0.5, 0.25); }},
  };
  const std::vector<std::pair<std::string, std::function<Tensor(const Tensor&)>>> borrowing = {
      {"exp", [](const Tensor& t) { return exp(t); }},
      {"log", [](const Tensor& t) { Tensor a = abs(t); return log(a); }},
      {"sqrt", [](const Tensor& t) { Tensor a = abs(t); return sqrt(a); }},
      {"rsqrt", [](const Tensor& t) { Tensor a = abs(t); Tensor b = a + 0.5; return rsqrt(b); }},
      {"pow", [](const Tensor& t) { return pow(t, 3.0); }},
      {"tanh", [](const Tensor& t) { return tanh(t); }},
      {"sigmoid", [](const Tensor& t) { return sigmoid(t); }},
      {"relu", [](const Tensor& t) { return relu(t); }},
      {"gelu", [](const Tensor& t) { return gelu(t, GeluApprox::kNone); }},
      {"gelu_tanh", [](const Tensor& t) { return gelu(t, GeluApprox::kTanh); }},
      {"silu", [](const Tensor& t) { return silu(t); }},
      {"clamp", [](const Tensor& t) { return clamp(t, -0.5, 0.25); }},
  };
  for (size_t k = 0; k < unary.size(); ++k) {
    SCOPED_TRACE(unary[k].first);
    for (bool grad : {false, true}) {
      // The same leaf twice: through the consuming form, then the borrowing one.
      Tensor x = random_tensor({3, 7}, 5 + k);
      if (grad) x.requires_grad_();
      Tensor ya = unary[k].second(x * 1.0);
      Tensor h = x * 1.0;
      Tensor yb = borrowing[k].second(h);
      EXPECT_EQ(values(ya), values(yb));
      if (!grad) continue;
      const Tensor g = random_tensor({3, 7}, 99);
      ya.backward(g);
      const std::vector<double> ga = values(x.grad());
      x.set_grad(Tensor());
      yb.backward(g);
      EXPECT_EQ(ga, values(x.grad()));
    }
  }
}

// A buffer something else can see is never written: another handle, a view,
// a saved tensor, a leaf.
TEST(ConsumingTest, ABufferSeenElsewhereIsLeftAlone) {
  {
    Tensor t = temp({6}, 2);
    Tensor other = t;   // a second handle on the same tensor
    const std::vector<double> before = values(other);
    Tensor y = exp(std::move(t));
    EXPECT_FALSE(t.defined());   // NOLINT(bugprone-use-after-move)
    EXPECT_NE(y.data_ptr(), other.data_ptr());
    EXPECT_EQ(values(other), before);
  }
  {
    Tensor base = temp({2, 3}, 3);
    const std::vector<double> before = values(base);
    Tensor z = relu(base.view({3, 2}));   // a view of base
    EXPECT_NE(z.data_ptr(), base.data_ptr());
    EXPECT_EQ(values(base), before);
  }
  {
    // exp saves its output for backward: relu must not overwrite it.
    Tensor x = random_tensor({8}, 4).requires_grad_();
    Tensor e = exp(x * 1.0);
    const void* saved = e.data_ptr();
    Tensor y = relu(std::move(e));
    EXPECT_NE(y.data_ptr(), saved);
    y.sum().backward();
    Tensor x2 = random_tensor({8}, 4).requires_grad_();
    Tensor e2 = exp(x2);
    relu(e2).sum().backward();
    EXPECT_EQ(values(x.grad()), values(x2.grad()));
  }
  {
    // A leaf that requires grad keeps its values even when moved in.
    Tensor w = random_tensor({5}, 6).requires_grad_();
    const void* buffer = w.data_ptr();
    Tensor y = tanh(std::move(w));
    EXPECT_NE(y.data_ptr(), buffer);
  }
}

TEST(ConsumingTest, BinaryWritesIntoTheOperandOfTheOutputsShape) {
  Tensor big = temp({4, 3}, 7), row = temp({3}, 8);
  const std::vector<double> vb = values(big), vr = values(row);
  const void* big_buffer = big.data_ptr();
  const void* row_buffer = row.data_ptr();
  // row broadcasts: its buffer is too small; big's is taken.
  Tensor y = std::move(row) - std::move(big);
  EXPECT_FALSE(big.defined());   // NOLINT(bugprone-use-after-move)
  EXPECT_FALSE(row.defined());   // NOLINT(bugprone-use-after-move)
  EXPECT_EQ(y.data_ptr(), big_buffer);
  EXPECT_NE(y.data_ptr(), row_buffer);
  const std::vector<double> out = values(y);
  for (int64_t i = 0; i < 12; ++i) EXPECT_EQ(out[i], static_cast<double>(static_cast<float>(vr[i % 3] - vb[i]))) << i;
}

// mul saves each operand for the other's gradient, div saves its divisor:
// those buffers stay, and the gradients are the borrowing forms' bits.
TEST(ConsumingTest, SavedOperandsOfMulAndDivStay) {
  for (const char* op : {"mul", "div"}) {
    SCOPED_TRACE(op);
    auto run = [&](bool consuming, Tensor& a, Tensor& b, const void** a_buf, const void** b_buf) {
      Tensor ta = a * 1.0, tb = abs(b * 1.0) + 0.5;
      *a_buf = ta.data_ptr();
      *b_buf = tb.data_ptr();
      const bool is_mul = std::string(op) == "mul";
      if (consuming) return is_mul ? std::move(ta) * std::move(tb) : std::move(ta) / std::move(tb);
      return is_mul ? ta * tb : ta / tb;
    };
    Tensor a1 = random_tensor({2, 5}, 10).requires_grad_(), b1 = random_tensor({2, 5}, 11).requires_grad_();
    Tensor a2 = random_tensor({2, 5}, 10).requires_grad_(), b2 = random_tensor({2, 5}, 11).requires_grad_();
    const void *abuf = nullptr, *bbuf = nullptr, *unused = nullptr;
    Tensor y1 = run(true, a1, b1, &abuf, &bbuf);
    if (std::string(op) == "mul") {
      EXPECT_NE(y1.data_ptr(), abuf);   // a is saved for b's gradient
    }
    EXPECT_NE(y1.data_ptr(), bbuf);
    Tensor y2 = run(false, a2, b2, &unused, &unused);
    EXPECT_EQ(values(y1), values(y2));
    y1.sum().backward();
    y2.sum().backward();
    EXPECT_EQ(values(a1.grad()), values(a2.grad()));
    EXPECT_EQ(values(b1.grad()), values(b2.grad()));
  }
  // Without gradients nothing is saved: mul writes into its first operand.
  Tensor a = temp({3}, 12), b = temp({3}, 13);
  const void* buffer = a.data_ptr();
  EXPECT_EQ((std::move(a) * std::move(b)).data_ptr(), buffer);
}

// The tensor-scalar forms and neg: each writes into a sole temporary and
// gives the borrowing form's bits and gradient; rdiv, which saves its
// tensor for backward, leaves it alone when a gradient is wanted.
TEST(ConsumingTest, ScalarFormsWriteIntoTheTemporaryAndKeepBits) {
  const std::vector<std::pair<std::string, std::function<Tensor(Tensor&&)>>> consuming = {
      {"t+1.5", [](Tensor&& t) { return std::move(t) + 1.5; }},
      {"1.5+t", [](Tensor&& t) { return 1.5 + std::move(t); }},
      {"t-0.25", [](Tensor&& t) { return std::move(t) - 0.25; }},
      {"2-t", [](Tensor&& t) { return 2.0 - std::move(t); }},
      {"t*3", [](Tensor&& t) { return std::move(t) * 3.0; }},
      {"3*t", [](Tensor&& t) { return 3.0 * std::move(t); }},
      {"t/4", [](Tensor&& t) { return std::move(t) / 4.0; }},
      {"2/t", [](Tensor&& t) { return 2.0 / std::move(t); }},
      {"-t", [](Tensor&& t) { return -std::move(t); }},
  };
  const std::vector<std::function<Tensor(const Tensor&)>> borrowing = {
      [](const Tensor& t) { return t + 1.5; }, [](const Tensor& t) { return 1.5 + t; },
      [](const Tensor& t) { return t - 0.25; }, [](const Tensor& t) { return 2.0 - t; },
      [](const Tensor& t) { return t * 3.0; }, [](const Tensor& t) { return 3.0 * t; },
      [](const Tensor& t) { return t / 4.0; }, [](const Tensor& t) { return 2.0 / t; },
      [](const Tensor& t) { return -t; },
  };
  for (size_t k = 0; k < consuming.size(); ++k) {
    SCOPED_TRACE(consuming[k].first);
    {
      Tensor t = temp({9}, 30 + k);
      const void* buffer = t.data_ptr();
      Tensor h = temp({9}, 30 + k);
      Tensor y = consuming[k].second(std::move(t));
      EXPECT_EQ(y.data_ptr(), buffer);
      EXPECT_EQ(values(y), values(borrowing[k](h)));
    }
    Tensor x = random_tensor({9}, 40 + k).requires_grad_();
    Tensor t = x * 1.0;
    const void* buffer = t.data_ptr();
    Tensor ya = consuming[k].second(std::move(t));
    if (consuming[k].first == std::string("2/t")) {
      EXPECT_NE(ya.data_ptr(), buffer);   // saved for the backward
    }
    Tensor h = x * 1.0;
    Tensor yb = borrowing[k](h);
    EXPECT_EQ(values(ya), values(yb));
    ya.sum().backward();
    const std::vector<double> ga = values(x.grad());
    x.set_grad(Tensor());
    yb.sum().backward();
    EXPECT_EQ(ga, values(x.grad()));
  }
}

// A unary backward given the gradient's only handle (as the engine gives it)
// writes the input's gradient into that buffer; given one seen elsewhere (a
// caller's root gradient) it leaves it alone. Same bits either way, for
// every unary op with a backward (plain loops, blocked vector math, pow's
// shortcuts), in f32, bf16 and f16, with a transposed (strided) input and
// enough elements to split over threads.
TEST(ConsumingTest, UnaryBackwardWritesIntoASoleGradient) {
  const std::vector<std::pair<std::string, std::function<Tensor(const Tensor&)>>> ops = {
      {"exp", [](const Tensor& t) { return exp(t); }},
      {"log", [](const Tensor& t) { return log(t); }},
      {"sqrt", [](const Tensor& t) { return sqrt(t); }},
      {"rsqrt", [](const Tensor& t) { return rsqrt(t); }},
      {"abs", [](const Tensor& t) { return abs(t); }},
      {"relu", [](const Tensor& t) { return relu(t - 0.5); }},
      {"tanh", [](const Tensor& t) { return tanh(t); }},
      {"sigmoid", [](const Tensor& t) { return sigmoid(t); }},
      {"gelu_tanh", [](const Tensor& t) { return gelu(t, GeluApprox::kTanh); }},
      {"gelu", [](const Tensor& t) { return gelu(t, GeluApprox::kNone); }},
      {"silu", [](const Tensor& t) { return silu(t); }},
      {"clamp", [](const Tensor& t) { return clamp(t, 0.2, 0.9); }},
      {"pow3", [](const Tensor& t) { return pow(t, 3.0); }},
      {"pow2.5", [](const Tensor& t) { return pow(t, 2.5); }},
      {"pow-1", [](const Tensor& t) { return pow(t, -1.0); }},
      {"pow1", [](const Tensor& t) { return pow(t, 1.0); }},
      {"pow0", [](const Tensor& t) { return pow(t, 0.0); }},
  };
  for (DType dtype : {kFloat32, kBFloat16, kFloat16}) {
    for (const auto& [name, op] : ops) {
      SCOPED_TRACE(name + " " + std::string(dtype_name(dtype)));
      // Positive inputs (log, sqrt, rsqrt), read through a transpose.
      Tensor x = (abs(random_tensor({300, 301}, 5, dtype)) + 0.1).detach().requires_grad_();
      Tensor y = op(x.t());
      const std::shared_ptr<autograd::Node> fn = y.grad_fn();
      NoGradGuard no_grad;  // as in the engine
      auto run = [&](Tensor g) {
        autograd::Grads in;
        in.push_back(std::move(g));
        return fn->apply(std::move(in))[0];
      };
      Tensor held = random_tensor({301, 300}, 6, dtype) * 1.0;
      const std::vector<double> before = values(held);
      Tensor from_held = run(held);
      EXPECT_NE(from_held.data_ptr(), held.data_ptr());
      EXPECT_EQ(values(held), before);

      Tensor sole = random_tensor({301, 300}, 6, dtype) * 1.0;
      const void* buffer = sole.data_ptr();
      Tensor from_sole = run(std::move(sole));
      EXPECT_EQ(from_sole.data_ptr(), buffer);
      EXPECT_EQ(values(from_sole), values(from_held));
    }
  }
}

// A captured step whose forward consumes temporaries and whose backward
// writes into its gradients replays the eager step's loss and parameter
// gradients bit for bit, twice.
TEST(ConsumingTest, CapturedGradientsMatchEager) {
  const Tensor x = random_tensor({64, 96}, 20);
  auto make = [] {
    manual_seed(4);
    return std::make_pair(randn({96, 96}).requires_grad_(), randn({96}).requires_grad_());
  };
  auto body = [&](const Tensor& w, const Tensor& b) {
    Tensor h = gelu(matmul(x, w) + b, GeluApprox::kNone);
    Tensor s = silu(x + std::move(h)) * 0.5 - 0.25;
    return mean(pow(tanh(std::move(s)) + sigmoid(matmul(x, w)), 2.0));
  };
  auto [w1, b1] = make();
  Tensor l1 = body(w1, b1);
  l1.backward();
  auto [w3, b3] = make();
  auto step = [&] {
    autograd::zero_grad(w3);
    autograd::zero_grad(b3);
    Tensor loss = body(w3, b3);
    loss.backward();
    return std::vector<Tensor>{loss};
  };
  absl::StatusOr<Graph> g = capture(step);
  ASSERT_TRUE(g.ok()) << g.status();
  w3.grad().fill_(7.0);
  b3.grad().fill_(7.0);
  for (int i = 0; i < 2; ++i) {
    ASSERT_TRUE(g->replay().ok());
    EXPECT_EQ(values(g->output(0)), values(l1));
    EXPECT_EQ(values(w3.grad()), values(w1.grad()));
    EXPECT_EQ(values(b3.grad()), values(b1.grad()));
  }
}

// A residual block written with temporaries trains to the bits of the same
// block written with named tensors, eagerly and through a captured replay.
TEST(ConsumingTest, ResidualStepMatchesNamedTensorsAndItsReplay) {
  auto make = [] {
    manual_seed(3);
    return std::make_pair(randn({6, 6}).requires_grad_(), randn({6}).requires_grad_());
  };
  const Tensor x = random_tensor({4, 6}, 20);
  auto [w1, b1] = make();
  auto [w2, b2] = make();
  auto temporaries = [&] { return mean(pow(relu(x + relu(matmul(x, w1) + b1)), 2.0)); };
  auto named = [&] {
    Tensor h = matmul(x, w2);
    Tensor hb = h + b2;
    Tensor r = relu(hb);
    Tensor s = x + r;
    Tensor o = relu(s);
    return mean(pow(o, 2.0));
  };
  Tensor l1 = temporaries(), l2 = named();
  EXPECT_EQ(values(l1), values(l2));
  l1.backward();
  l2.backward();
  EXPECT_EQ(values(w1.grad()), values(w2.grad()));
  EXPECT_EQ(values(b1.grad()), values(b2.grad()));

  // Captured: the replay gives the eager step's loss, bit for bit.
  auto [w3, b3] = make();
  auto step = [&] {
    Tensor loss = mean(pow(relu(x + relu(matmul(x, w3) + b3)), 2.0));
    loss.backward();
    return std::vector<Tensor>{loss};
  };
  absl::StatusOr<Graph> g = capture(step);
  ASSERT_TRUE(g.ok()) << g.status();
  const absl::Status replayed = g->replay();
  ASSERT_TRUE(replayed.ok()) << replayed;
  EXPECT_EQ(values(g->output(0)), values(l1));
}

}  // namespace
}  // namespace encore
