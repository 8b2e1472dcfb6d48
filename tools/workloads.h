// Training workloads shared by the tools (encore-prof --model=mlp|gpt|cnn|block,
// encore-launch's training-step variant), their tests and the CNN and
// transformer-block steps of bench/train_step_bench and bench/peers: the models of
// examples/train_mlp.cpp and examples/train_gpt.cpp with an AdamW optimizer,
// static inputs filled once (synthetic data: profiling does not need a
// corpus), and one training step ready for encore::capture().
//
//   std::unique_ptr<encore::tools::Workload> w = encore::tools::make_mlp({.widths = {32, 128, 10}});
//   absl::StatusOr<encore::Graph> graph = encore::capture([&] { return w->step(); });
//
// A Workload is held by unique_ptr: its step closes over its own address.
// MlpSpec::device places parameters, optimizer state and inputs (f32); the
// MLP is initialised on the CPU first, so a CUDA one starts from the same
// values. A GPT is built where its config.device says.
#pragma once

#include <cmath>
#include <functional>
#include <memory>
#include <vector>

#include "encore/encore.h"

namespace encore::tools {

struct Workload {
  std::unique_ptr<nn::Module> model;
  std::unique_ptr<optim::Optimizer> opt;
  Tensor x, y;                       // static inputs
  std::function<Tensor()> loss;      // forward + loss on x, y
  // zero_grad, forward, backward, AdamW update; returns {loss}.
  std::vector<Tensor> step() {
    opt->zero_grad();
    Tensor l = loss();
    l.backward();
    opt->step();
    return {l};
  }
};

// A classifier's step on static inputs: w.x = x, w.y = labels i % classes
// (one per row of x), w.loss = cross_entropy(model.forward(x), y), all on
// `device`; w takes the model.
inline void set_classification(Workload& w, std::unique_ptr<nn::Module> model, const Tensor& x, int64_t classes,
                               Device device) {
  const int64_t batch = x.size(0);
  std::vector<int64_t> labels(batch);
  for (int64_t i = 0; i < batch; ++i) labels[i] = i % classes;
  w.x = x.to(device);
  w.y = from_vector<int64_t>(labels).to(device);
  const nn::Module* raw = model.get();
  Workload* wp = &w;
  w.loss = [raw, wp] { return cross_entropy(raw->forward(wp->x), wp->y); };
  w.model = std::move(model);
}

// examples/train_mlp.cpp's student: Linear layers of `widths` with ReLU,
// cross-entropy on x ~ N(0, 1) [batch, widths.front()] and labels i % classes.
struct MlpSpec {
  std::vector<int64_t> widths = {32, 128, 10};
  int64_t batch = 128;
  double lr = 3e-3;
  uint64_t seed = 1;
  Device device = kCPU;
};

inline std::unique_ptr<Workload> make_mlp(const MlpSpec& spec) {
  auto w = std::make_unique<Workload>();
  manual_seed(spec.seed);
  auto m = std::make_unique<nn::Mlp>(spec.widths);
  if (!spec.device.is_cpu()) m->to(spec.device);   // before the optimizer takes the parameters
  w->opt = std::make_unique<optim::AdamW>(m->parameters(), optim::AdamWOptions{.lr = spec.lr, .weight_decay = 0.0});
  set_classification(*w, std::move(m), randn({spec.batch, spec.widths.front()}), spec.widths.back(), spec.device);
  return w;
}

// examples/train_gpt.cpp's character-level GPT on [batch, block_size] token
// ids following a fixed pattern; targets are the ids shifted by one.
struct GptSpec {
  nn::GptConfig config = {.vocab_size = 65, .block_size = 32, .n_layer = 2, .n_head = 4, .n_embd = 64};
  int64_t batch = 16;
  double lr = 3e-3;
};

inline std::unique_ptr<Workload> make_gpt(const GptSpec& spec) {
  auto w = std::make_unique<Workload>();
  const nn::GptConfig& c = spec.config;
  manual_seed(c.seed);
  auto m = std::make_unique<nn::Gpt>(c);
  w->opt = std::make_unique<optim::AdamW>(m->parameters(), optim::AdamWOptions{.lr = spec.lr, .weight_decay = 0.1});
  const int64_t n = spec.batch * c.block_size;
  std::vector<int64_t> ids(n + 1);
  for (int64_t i = 0; i <= n; ++i) ids[i] = (i * 7 + i / c.block_size) % c.vocab_size;
  const Shape shape{spec.batch, c.block_size};
  w->x = from_vector<int64_t>(std::vector<int64_t>(ids.begin(), ids.end() - 1), shape, c.device);
  w->y = from_vector<int64_t>(std::vector<int64_t>(ids.begin() + 1, ids.end()), shape, c.device);
  nn::Gpt* raw = m.get();
  Workload* wp = w.get();
  w->loss = [raw, wp] { return raw->loss(wp->x, wp->y); };
  w->model = std::move(m);
  return w;
}

// The transformer block of the CPU-speed issue (bench/peers/torch_cpu_steps
// times the same layers in libtorch): pre-norm, x1 = x + proj(attn(ln1(x)))
// with non-causal softmax attention over n_head heads, out = x1 +
// fc2(gelu(fc(ln2(x1)))) with exact (erf) GELU and a 4C hidden layer; loss =
// mean(out^2) on x ~ N(0, 1) [batch, seq, n_embd]; AdamW.
class TransformerBlock : public nn::Module {
 public:
  TransformerBlock(int64_t n_embd, int64_t n_head)
      : n_head_(n_head),
        ln1_(register_module("ln1", std::make_unique<nn::LayerNorm>(n_embd))),
        qkv_(register_module("qkv", std::make_unique<nn::Linear>(n_embd, 3 * n_embd))),
        proj_(register_module("proj", std::make_unique<nn::Linear>(n_embd, n_embd))),
        ln2_(register_module("ln2", std::make_unique<nn::LayerNorm>(n_embd))),
        fc_(register_module("fc", std::make_unique<nn::Linear>(n_embd, 4 * n_embd))),
        fc2_(register_module("fc2", std::make_unique<nn::Linear>(4 * n_embd, n_embd))) {}
  Tensor forward(const Tensor& x) const override {
    const int64_t B = x.size(0), T = x.size(1), C = x.size(2), H = n_head_, hd = C / H;
    std::vector<Tensor> parts = split(qkv_.forward(ln1_.forward(x)), C, 2);
    Tensor q = parts[0].view({B, T, H, hd}).transpose(1, 2);
    Tensor k = parts[1].view({B, T, H, hd}).transpose(1, 2);
    Tensor v = parts[2].view({B, T, H, hd}).transpose(1, 2);
    Tensor att = softmax(matmul(q, k.transpose(2, 3)) * (1.0 / std::sqrt(static_cast<double>(hd))), -1);
    Tensor y = matmul(att, v).transpose(1, 2).reshape({B, T, C});
    Tensor x1 = x + proj_.forward(y);
    return x1 + fc2_.forward(gelu(fc_.forward(ln2_.forward(x1)), GeluApprox::kNone));
  }

