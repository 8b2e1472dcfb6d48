// A small GPT-2, written to be read top to bottom like a reference step.
//
// Legend of dimension names:
//   B  batch size               T  sequence length (<= block_size)
//   C  channels (n_embd)        H  heads (n_head)      hd = C / H per head
//   V  vocabulary size
//
// The backward pass is autograd's: every op below recorded its own backward
// formula (src/ops/), and loss.backward() runs them in reverse order.
#include <algorithm>
#include <cmath>
#include <limits>
#include <utility>

#include "encore/autograd.h"
#include "encore/nn.h"

namespace encore::nn {
namespace {

// a * b without overflow (both positive).
bool product_fits(int64_t a, int64_t b) {
  int64_t product = 0;
  return !__builtin_mul_overflow(a, b, &product);
}

// Every field of a GptConfig, before anything is allocated: errors name
// `who` (the class being built) and the field. The largest tensors are the
// MLP's [4C, C], the embeddings [V, C] and [block, C] and each block's mask
// [block, block]; their element counts must fit in int64.
void check_gpt_config(const char* who, const GptConfig& cfg) {
  for (auto [field, value] : {std::pair{"vocab_size", cfg.vocab_size}, std::pair{"block_size", cfg.block_size},
                              std::pair{"n_layer", cfg.n_layer}, std::pair{"n_head", cfg.n_head},
                              std::pair{"n_embd", cfg.n_embd}}) {
    ENCORE_CHECK(value > 0, "%s: GptConfig::%s must be positive, got %d", who, field, value);
  }
  ENCORE_CHECK(cfg.n_embd % cfg.n_head == 0, "%s: n_embd %d must divide into n_head %d heads", who, cfg.n_embd,
               cfg.n_head);
  ENCORE_CHECK(cfg.dropout >= 0.0 && cfg.dropout <= 1.0, "%s: GptConfig::dropout must be in [0, 1], got %g", who,
               cfg.dropout);
  ENCORE_CHECK(product_fits(cfg.block_size, cfg.block_size) && cfg.n_embd <= std::numeric_limits<int64_t>::max() / 4 &&
                   product_fits(4 * cfg.n_embd, cfg.n_embd) &&
                   product_fits(std::max(cfg.vocab_size, cfg.block_size), cfg.n_embd),
               "%s: GptConfig sizes vocab_size %d, block_size %d, n_embd %d make tensors of more than 2^63 "
               "elements",
               who, cfg.vocab_size, cfg.block_size, cfg.n_embd);
}

}  // namespace

// ---- attention ----

CausalSelfAttention::CausalSelfAttention(const GptConfig& cfg, Generator* gen) : n_head_(cfg.n_head) {
  check_gpt_config("CausalSelfAttention", cfg);
  const Init init{cfg.device, gen};
  qkv_ = &register_module("qkv", std::make_unique<Linear>(cfg.n_embd, 3 * cfg.n_embd, true, init));  // [3C, C]
  proj_ = &register_module("proj", std::make_unique<Linear>(cfg.n_embd, cfg.n_embd, true, init));    // [C, C]
  attn_drop_ = &register_module("attn_drop", std::make_unique<Dropout>(cfg.dropout));
  resid_drop_ = &register_module("resid_drop", std::make_unique<Dropout>(cfg.dropout));
  // mask[i][j] = true where key j lies in query i's future.
  const int64_t n = cfg.block_size;
  std::vector<bool> future(n * n);
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t j = 0; j < n; ++j) future[i * n + j] = j > i;
  }
  mask_ = register_buffer("mask", from_vector<bool>(future, {n, n}, cfg.device), /*persistent=*/false);
}

Tensor CausalSelfAttention::forward(const Tensor& x) const {
  ENCORE_CHECK(x.dim() == 3, "CausalSelfAttention: input must be [B, T, C], got %s", shape_str(x.shape()));
  const int64_t B = x.size(0), T = x.size(1), C = x.size(2), H = n_head_, hd = C / H;
  ENCORE_CHECK(T <= mask_.size(0), "CausalSelfAttention: sequence length %d exceeds block_size %d", T,
               mask_.size(0));
  std::vector<Tensor> qkv = split(qkv_->forward(x), C, 2);            // 3 x [B, T, C]
  Tensor q = qkv[0].view({B, T, H, hd}).transpose(1, 2);               // [B, H, T, hd]
  Tensor k = qkv[1].view({B, T, H, hd}).transpose(1, 2);               // [B, H, T, hd]
  Tensor v = qkv[2].view({B, T, H, hd}).transpose(1, 2);               // [B, H, T, hd]
  Tensor att = matmul(q, k.transpose(2, 3)) * (1.0 / std::sqrt(static_cast<double>(hd)));   // [B, H, T, T]
  att = masked_fill(att, mask_.slice(0, 0, T).slice(1, 0, T), -std::numeric_limits<double>::infinity());
  att = attn_drop_->forward(softmax(att, -1));                         // [B, H, T, T]
  Tensor y = matmul(att, v).transpose(1, 2).reshape({B, T, C});        // [B, T, C]
  return resid_drop_->forward(proj_->forward(y));                      // [B, T, C]
}

