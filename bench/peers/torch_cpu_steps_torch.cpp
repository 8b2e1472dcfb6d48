// libtorch's steps for torch_cpu_steps.cpp: the same models, optimizers,
// shapes and losses as its encore steps.
#include <torch/torch.h>

#include <limits>
#include <memory>
#include <vector>

#include "bench/peers/torch_cpu_steps.h"

namespace peers {
namespace {

namespace F = torch::nn::functional;

std::function<void()> chain() {   // ten rounds of y = y * w + b on [1, 16], sum, backward
  auto x = torch::full({1, 16}, 0.5, torch::requires_grad());
  auto w = torch::full({1, 16}, 0.9, torch::requires_grad());
  auto b = torch::full({1, 16}, 0.1, torch::requires_grad());
  return [=] {
    auto y = x;
    for (int i = 0; i < 10; ++i) y = y * w + b;
    y.sum().backward();
  };
}

// Linear layers with ReLU between them; cross-entropy on labels i % classes;
// SGD lr 0.01, momentum 0.9.
std::function<void()> mlp(std::vector<int64_t> widths, int64_t batch) {
  torch::manual_seed(1);
  auto layers = std::make_shared<std::vector<torch::nn::Linear>>();
  std::vector<torch::Tensor> params;
  for (size_t i = 0; i + 1 < widths.size(); ++i) {
    layers->emplace_back(widths[i], widths[i + 1]);
    for (auto& p : layers->back()->parameters()) params.push_back(p);
  }
  auto opt = std::make_shared<torch::optim::SGD>(params, torch::optim::SGDOptions(0.01).momentum(0.9));
  auto x = torch::randn({batch, widths.front()});
  auto y = torch::arange(batch) % widths.back();
  return [=] {
    opt->zero_grad();
    auto h = x;
    for (size_t i = 0; i < layers->size(); ++i) {
      h = (*layers)[i]->forward(h);
      if (i + 1 < layers->size()) h = torch::relu(h);
    }
    F::cross_entropy(h, y).backward();
    opt->step();
  };
}

// Pre-norm block without embeddings: x + proj(attn(ln1(x))), then
// + fc2(gelu(fc(ln2(.)))) with exact GELU; attention not causal; loss the
// mean of squares of the output; AdamW lr 1e-3.
struct Block {
  int64_t B = 8, T = 64, C = 256, H = 4;
  torch::nn::LayerNorm ln1{torch::nn::LayerNormOptions({256})}, ln2{torch::nn::LayerNormOptions({256})};
  torch::nn::Linear qkv{256, 768}, proj{256, 256}, fc{256, 1024}, fc2{1024, 256};
  torch::Tensor x = torch::randn({8, 64, 256});
  std::vector<torch::Tensor> parameters() {
    std::vector<torch::Tensor> out;
    for (torch::nn::Module* m : std::initializer_list<torch::nn::Module*>{ln1.get(), qkv.get(), proj.get(), ln2.get(),
                                                                          fc.get(), fc2.get()}) {
      for (auto& p : m->parameters()) out.push_back(p);
    }
    return out;
  }
  torch::Tensor loss() {
    const int64_t hd = C / H;
    auto parts = qkv->forward(ln1->forward(x)).split(C, 2);
    auto q = parts[0].view({B, T, H, hd}).transpose(1, 2);
    auto k = parts[1].view({B, T, H, hd}).transpose(1, 2);
    auto v = parts[2].view({B, T, H, hd}).transpose(1, 2);
    auto att = torch::softmax(torch::matmul(q, k.transpose(2, 3)) * (1.0 / std::sqrt(double(hd))), -1);
    auto y = torch::matmul(att, v).transpose(1, 2).reshape({B, T, C});
    auto x1 = x + proj->forward(y);
    auto out = x1 + fc2->forward(torch::gelu(fc->forward(ln2->forward(x1))));
    return out.pow(2).mean();
  }
};

std::function<void()> block() {
  torch::manual_seed(1);
  auto m = std::make_shared<Block>();
  auto opt = std::make_shared<torch::optim::AdamW>(m->parameters(), torch::optim::AdamWOptions(1e-3));
  return [=] {
    opt->zero_grad();
    m->loss().backward();
    opt->step();
  };
}

// The demo GPT (examples/train_gpt, tools/workloads.h's make_gpt): vocab
// 64, block 32, 2 layers, 4 heads, C 64, batch 16; token + position
// embeddings, pre-norm blocks with causal attention and a 4C MLP with
// GELU-tanh, final LayerNorm, head tied to the token embedding; mean
// cross-entropy against the ids shifted by one; AdamW lr 3e-3, weight decay 0.1.
struct GptLayer {
  torch::nn::LayerNorm ln1{torch::nn::LayerNormOptions({64})}, ln2{torch::nn::LayerNormOptions({64})};
  torch::nn::Linear qkv{64, 192}, proj{64, 64}, fc{64, 256}, fc2{256, 64};
};

struct Gpt {
  static constexpr int64_t V = 64, T = 32, C = 64, H = 4, L = 2, B = 16;
  torch::nn::Embedding wte{V, C}, wpe{T, C};
  std::vector<GptLayer> layers = std::vector<GptLayer>(L);
  torch::nn::LayerNorm ln_f{torch::nn::LayerNormOptions({C})};
  torch::Tensor mask = torch::ones({T, T}, torch::kBool).triu(1);   // true above the diagonal
  torch::Tensor ids, targets, pos = torch::arange(T);
  Gpt() {
    std::vector<int64_t> v(B * T + 1);
    for (int64_t i = 0; i <= B * T; ++i) v[i] = (i * 7 + i / T) % V;
    auto all = torch::tensor(v);
    ids = all.slice(0, 0, B * T).view({B, T}).clone();
    targets = all.slice(0, 1, B * T + 1).view({B, T}).clone();
  }
  std::vector<torch::Tensor> parameters() {
    std::vector<torch::Tensor> out;
    auto add = [&](torch::nn::Module& m) {
      for (auto& p : m.parameters()) out.push_back(p);
    };
    add(*wte);
    add(*wpe);
    for (GptLayer& l : layers) {
      for (torch::nn::Module* m : std::initializer_list<torch::nn::Module*>{l.ln1.get(), l.qkv.get(), l.proj.get(),
                                                                            l.ln2.get(), l.fc.get(), l.fc2.get()}) {
        add(*m);
      }
    }
    add(*ln_f);
    return out;
  }
  torch::Tensor loss() {
    const int64_t hd = C / H;
    auto x = wte->forward(ids) + wpe->forward(pos);
    for (GptLayer& l : layers) {
      auto parts = l.qkv->forward(l.ln1->forward(x)).split(C, 2);
      auto q = parts[0].view({B, T, H, hd}).transpose(1, 2);
      auto k = parts[1].view({B, T, H, hd}).transpose(1, 2);
      auto v = parts[2].view({B, T, H, hd}).transpose(1, 2);
      auto att = torch::matmul(q, k.transpose(2, 3)) * (1.0 / std::sqrt(double(hd)));
      att = torch::softmax(att.masked_fill(mask, -std::numeric_limits<double>::infinity()), -1);
      auto h = x + l.proj->forward(torch::matmul(att, v).transpose(1, 2).reshape({B, T, C}));
      x = h + l.fc2->forward(torch::gelu(l.fc->forward(l.ln2->forward(h)), "tanh"));
    }
    auto logits = F::linear(ln_f->forward(x), wte->weight);
    return F::cross_entropy(logits.reshape({-1, V}), targets.reshape({-1}));
  }
};

std::function<void()> gpt() {
  torch::manual_seed(1);
  auto m = std::make_shared<Gpt>();
  auto opt = std::make_shared<torch::optim::AdamW>(m->parameters(),
                                                   torch::optim::AdamWOptions(3e-3).weight_decay(0.1));
  return [=] {
    opt->zero_grad();
    m->loss().backward();
    opt->step();
  };
}

// The CNN of issue 21: conv 3->16 3x3 (padding 1, no bias), batch norm,
// ReLU, three residual blocks relu(x + bn2(conv2(relu(bn1(conv1(x)))))),
// global average pool, flatten, Linear(16, 10); cross-entropy on labels
// i % 10; SGD lr 0.01, momentum 0.9; training mode.
torch::nn::Conv2d conv3x3(int64_t in, int64_t out) {
  return torch::nn::Conv2d(torch::nn::Conv2dOptions(in, out, 3).stride(1).padding(1).bias(false));
}

struct ResBlockImpl : torch::nn::Module {
  torch::nn::Conv2d conv1, conv2;
  torch::nn::BatchNorm2d bn1, bn2;
  explicit ResBlockImpl(int64_t c)
      : conv1(register_module("conv1", conv3x3(c, c))),
        conv2(register_module("conv2", conv3x3(c, c))),
        bn1(register_module("bn1", torch::nn::BatchNorm2d(c))),
        bn2(register_module("bn2", torch::nn::BatchNorm2d(c))) {}
  torch::Tensor forward(const torch::Tensor& x) {
    return torch::relu(x + bn2->forward(conv2->forward(torch::relu(bn1->forward(conv1->forward(x))))));
  }
};
TORCH_MODULE(ResBlock);

std::function<void()> cnn(int64_t blocks, int64_t channels, int64_t batch) {
  torch::manual_seed(1);
  auto m = std::make_shared<torch::nn::Sequential>();
  (*m)->push_back(conv3x3(3, channels));
  (*m)->push_back(torch::nn::BatchNorm2d(channels));
  (*m)->push_back(torch::nn::ReLU());
  for (int64_t i = 0; i < blocks; ++i) (*m)->push_back(ResBlock(channels));
  (*m)->push_back(torch::nn::AdaptiveAvgPool2d(torch::nn::AdaptiveAvgPool2dOptions(1)));
  (*m)->push_back(torch::nn::Flatten());
  (*m)->push_back(torch::nn::Linear(channels, 10));
  (*m)->train();
  auto opt = std::make_shared<torch::optim::SGD>((*m)->parameters(), torch::optim::SGDOptions(0.01).momentum(0.9));
  auto x = torch::randn({batch, 3, 32, 32});
  auto y = torch::arange(batch) % 10;
  return [=] {
    opt->zero_grad();
    F::cross_entropy((*m)->forward(x), y).backward();
    opt->step();
  };
}

}  // namespace

std::function<void()> torch_step(const std::string& name) {
  if (name == "chain20") return chain();
  if (name == "mlp_784_128_10_b32") return mlp({784, 128, 10}, 32);
  if (name == "mlp_784_512_512_10_b128") return mlp({784, 512, 512, 10}, 128);
  if (name == "cnn_resnet3x16_b32_3x32x32") return cnn(3, 16, 32);
  if (name == "demo_gpt_2x64_b16_t32") return gpt();
  if (name == "mlp_1024_4096_4096_1024_b64") return mlp({1024, 4096, 4096, 1024}, 64);
  return block();
}

void torch_set_threads(int n) { torch::set_num_threads(n); }

}  // namespace peers