 private:
  int64_t n_head_;
  nn::LayerNorm& ln1_;
  nn::Linear& qkv_;
  nn::Linear& proj_;
  nn::LayerNorm& ln2_;
  nn::Linear& fc_;
  nn::Linear& fc2_;
};

struct BlockSpec {
  int64_t batch = 8, seq = 64, n_embd = 256, n_head = 4;   // n_embd must divide by n_head
  double lr = 1e-3;                                         // AdamW, its other options at their defaults
  uint64_t seed = 1;      // of the parameters and the input
  Device device = kCPU;   // parameters, optimizer state and input; initialised on the CPU first
};

inline std::unique_ptr<Workload> make_block(const BlockSpec& spec) {
  auto w = std::make_unique<Workload>();
  manual_seed(spec.seed);
  auto m = std::make_unique<TransformerBlock>(spec.n_embd, spec.n_head);
  if (!spec.device.is_cpu()) m->to(spec.device);   // before the optimizer takes the parameters
  w->opt = std::make_unique<optim::AdamW>(m->parameters(), optim::AdamWOptions{.lr = spec.lr});
  w->x = randn({spec.batch, spec.seq, spec.n_embd}).to(spec.device);
  const TransformerBlock* raw = m.get();
  Workload* wp = w.get();
  w->loss = [raw, wp] { return mean(pow(raw->forward(wp->x), 2.0)); };
  w->model = std::move(m);
  return w;
}

// A residual block of a small ResNet: relu(x + bn(conv(relu(bn(conv(x)))))),
// 3x3 convolutions without bias keeping the channels.
class ResBlock : public nn::Module {
 public:
  explicit ResBlock(int64_t c)
      : conv1_(register_module("conv1", std::make_unique<nn::Conv2d>(c, c, 3, 1, 1, 1, 1, false))),
        bn1_(register_module("bn1", std::make_unique<nn::BatchNorm2d>(c))),
        conv2_(register_module("conv2", std::make_unique<nn::Conv2d>(c, c, 3, 1, 1, 1, 1, false))),
        bn2_(register_module("bn2", std::make_unique<nn::BatchNorm2d>(c))) {}
  Tensor forward(const Tensor& x) const override {
    return relu(x + bn2_.forward(conv2_.forward(relu(bn1_.forward(conv1_.forward(x))))));
  }

 private:
  nn::Conv2d& conv1_;
  nn::BatchNorm2d& bn1_;
  nn::Conv2d& conv2_;
  nn::BatchNorm2d& bn2_;
};

// The CNN step of the convnets issue (bench/train_step_bench.cpp,
// bench/peers/torch_cpu_steps.cpp): x ~ N(0, 1) [batch, 3, 32, 32] -> conv
// 3->channels, batch norm, ReLU, `blocks` residual blocks, global average
// pool, linear to 10 classes; cross-entropy on labels i % 10, SGD momentum 0.9.
struct ResnetCnnSpec {
  int64_t blocks = 3;
  int64_t channels = 16;
  int64_t batch = 32;
  double lr = 0.01;
  uint64_t seed = 1;      // of the parameters and the input
  Device device = kCPU;   // parameters, buffers and inputs; initialised on the CPU first
};

inline std::unique_ptr<Workload> make_resnet_cnn(const ResnetCnnSpec& spec) {
  auto w = std::make_unique<Workload>();
  manual_seed(spec.seed);
  auto m = std::make_unique<nn::Sequential>();
  m->emplace<nn::Conv2d>(3, spec.channels, 3, 1, 1, 1, 1, false);
  m->emplace<nn::BatchNorm2d>(spec.channels);
  m->emplace<nn::ReLU>();
  for (int64_t i = 0; i < spec.blocks; ++i) m->emplace<ResBlock>(spec.channels);
  m->emplace<nn::AdaptiveAvgPool2d>(1);
  m->emplace<nn::Flatten>();
  m->emplace<nn::Linear>(spec.channels, 10);
  if (!spec.device.is_cpu()) m->to(spec.device);   // before the optimizer takes the parameters
  w->opt = std::make_unique<optim::SGD>(m->parameters(), optim::SgdOptions{.lr = spec.lr, .momentum = 0.9});
  set_classification(*w, std::move(m), randn({spec.batch, 3, 32, 32}), 10, spec.device);
  return w;
}

}  // namespace encore::tools