// ---- block ----

TransformerBlock::TransformerBlock(const GptConfig& cfg, Generator* gen) {
  check_gpt_config("TransformerBlock", cfg);
  const Init init{cfg.device, gen};
  ln1_ = &register_module("ln1", std::make_unique<LayerNorm>(cfg.n_embd, 1e-5, init));
  attn_ = &register_module("attn", std::make_unique<CausalSelfAttention>(cfg, gen));
  ln2_ = &register_module("ln2", std::make_unique<LayerNorm>(cfg.n_embd, 1e-5, init));
  mlp_ = &register_module("mlp", std::make_unique<Mlp>(std::vector<int64_t>{cfg.n_embd, 4 * cfg.n_embd, cfg.n_embd},
                                                        Activation::kGelu, init));
  drop_ = &register_module("drop", std::make_unique<Dropout>(cfg.dropout));
}

Tensor TransformerBlock::forward(const Tensor& x) const {
  Tensor h = x + attn_->forward(ln1_->forward(x));                     // [B, T, C]
  return h + drop_->forward(mlp_->forward(ln2_->forward(h)));          // [B, T, C]
}

// ---- model ----

namespace {

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// GPT-2 initialisation: weights N(0, 0.02); the projections that write into the
// residual stream N(0, 0.02 / sqrt(2 n_layer)); biases 0; LayerNorm 1 and 0.
void init_gpt2(const NamedTensors& params, int64_t n_layer, Generator& gen) {
  NoGradGuard no_grad;
  const double residual_std = 0.02 / std::sqrt(2.0 * static_cast<double>(n_layer));
  for (const auto& [name, p] : params) {
    if (name.find(".ln") != std::string::npos || name.rfind("ln_f", 0) == 0) continue;   // LayerNorm keeps 1, 0
    Tensor t = p;
    if (ends_with(name, ".bias")) {
      t.zero_();
    } else {
      const bool residual = ends_with(name, "attn.proj.weight") || ends_with(name, "mlp.layers.1.weight");
      t.copy_(randn(p.shape(), kFloat32, p.device(), &gen) * (residual ? residual_std : 0.02));
    }
  }
}

}  // namespace

Gpt::Gpt(const GptConfig& cfg) : cfg_(cfg) {
  check_gpt_config("Gpt", cfg);
  Generator gen(cfg.seed, cfg.device);
  const Init init{cfg.device, &gen};
  wte_ = &register_module("wte", std::make_unique<Embedding>(cfg.vocab_size, cfg.n_embd, init));   // [V, C]
  wpe_ = &register_module("wpe", std::make_unique<Embedding>(cfg.block_size, cfg.n_embd, init));   // [block, C]
  drop_ = &register_module("drop", std::make_unique<Dropout>(cfg.dropout));   // GPT-2's embd_pdrop
  for (int64_t i = 0; i < cfg.n_layer; ++i) {
    blocks_.push_back(&register_module("blocks." + std::to_string(i), std::make_unique<TransformerBlock>(cfg, &gen)));
  }
  ln_f_ = &register_module("ln_f", std::make_unique<LayerNorm>(cfg.n_embd, 1e-5, init));
  lm_head_ = cfg.tied_head ? nullptr
                           : &register_module("lm_head", std::make_unique<Linear>(cfg.n_embd, cfg.vocab_size, false, init));
  init_gpt2(named_parameters(), cfg.n_layer, gen);
}

Tensor Gpt::forward(const Tensor& ids) const {
  ENCORE_CHECK(ids.dim() == 2, "Gpt: ids must be [B, T], got %s", shape_str(ids.shape()));
  const int64_t T = ids.size(1);
  ENCORE_CHECK(T <= cfg_.block_size, "Gpt: sequence length %d exceeds block_size %d", T, cfg_.block_size);
  Tensor pos = arange(0, T, 1, kInt64, ids.device());                  // [T]
  Tensor x = drop_->forward(wte_->forward(ids) + wpe_->forward(pos));  // [B, T, C]
  for (const TransformerBlock* block : blocks_) x = block->forward(x); // [B, T, C]
  x = ln_f_->forward(x);                                               // [B, T, C]
  return lm_head_ != nullptr ? lm_head_->forward(x)                    // [B, T, V]
                             : linear(x, wte_->weight);                // tied: x wte^T
}

Tensor Gpt::loss(const Tensor& ids, const Tensor& targets) const {
  ENCORE_CHECK(targets.defined() && ids.defined() && targets.shape() == ids.shape(),
               "Gpt::loss: targets %s must be [B, T] like ids %s (the target of each position)",
               targets.defined() ? shape_str(targets.shape()) : "(undefined)",
               ids.defined() ? shape_str(ids.shape()) : "(undefined)");
  Tensor logits = forward(ids);                                        // [B, T, V]
  const int64_t V = logits.size(2);
  return cross_entropy(logits.reshape({-1, V}), targets.reshape({-1}));   // scalar
}

}  // namespace encore::nn
