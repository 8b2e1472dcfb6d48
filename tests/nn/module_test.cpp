// Modules: registration and dotted names, tied weights, train/eval, zero_grad,
// seeded initialisation.
#include <gtest/gtest.h>

#include <cmath>

#include "absl/strings/str_format.h"
#include "encore/encore.h"
#include "encore/nn.h"
#include "tests/backends/cuda_test_util.h"
#include "tests/test_util.h"

namespace encore::nn {
namespace {

using encore::testing::expect_error;
using encore::testing::expect_near;
using encore::testing::random_tensor;
using encore::testing::values;

GptConfig tiny(bool tied = true) {
  return {.vocab_size = 11, .block_size = 8, .n_layer = 2, .n_head = 2, .n_embd = 8, .tied_head = tied};
}

std::vector<std::string> names(const Module& m) {
  std::vector<std::string> out;
  for (auto& [n, t] : m.named_parameters()) out.push_back(n);
  return out;
}

TEST(ModuleTest, MlpRegistersLayersInOrder) {
  Mlp mlp({4, 3, 2});
  EXPECT_EQ(names(mlp), (std::vector<std::string>{"layers.0.weight", "layers.0.bias", "layers.1.weight",
                                                  "layers.1.bias"}));
  std::vector<Tensor> p = mlp.parameters();
  ASSERT_EQ(p.size(), 4u);
  EXPECT_EQ(p[0].shape(), Shape({3, 4}));
  EXPECT_EQ(p[3].shape(), Shape({2}));
  for (const Tensor& t : p) EXPECT_TRUE(t.requires_grad() && t.is_leaf());
}

// model(x) calls the one-tensor forward, as PyTorch's __call__ (DESIGN.md's
// example writes it so); a module without one refuses it the same way.
TEST(ModuleTest, CallingAModuleRunsItsForward) {
  Mlp mlp({3, 4, 2});
  const Tensor x = random_tensor({5, 3}, 1);
  expect_near(mlp(x), values(mlp.forward(x)), 0, 0);
  const Module& base = mlp;
  expect_near(base(x), values(mlp.forward(x)), 0, 0);
  ModuleList list;
  expect_error([&] { (void)list(x); }, absl::StatusCode::kUnimplemented, {"ModuleList", "no one-tensor forward"});
}

TEST(ModuleTest, GptNamesFollowTheDottedScheme) {
  Gpt gpt(tiny());
  std::vector<std::string> n = names(gpt);
  auto has = [&](const std::string& s) { return std::find(n.begin(), n.end(), s) != n.end(); };
  EXPECT_TRUE(has("wte.weight"));
  EXPECT_TRUE(has("wpe.weight"));
  EXPECT_TRUE(has("blocks.0.attn.qkv.weight"));
  EXPECT_TRUE(has("blocks.1.mlp.layers.1.bias"));
  EXPECT_TRUE(has("ln_f.weight"));
  EXPECT_FALSE(has("lm_head.weight"));          // tied to wte
  Gpt untied(tiny(false));
  EXPECT_EQ(untied.parameters().size(), gpt.parameters().size() + 1);
  EXPECT_EQ(names(untied).back(), "lm_head.weight");
}

TEST(ModuleTest, ParameterCountMatchesTheArchitecture) {
  const GptConfig c = tiny();
  const int64_t C = c.n_embd;
  const int64_t per_block = 2 * 2 * C + (3 * C * C + 3 * C) + (C * C + C) + (4 * C * C + 4 * C) + (4 * C * C + C);
  const int64_t expected = c.vocab_size * C + c.block_size * C + c.n_layer * per_block + 2 * C;
  int64_t total = 0;
  for (const Tensor& p : Gpt(c).parameters()) total += p.numel();
  EXPECT_EQ(total, expected);
}

TEST(ModuleTest, InitialisationIsSeededAndFollowsGpt2) {
  Gpt a(tiny()), b(tiny());
  GptConfig other = tiny();
  other.seed = 7;
  Gpt c(other);
  auto pa = a.named_parameters(), pb = b.named_parameters(), pc = c.named_parameters();
  for (size_t i = 0; i < pa.size(); ++i) {
    EXPECT_EQ(values(pa[i].second), values(pb[i].second)) << pa[i].first;
  }
  EXPECT_NE(values(pa[0].second), values(pc[0].second));
  for (auto& [name, p] : pa) {
    std::vector<double> v = values(p);
    if (name.find(".bias") != std::string::npos && name.find("ln") == std::string::npos) {
      for (double x : v) EXPECT_EQ(x, 0.0) << name;
    }
    if (name == "ln_f.weight") {
      for (double x : v) EXPECT_EQ(x, 1.0);
    }
  }
  // The big N(0, 0.02) matrices: sample std close to 0.02.
  Gpt big({.vocab_size = 500, .block_size = 8, .n_layer = 1, .n_head = 2, .n_embd = 64});
  std::vector<double> w = values(big.named_parameters()[0].second);   // wte [500, 64]
  double sq = 0;
  for (double x : w) sq += x * x;
  EXPECT_NEAR(std::sqrt(sq / w.size()), 0.02, 0.002);
}

TEST(ModuleTest, DropoutIsActiveOnlyInTraining) {
  Dropout d(0.5);
  Tensor x = ones({1000});
  std::vector<double> train_out = values(d.forward(x));
  int zeros = 0;
  for (double v : train_out) zeros += v == 0.0;
  EXPECT_GT(zeros, 350);
  EXPECT_LT(zeros, 650);
  d.eval();
  EXPECT_FALSE(d.is_training());
  expect_near(d.forward(x), std::vector<double>(1000, 1.0));
  Gpt gpt(tiny());
  gpt.eval();
  for (auto& [n, p] : gpt.named_parameters()) (void)n;
  gpt.train();
  EXPECT_TRUE(gpt.is_training());
}

// A rate the dropout op would refuse is refused when the layer is built, not
// at its first forward (in eval mode too).
TEST(ModuleTest, DropoutRefusesARateOutsideZeroToOneWhenBuilt) {
  for (double p : {-0.1, 1.5, 2.0, std::nan("")}) {
    expect_error([&] { Dropout d(p); }, absl::StatusCode::kInvalidArgument,
                 {"Dropout", "[0, 1]", absl::StrFormat("%g", p)});
  }
  EXPECT_NO_THROW(Dropout(0.0));
  EXPECT_NO_THROW(Dropout(1.0));
}

TEST(ModuleTest, ToDTypeConvertsEveryParameterInPlaceAndKeepsTiesAndHandles) {
  Gpt gpt(tiny());
  std::vector<Tensor> before = gpt.parameters();
  std::vector<std::vector<double>> f32_values;
  for (const Tensor& p : before) f32_values.push_back(values(p.to(kBFloat16)));   // what rounding must give
  Tensor held = gpt.parameters()[0];                   // a handle taken before the conversion
  gpt.to(kBFloat16);
  std::vector<Tensor> after = gpt.parameters();
  ASSERT_EQ(after.size(), before.size());              // the tied weight is still one parameter
  for (size_t i = 0; i < after.size(); ++i) {
    EXPECT_EQ(after[i].dtype(), kBFloat16) << i;
    EXPECT_TRUE(after[i].requires_grad()) << i;
    EXPECT_EQ(values(after[i]), f32_values[i]) << i;
  }
  EXPECT_EQ(held.dtype(), kBFloat16);                  // handles see the conversion
  Tensor idx = from_vector<int32_t>({1, 2, 3, 4}, {1, 4});
  Tensor loss = cross_entropy(gpt.forward(idx).reshape({4, -1}).to(kFloat32), idx.reshape({4}));
  loss.backward();
  EXPECT_EQ(gpt.parameters()[0].grad().dtype(), kBFloat16);
  expect_error([&] { gpt.to(kInt32); }, absl::StatusCode::kInvalidArgument, {"Module::to", "i32"});
}

TEST(ModuleTest, AttentionMasksAreBuffersThatMoveWithTheModule) {
  Gpt gpt(tiny());
  NamedTensors buffers = gpt.named_buffers();
  ASSERT_EQ(buffers.size(), 2u);                       // one causal mask per block
  EXPECT_EQ(buffers[0].first, "blocks.0.attn.mask");
  EXPECT_EQ(buffers[0].second.dtype(), kBool);
  gpt.to(kBFloat16);
  EXPECT_EQ(gpt.named_buffers()[0].second.dtype(), kBool);   // dtype moves leave non-float buffers alone
}

TEST(ModuleTest, AGptBuiltOnTheCpuTrainsAfterMovingToTheGpu) {
  ENCORE_SKIP_WITHOUT_GPU();
  Gpt gpt(tiny());
  Tensor idx = from_vector<int32_t>({1, 2, 3, 4}, {1, 4});
  const float cpu_loss = gpt.loss(idx, idx).item<float>();
  gpt.to(Device::cuda(0));
  for (const auto& [name, b] : gpt.named_buffers()) EXPECT_TRUE(b.device().is_cuda()) << name;
  Tensor gpu_idx = idx.to(Device::cuda(0));
  Tensor loss = gpt.loss(gpu_idx, gpu_idx);
  EXPECT_NEAR(loss.item<float>(), cpu_loss, 1e-4);
  loss.backward();
  EXPECT_TRUE(gpt.parameters()[0].grad().device().is_cuda());
}

TEST(ModuleTest, ZeroGradKeepsGradientStorage) {
  Linear lin(3, 2);
  Tensor x = ones({4, 3});
  lin.forward(x).sum().backward();
  void* w_grad = lin.weight.grad().data_ptr();
  lin.zero_grad();
  EXPECT_EQ(lin.weight.grad().data_ptr(), w_grad);
  expect_near(lin.weight.grad(), std::vector<double>(6, 0.0));
}

TEST(ModuleTest, LinearComputesXWtPlusB) {
  Linear lin(3, 2);
  Tensor x = from_vector<float>({1, 2, 3}, {1, 3});
  std::vector<double> w = values(lin.weight), b = values(lin.bias);
  expect_near(lin.forward(x), {w[0] + 2 * w[1] + 3 * w[2] + b[0], w[3] + 2 * w[4] + 3 * w[5] + b[1]});
}

TEST(ModuleTest, SequentialRunsItsChildrenInOrderUnderIndexNames) {
  Sequential net(std::make_unique<Linear>(3, 4), std::make_unique<ReLU>());
  Linear& last = net.emplace<Linear>(4, 2);
  ASSERT_EQ(net.size(), 3u);
  EXPECT_EQ(names(net), (std::vector<std::string>{"0.weight", "0.bias", "2.weight", "2.bias"}));
  EXPECT_EQ(&net[2], &last);
  Tensor x = from_vector<float>({1, -2, 3, 0.5, 4, -1}, {2, 3});
  const auto& first = dynamic_cast<const Linear&>(net[0]);
  Tensor expected = linear(relu(linear(x, first.weight, first.bias)), last.weight, last.bias);
  EXPECT_EQ(values(net.forward(x)), values(expected));     // the same ops: the same bits
  net.eval();
  EXPECT_FALSE(net[0].is_training());                       // train()/eval() reach the children
  expect_error([&] { (void)net[3]; }, absl::StatusCode::kInvalidArgument, {"Sequential", "3", "size 3"});
  expect_error([&] { net.add(std::unique_ptr<Linear>()); }, absl::StatusCode::kInvalidArgument, {"null"});
}

TEST(ModuleTest, ActivationLayersApplyTheirOps) {
  Tensor x = from_vector<float>({-2, -0.5, 0, 0.5, 2}, {5});
  EXPECT_EQ(values(ReLU().forward(x)), values(relu(x)));
  EXPECT_EQ(values(GELU().forward(x)), values(gelu(x, GeluApprox::kNone)));   // PyTorch's default: exact
  EXPECT_EQ(values(GELU(GeluApprox::kTanh).forward(x)), values(gelu(x, GeluApprox::kTanh)));
  EXPECT_EQ(values(Tanh().forward(x)), values(tanh(x)));
  EXPECT_EQ(values(Sigmoid().forward(x)), values(sigmoid(x)));
  EXPECT_EQ(values(SiLU().forward(x)), values(silu(x)));
  EXPECT_EQ(values(Identity().forward(x)), values(x));
}

TEST(ModuleTest, ModuleListHoldsBlocksAndHasNoForward) {
  ModuleList blocks;
  for (int i = 0; i < 3; ++i) blocks.emplace<Linear>(2, 2);
  blocks.emplace<Dropout>(0.1);
  EXPECT_EQ(blocks.size(), 4u);
  EXPECT_EQ(names(blocks).front(), "0.weight");
  EXPECT_EQ(names(blocks).back(), "2.bias");
  int n = 0;
  for (Module* m : blocks) n += dynamic_cast<Linear*>(m) != nullptr;
  EXPECT_EQ(n, 3);
  EXPECT_EQ(blocks.at<Linear>(1).weight.size(0), 2);
  expect_error([&] { blocks.at<Linear>(3); }, absl::StatusCode::kInvalidArgument, {"ModuleList::at", "3"});
  expect_error([&] { blocks.forward(ones({2})); }, absl::StatusCode::kUnimplemented,
               {"encore::nn::ModuleList", "no one-tensor forward"});
  // A Sequential holding a module without one fails at forward, naming it.
  Sequential seq(std::make_unique<ModuleList>());
  expect_error([&] { seq.forward(ones({2})); }, absl::StatusCode::kUnimplemented, {"ModuleList"});
}

// A layer with a running statistic (saved) and a derived table (not saved).
class WithBuffers : public Module {
 public:
  WithBuffers() {
    weight = register_parameter("weight", ones({2}));
    running = register_buffer("running", zeros({2}));
    derived = register_buffer("derived", ones({2}), /*persistent=*/false);
    child = &register_module("child", std::make_unique<Linear>(2, 1));
  }
  Tensor weight, running, derived;
  Linear* child;
};

// A module that registers `name` twice, as the kinds given.
class Twice : public Module {
 public:
  Twice(const std::string& name, int first, int second) {
    add(name, first);
    add(name, second);
  }
 private:
  void add(const std::string& name, int kind) {
    if (kind == 0) register_parameter(name, ones({2}));
    if (kind == 1) register_buffer(name, zeros({2}));
    if (kind == 2) register_module(name, std::make_unique<Linear>(2, 1));
  }
};

// Two tensors of one dotted name were accepted: a checkpoint saved both
// under that name and could not tell them apart. Each name is registered
// once per module, across parameters, buffers and children.
TEST(ModuleTest, ANameIsRegisteredOnce) {
  const char* kinds[] = {"parameter", "buffer", "module"};
  for (int first = 0; first < 3; ++first) {
    for (int second = 0; second < 3; ++second) {
      expect_error([&] { Twice m("w", first, second); }, absl::StatusCode::kInvalidArgument,
                   {"Twice", std::string("register the ") + kinds[second] + " \"w\"",
                    std::string("a ") + kinds[first] + " of that name"});
    }
  }
  expect_error([] { Twice m("", 0, 0); }, absl::StatusCode::kInvalidArgument, {"Twice", "empty name"});
  // The same name in two modules is fine: the dotted names differ.
  Sequential net(std::make_unique<Linear>(2, 2), std::make_unique<Linear>(2, 2));
  EXPECT_EQ(names(net), (std::vector<std::string>{"0.weight", "0.bias", "1.weight", "1.bias"}));
}

// A layer written as in PyTorch: its own handle on the tensor it registers.
class OwnHandle : public Module {
 public:
  OwnHandle() {
    w = ones({2});
    w.requires_grad_();
    register_parameter("w", w);   // the returned handle is not kept
  }
  Tensor forward(const Tensor& x) const override { return mul(x, w); }
  Tensor w;
};

// register_parameter registered a detached twin of a leaf: the layer's own
// handle collected the gradients, the optimizer over parameters() saw none
// and skipped the parameter, and the layer never trained.
TEST(ModuleTest, ARegisteredLeafIsTheParameterItself) {
  OwnHandle m;
  ASSERT_EQ(m.parameters().size(), 1u);
  EXPECT_TRUE(m.parameters()[0].is_same(m.w));
  optim::SGD opt(m.parameters(), {.lr = 0.5});
  for (int step = 0; step < 3; ++step) {
    opt.zero_grad();
    sum(m.forward(ones({2}))).backward();
    opt.step();
  }
  EXPECT_EQ(values(m.w), (std::vector<double>{-0.5, -0.5}));   // 1 - 3 * 0.5
  // A non-leaf is registered as a new leaf over its values.
  class FromOps : public Module {
   public:
    FromOps() {
      Tensor base = ones({2});
      base.requires_grad_();
      made = mul(base, 2.0);
      registered = register_parameter("w", made);
    }
    Tensor made, registered;
  } f;
  EXPECT_FALSE(f.registered.is_same(f.made));
  EXPECT_TRUE(f.registered.is_leaf() && f.registered.requires_grad());
  EXPECT_EQ(values(f.registered), (std::vector<double>{2, 2}));
}

// A parameter "b.c" beside a child "b" holding "c": two tensors got one
// name, and only a checkpoint's save said so, as a name "used twice".
TEST(ModuleTest, ADottedNameThatRepeatsAChildsIsRefused) {
  class Dotted : public Module {
   public:
    explicit Dotted(bool buffer) {
      if (buffer) {
        register_buffer("b.running", zeros({2}));
      } else {
        register_parameter("b.running", ones({2}));
      }
      register_module("b", std::make_unique<WithBuffers>());
    }
  };
  Dotted param(false), buf(true);
  expect_error([&] { (void)param.state_tensors(); }, absl::StatusCode::kInvalidArgument,
               {"Dotted", "two tensors have the dotted name \"b.running\"", "rename one"});
  expect_error([&] { (void)buf.named_buffers(); }, absl::StatusCode::kInvalidArgument, {"\"b.running\""});
  expect_error([&] { (void)buf.named_persistent_buffers(); }, absl::StatusCode::kInvalidArgument,
               {"\"b.running\""});
  EXPECT_EQ(param.named_parameters().size(), 4u);   // "b.running", "b.weight", "b.child.weight", "b.child.bias"
}

TEST(ModuleTest, StateTensorsArePersistentBuffersAfterParameters) {
  WithBuffers m;
  std::vector<std::string> state;
  for (auto& [n, t] : m.state_tensors()) state.push_back(n);
  EXPECT_EQ(state, (std::vector<std::string>{"weight", "child.weight", "child.bias", "running"}));
  EXPECT_EQ(m.named_buffers().size(), 2u);                  // both buffers move with the module
  Gpt gpt(tiny());
  EXPECT_EQ(gpt.state_tensors().size(), gpt.named_parameters().size());   // masks are derived
}

TEST(ModuleTest, BadConfigurationsAreRejected) {
  expect_error([] { Linear(0, 3); }, absl::StatusCode::kInvalidArgument, {"Linear", "in=0"});
  expect_error([] { Mlp({4}); }, absl::StatusCode::kInvalidArgument, {"Mlp"});
  GptConfig c = tiny();
  c.n_head = 3;
  expect_error([&] { Gpt g(c); }, absl::StatusCode::kInvalidArgument, {"n_embd 8", "3"});
  Gpt g(tiny());
  expect_error([&] { (void)g.forward(zeros({1, 9}, kInt64)); }, absl::StatusCode::kInvalidArgument,
               {"sequence length 9", "block_size 8"});
}

// Each field of a GptConfig is checked before anything is allocated, the
// error naming the class built and the field with its value (before, an
// n_embd of 0 surfaced as an Embedding error, a dropout of 2 was accepted,
// and sizes whose tensors overflow int64 reached the allocator).
TEST(ModuleTest, GptConfigIsCheckedFieldByField) {
  struct Case {
    void (*edit)(GptConfig&);
    std::vector<std::string> parts;
  };
  const Case cases[] = {
      {[](GptConfig& c) { c.vocab_size = 0; }, {"vocab_size", "got 0"}},
      {[](GptConfig& c) { c.block_size = -1; }, {"block_size", "got -1"}},
      {[](GptConfig& c) { c.n_layer = 0; }, {"n_layer", "got 0"}},
      {[](GptConfig& c) { c.n_head = 0; }, {"n_head", "got 0"}},
      {[](GptConfig& c) { c.n_embd = 0; }, {"n_embd", "got 0"}},
      {[](GptConfig& c) { c.n_embd = -8; c.n_head = -2; }, {"n_head", "got -2"}},
      {[](GptConfig& c) { c.dropout = 2.0; }, {"dropout", "[0, 1]", "got 2"}},
      {[](GptConfig& c) { c.dropout = -0.5; }, {"dropout", "got -0.5"}},
      {[](GptConfig& c) { c.block_size = int64_t{1} << 32; c.n_embd = int64_t{1} << 31; },
       {"block_size 4294967296", "n_embd 2147483648", "2^63"}},
  };
  for (const Case& k : cases) {
    GptConfig c = tiny();
    k.edit(c);
    std::vector<std::string> gpt_parts = k.parts, block_parts = k.parts;
    gpt_parts.push_back("Gpt:");
    block_parts.push_back("CausalSelfAttention:");
    expect_error([&] { Gpt g(c); }, absl::StatusCode::kInvalidArgument, gpt_parts);
    expect_error([&] { CausalSelfAttention a(c, nullptr); }, absl::StatusCode::kInvalidArgument, block_parts);
  }
}

}  // namespace
}  // namespace encore::nn
