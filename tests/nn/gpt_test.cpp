// The whole tiny GPT against finite differences: every parameter tensor's
// gradient from autograd must match central differences of the loss.
#include <gtest/gtest.h>

#include <cmath>

#include "encore/encore.h"
#include "encore/nn.h"
#include "tests/test_util.h"

namespace encore::nn {
namespace {

using encore::testing::values;

// Tolerance: the loss is ~log(V) ~ 2 in f32. With step eps = 2e-3 the
// rounding error of a central difference is about 1.2e-7 * 2 / (2 * 2e-3) =
// 6e-5 per element, and truncation O(eps^2) is negligible (at eps = 1e-2 it
// was not: the residual-stream biases were 2.7% off). We compare each
// parameter tensor as a vector: error norm under 2% of the gradient norm plus
// 2e-4 for rounding, which a wrong formula (sign, missing term, wrong
// transpose) exceeds by far.
TEST(GptTest, GradientsMatchFiniteDifferences) {
  GptConfig cfg{.vocab_size = 7, .block_size = 4, .n_layer = 1, .n_head = 2, .n_embd = 8, .tied_head = true};
  Gpt gpt(cfg);
  Tensor ids = from_vector<int64_t>({1, 2, 3, 4, 0, 6, 5, 1}, {2, 4});
  Tensor targets = from_vector<int64_t>({2, 3, 4, 0, 6, 5, 1, 2}, {2, 4});
  gpt.loss(ids, targets).backward();
  const double eps = 2e-3;
  for (auto& [name, p] : gpt.named_parameters()) {
    std::vector<double> analytic = values(p.grad());
    std::vector<double> numeric(p.numel());
    Tensor flat = p.detach().reshape({-1});
    for (int64_t i = 0; i < p.numel(); ++i) {
      NoGradGuard no_grad;
      Tensor e = flat.slice(0, i, i + 1);
      const double orig = values(e)[0];
      e.fill_(orig + eps);
      const double up = gpt.loss(ids, targets).item<double>();
      e.fill_(orig - eps);
      const double down = gpt.loss(ids, targets).item<double>();
      e.fill_(orig);
      numeric[i] = (up - down) / (2 * eps);
    }
    double diff = 0, norm = 0;
    for (size_t i = 0; i < numeric.size(); ++i) {
      diff += (numeric[i] - analytic[i]) * (numeric[i] - analytic[i]);
      norm += numeric[i] * numeric[i];
    }
    EXPECT_LT(std::sqrt(diff), 2e-2 * std::sqrt(norm) + 2e-4) << name;
  }
}

TEST(GptTest, LossStartsNearUniformGuess) {
  GptConfig cfg{.vocab_size = 50, .block_size = 8, .n_layer = 2, .n_head = 2, .n_embd = 16};
  Gpt gpt(cfg);
  Tensor ids = arange(0, 16, 1, kInt64).reshape({2, 8});
  const double loss = gpt.loss(ids, ids).item<double>();
  EXPECT_NEAR(loss, std::log(50.0), 0.3);   // small init: near-uniform predictions
}

// Targets shaped unlike ids were flattened and paired with the wrong
// positions whenever the element counts agreed ([T, B] for [B, T]).
TEST(GptTest, LossRefusesTargetsShapedUnlikeIds) {
  Gpt gpt({.vocab_size = 7, .block_size = 4, .n_layer = 1, .n_head = 2, .n_embd = 8});
  Tensor ids = from_vector<int64_t>({1, 2, 3, 4, 0, 6}, {2, 3});
  for (const Shape& shape : {Shape{3, 2}, Shape{6}, Shape{1, 2, 3}}) {
    testing::expect_error([&] { (void)gpt.loss(ids, zeros(shape, kInt64)); }, absl::StatusCode::kInvalidArgument,
                          {"Gpt::loss", shape_str(shape), "[2, 3]"});
  }
  EXPECT_NO_THROW((void)gpt.loss(ids, zeros({2, 3}, kInt64)));
}

// GPT-2 drops out the sum of the embeddings (embd_pdrop) as well as inside
// the blocks. With every block's residual branches zeroed the blocks are the
// identity, so in eval mode the logits are ln_f(wte[ids] + wpe[pos]) wte^T,
// and in training mode only the embeddings' dropout can change them.
TEST(GptTest, DropoutAppliesToTheEmbeddingsWhileTraining) {
  GptConfig cfg{.vocab_size = 7, .block_size = 4, .n_layer = 2, .n_head = 2, .n_embd = 8, .dropout = 0.5};
  Gpt gpt(cfg);
  {
    NoGradGuard no_grad;
    for (auto& [name, p] : gpt.named_parameters()) {
      if (name.find("attn.proj.") != std::string::npos || name.find("mlp.layers.1.") != std::string::npos) {
        Tensor(p).zero_();
      }
    }
  }
  Tensor ids = from_vector<int64_t>({1, 2, 3, 4, 0, 6, 5, 1}, {2, 4});
  const NamedTensors params = gpt.named_parameters();
  auto param = [&](const std::string& n) {
    for (const auto& [name, p] : params) if (name == n) return p;
    return Tensor();
  };
  NoGradGuard no_grad;
  Tensor x = embedding(param("wte.weight"), ids) + embedding(param("wpe.weight"), arange(0, 4, 1, kInt64));
  Tensor expected = linear(layer_norm(x, {8}, param("ln_f.weight"), param("ln_f.bias"), 1e-5), param("wte.weight"));
  gpt.eval();
  testing::expect_near(gpt.forward(ids), expected, 1e-5, 1e-5);   // the blocks are the identity
  gpt.train();
  EXPECT_NE(values(gpt.forward(ids)), values(expected));          // only the embeddings' dropout acts
}

}  // namespace
}  // namespace encore::nn
