// Neural-network modules: parameters with dotted names, train/eval, the
// layers of a small GPT and of convolutional networks.
//
//   encore::nn::Mlp mlp({784, 128, 10});                       // Linear-ReLU-Linear
//   encore::Tensor logits = mlp.forward(x);                   // x [B, 784] -> [B, 10]
//   for (auto& [name, p] : mlp.named_parameters()) ...        // "layers.0.weight", ...
//
//   encore::nn::Gpt gpt({.vocab_size = 65, .block_size = 64, .n_layer = 2, .n_head = 4, .n_embd = 128});
//   encore::Tensor loss = gpt.loss(tokens, targets);          // [B, T] ids -> scalar
//
//   encore::nn::Sequential net(std::make_unique<encore::nn::Linear>(4, 8),   // "0.weight", ...
//                              std::make_unique<encore::nn::ReLU>(),
//                              std::make_unique<encore::nn::Linear>(8, 2));
//   encore::Tensor y = net.forward(x);                        // each child's forward in order
//
// Parameters are leaf tensors that require grad, created on construction on
// the module's device (Init::device). The layers initialise them as PyTorch
// does by default, each saying how, from Init::gen (or the device's default
// generator); Gpt re-initialises its own from GptConfig::seed in the GPT-2
// scheme: N(0, 0.02) weights, residual projections N(0, 0.02 / sqrt(2
// n_layer)), zero biases, LayerNorm weight 1. A module owns its parameters;
// the Tensor handles returned by parameters() share them.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "encore/error.h"
#include "encore/ops.h"
#include "encore/tensor.h"

namespace encore {
struct HostFlag;   // internal (src/core/step_observer.h): a module's training mode, which captured graphs check
}  // namespace encore

namespace encore::nn {

using NamedTensors = std::vector<std::pair<std::string, Tensor>>;

class Module {
 public:
  virtual ~Module();
  Module();
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;

  // Every parameter of this module and its submodules, each once (a tied
  // weight appears under its first name), in registration order.
  std::vector<Tensor> parameters() const;
  NamedTensors named_parameters() const;
  // Recursive; dropout is active and batch norm uses the batch's statistics
  // in training mode. A captured step reads the mode: its graph refuses to
  // replay once the mode differs from the one it was captured in.
  void train(bool on = true);
  void eval() { train(false); }
  bool is_training() const;
  // Non-parameter state (attention masks, batch norm's running statistics)
  // with dotted names.
  NamedTensors named_buffers() const;
  // The buffers registered persistent (running statistics), which
  // checkpoints save beside the parameters.
  NamedTensors named_persistent_buffers() const;
  // What a checkpoint holds: named_parameters() then the persistent buffers
  // (register_buffer(..., persistent = true)), each once.
  NamedTensors state_tensors() const;
  // The one-tensor forward that containers (Sequential) call: every layer
  // with one input overrides it. The default throws encore::Error naming the
  // module's type (a Gpt block list, a ModuleList: no single forward).
  virtual Tensor forward(const Tensor& x) const;
  // model(x) is model.forward(x), as in PyTorch.
  Tensor operator()(const Tensor& x) const { return forward(x); }
  // Moves every parameter and buffer to `device` in place: handles held
  // elsewhere see the move.
  void to(Device device);
  // Converts every parameter and float buffer to the float dtype `dtype`
  // (e.g. kBFloat16 for mixed-precision training) in place, like
  // to(Device); gradients are dropped. Call it before creating the optimizer.
  void to(DType dtype);
  // Zeroes existing gradients in place (their storage stays: see optim.h).
  void zero_grad();

 protected:
  // Registers t as a parameter and returns it: a leaf t itself (its
  // requires_grad turned on), so the caller's handle is the parameter; a
  // non-leaf t (the result of ops) as a new leaf over its values.
  Tensor register_parameter(std::string name, Tensor t);
  // Registers t as a buffer: state that moves with the module but is not
  // trained. A persistent buffer (running statistics) is saved in
  // checkpoints; a derived one (an attention mask) is not.
  Tensor register_buffer(std::string name, Tensor t, bool persistent = true);
  // Registers an already registered tensor of another module (weight tying).
  void register_shared_parameter(std::string name, const Tensor& t);
  // Each name (not empty) is registered once per module, across parameters,
  // buffers and children: a second registration throws encore::Error.
  template <typename M>
  M& register_module(std::string name, std::unique_ptr<M> m) {
    ENCORE_CHECK(m != nullptr, "register_module: the module \"%s\" is null", name);
    check_new_name(name, "module");
    M& ref = *m;
    children_.emplace_back(std::move(name), std::move(m));
    return ref;
  }

 private:
  enum class Kind { kParameters, kBuffers, kPersistentBuffers };
  // Throws unless `name` is non-empty and unused by this module; `what` is
  // "parameter", "buffer" or "module", for the message.
  void check_new_name(const std::string& name, const char* what) const;
  void collect(const std::string& prefix, NamedTensors& out, Kind kind) const;
  NamedTensors params_;
  NamedTensors buffers_;
  std::vector<bool> persistent_;   // per buffers_ entry
  std::vector<std::pair<std::string, std::unique_ptr<Module>>> children_;
  Ref<HostFlag> training_;   // NOTE [ Host flags ]: true in training mode
};

// Initialisation options shared by the layers.
struct Init {
  Device device = kCPU;
  Generator* gen = nullptr;       // nullptr: default_generator(device); used only while constructing
};

// y = x W^T + b. W [out, in], b [out]. Default init: U(-1/sqrt(in), 1/sqrt(in)) (PyTorch's).
class Linear : public Module {
 public:
  Linear(int64_t in, int64_t out, bool bias = true, Init init = {});
  Tensor forward(const Tensor& x) const override { return linear(x, weight, bias); }
  Tensor weight;   // [out, in]
  Tensor bias;     // [out] or undefined
};

// Normalises the last dim. weight [dim] = 1, bias [dim] = 0; eps finite and >= 0.
class LayerNorm : public Module {
 public:
  explicit LayerNorm(int64_t dim, double eps = 1e-5, Init init = {});
  Tensor forward(const Tensor& x) const override { return layer_norm(x, {weight.size(0)}, weight, bias, eps_); }
  Tensor weight, bias;
 private:
  double eps_;
};

// Rows of weight [num, dim] looked up by integer ids of any shape.
class Embedding : public Module {
 public:
  Embedding(int64_t num, int64_t dim, Init init = {});   // N(0, 1) like PyTorch
  Tensor forward(const Tensor& ids) const override { return embedding(weight, ids); }
  Tensor weight;   // [num, dim]
};

// Zeroes elements with probability p while training (and scales the others
// by 1 / (1 - p)). p must be in [0, 1] (1: zeros, as PyTorch): refused
// (encore::Error) when built.
class Dropout : public Module {
 public:
  explicit Dropout(double p);
  Tensor forward(const Tensor& x) const override { return dropout(x, p_, is_training()); }
 private:
  double p_;
};

// ---- convolutional layers (NCHW; PyTorch's arguments and defaults) ----
//
//   nn::Conv2d conv(1, 16, 3, /*stride=*/1, /*padding=*/1);
//   nn::BatchNorm2d bn(16);
//   nn::MaxPool2d pool(2);
//   Tensor h = pool.forward(relu(bn.forward(conv.forward(x))));   // [B, 1, 8, 8] -> [B, 16, 4, 4]
//   Tensor flat = nn::Flatten().forward(h);                        // [B, 256]

// conv2d with weight [out, in / groups, kh, kw] and bias [out], both
// U(-1/sqrt(fan_in), 1/sqrt(fan_in)), fan_in = in / groups * kh * kw (PyTorch's default init).
class Conv2d : public Module {
 public:
  Conv2d(int64_t in_channels, int64_t out_channels, Size2 kernel_size, Size2 stride = 1, Size2 padding = 0,
         Size2 dilation = 1, int64_t groups = 1, bool bias = true, Init init = {});
  Tensor forward(const Tensor& x) const override {
    return conv2d(x, weight, bias, stride_, padding_, dilation_, groups_);
  }
  Tensor weight;   // [out, in / groups, kh, kw]
  Tensor bias;     // [out] or undefined
 private:
  Size2 stride_, padding_, dilation_;
  int64_t groups_;
};

// batch_norm over the channels of its input: BatchNorm1d takes [N, C] or
// [N, C, L], BatchNorm2d [N, C, H, W]; C must be num_features. weight [C] = 1,
// bias [C] = 0 (affine); buffers running_mean [C] = 0, running_var [C] = 1
// and num_batches_tracked (i64, 0-d), all saved in checkpoints. In training
// mode forward() counts the batch in num_batches_tracked, normalizes by the
// batch's statistics and updates the running ones in place (inside a
// captured step too); in eval mode it normalizes by the running ones
// (running = (1 - momentum) running + momentum batch; momentum in [0, 1],
// eps finite and >= 0, checked when built). momentum = std::nullopt is
// PyTorch's momentum=None, a cumulative moving average: the factor is
// 1 / num_batches_tracked, so after k batches the running mean is the mean
// of their k means; the kernel reads the count on the device, so each
// replay of a captured step uses its own. Without track_running_stats it
// always uses the batch's.
//
//   nn::BatchNorm1d bn(128);                        // after a Linear(.., 128)
//   Tensor h = relu(bn.forward(fc.forward(x)));     // x [B, in] -> [B, 128]
//   nn::BatchNorm2d cma(16, 1e-5, std::nullopt);    // running stats: the average over every batch
class BatchNormBase : public Module {
 public:
  Tensor forward(const Tensor& x) const override;
  Tensor weight, bias;                                      // [C] or undefined (affine = false)
  Tensor running_mean, running_var, num_batches_tracked;    // undefined without track_running_stats
 protected:
  // `layer` names the class in errors ("BatchNorm2d"); inputs have min_dim..max_dim dims.
  BatchNormBase(const char* layer, int64_t min_dim, int64_t max_dim, int64_t num_features, double eps,
                std::optional<double> momentum, bool affine, bool track_running_stats, Init init);
 private:
  const char* layer_;
  int64_t min_dim_, max_dim_, num_features_;
  double eps_;
  std::optional<double> momentum_;   // nullopt: the cumulative average
};

class BatchNorm1d : public BatchNormBase {
 public:
  explicit BatchNorm1d(int64_t num_features, double eps = 1e-5, std::optional<double> momentum = 0.1,
                       bool affine = true, bool track_running_stats = true, Init init = {})
      : BatchNormBase("BatchNorm1d", 2, 3, num_features, eps, momentum, affine, track_running_stats, init) {}
};

class BatchNorm2d : public BatchNormBase {
 public:
  explicit BatchNorm2d(int64_t num_features, double eps = 1e-5, std::optional<double> momentum = 0.1,
                       bool affine = true, bool track_running_stats = true, Init init = {})
      : BatchNormBase("BatchNorm2d", 4, 4, num_features, eps, momentum, affine, track_running_stats, init) {}
};

class MaxPool2d : public Module {
 public:
  explicit MaxPool2d(Size2 kernel_size, std::optional<Size2> stride = std::nullopt, Size2 padding = 0,
                     Size2 dilation = 1, bool ceil_mode = false)
      : kernel_(kernel_size), stride_(stride), padding_(padding), dilation_(dilation), ceil_mode_(ceil_mode) {}
  Tensor forward(const Tensor& x) const override {
    return max_pool2d(x, kernel_, stride_, padding_, dilation_, ceil_mode_);
  }
 private:
  Size2 kernel_;
  std::optional<Size2> stride_;
  Size2 padding_, dilation_;
  bool ceil_mode_;
};

class AvgPool2d : public Module {
 public:
  explicit AvgPool2d(Size2 kernel_size, std::optional<Size2> stride = std::nullopt, Size2 padding = 0,
                     bool ceil_mode = false, bool count_include_pad = true)
      : kernel_(kernel_size), stride_(stride), padding_(padding), ceil_mode_(ceil_mode),
        count_include_pad_(count_include_pad) {}
  Tensor forward(const Tensor& x) const override {
    return avg_pool2d(x, kernel_, stride_, padding_, ceil_mode_, count_include_pad_);
  }
 private:
  Size2 kernel_;
  std::optional<Size2> stride_;
  Size2 padding_;
  bool ceil_mode_, count_include_pad_;
};

class AdaptiveAvgPool2d : public Module {
 public:
  explicit AdaptiveAvgPool2d(Size2 output_size) : output_size_(output_size) {}
  Tensor forward(const Tensor& x) const override { return adaptive_avg_pool2d(x, output_size_); }
 private:
  Size2 output_size_;
};

// flatten(x, start_dim, end_dim); start_dim defaults to 1 (keeps the batch dim), as nn.Flatten.
class Flatten : public Module {
 public:
  explicit Flatten(int64_t start_dim = 1, int64_t end_dim = -1) : start_dim_(start_dim), end_dim_(end_dim) {}
  Tensor forward(const Tensor& x) const override { return flatten(x, start_dim_, end_dim_); }
 private:
  int64_t start_dim_, end_dim_;
};

enum class Activation { kRelu, kGelu, kTanh };   // kGelu: the tanh approximation (GPT-2's), not nn.GELU's default

// Linear layers with an activation between them: widths {784, 128, 10} is
// Linear(784, 128) -> act -> Linear(128, 10).
class Mlp : public Module {
 public:
  Mlp(std::vector<int64_t> widths, Activation act = Activation::kRelu, Init init = {});
  Tensor forward(const Tensor& x) const override;
 private:
  std::vector<Linear*> layers_;
  Activation act_;
};

// Gpt's (and its blocks') configuration. Checked when a Gpt,
// TransformerBlock or CausalSelfAttention is built (encore::Error naming the
// class and the field): every size positive, n_embd divisible by n_head,
// dropout in [0, 1], and the tensors' element counts within int64.
struct GptConfig {
  int64_t vocab_size = 65;
  int64_t block_size = 64;    // longest sequence (T <= block_size)
  int64_t n_layer = 2;
  int64_t n_head = 4;
  int64_t n_embd = 128;       // C; must divide by n_head
  double dropout = 0.0;       // after the embeddings, on attention weights, after each residual branch
  bool tied_head = true;      // lm_head shares wte's weight
  uint64_t seed = 1337;       // initialisation seed
  Device device = kCPU;
};

// Multi-head causal self-attention: x [B, T, C] -> [B, T, C].
class CausalSelfAttention : public Module {
 public:
  // `gen` draws the initial weights during construction only (nullptr:
  // default_generator(cfg.device)); dropout draws from the default generator.
  CausalSelfAttention(const GptConfig& cfg, Generator* gen);
  Tensor forward(const Tensor& x) const override;
 private:
  int64_t n_head_;
  Linear* qkv_;     // c_attn: C -> 3C
  Linear* proj_;    // c_proj: C -> C
  Dropout* attn_drop_;
  Dropout* resid_drop_;
  Tensor mask_;     // bool [block, block], true above the diagonal (future positions)
};

// Pre-norm transformer block: x + attn(ln1(x)), then x + mlp(ln2(x)).
class TransformerBlock : public Module {
 public:
  TransformerBlock(const GptConfig& cfg, Generator* gen);   // `gen` as CausalSelfAttention's
  Tensor forward(const Tensor& x) const override;
 private:
  LayerNorm* ln1_;
  CausalSelfAttention* attn_;
  LayerNorm* ln2_;
  Mlp* mlp_;        // C -> 4C -> GELU -> C
  Dropout* drop_;
};

// A small GPT-2: token + position embeddings (then dropout), n_layer blocks,
// final norm, head. With GptConfig::dropout = p it drops where GPT-2 does
// (embd_pdrop, attn_pdrop and resid_pdrop all p) while training.
class Gpt : public Module {
 public:
  explicit Gpt(const GptConfig& cfg);
  // ids [B, T] (i32/i64) -> logits [B, T, V].
  Tensor forward(const Tensor& ids) const override;
  // Mean cross-entropy of forward(ids) against targets [B, T] (ids' shape,
  // else encore::Error; ignore_index -100 positions are not counted).
  Tensor loss(const Tensor& ids, const Tensor& targets) const;
  // The configuration it was built with; `device` stays the one it was built
  // on after to(Device) (ask a parameter for where it is now).
  const GptConfig& config() const { return cfg_; }
 private:
  GptConfig cfg_;
  Embedding* wte_;   // [V, C]
  Embedding* wpe_;   // [block, C]
  Dropout* drop_;    // on wte + wpe
  std::vector<TransformerBlock*> blocks_;
  LayerNorm* ln_f_;
  Linear* lm_head_;  // [V, C], nullptr when tied to wte
};

// ---- containers and activation layers ----

// Modules held in order with index names ("0", "1", ...), for a model's own
// forward to call (blocks of a network); it has no forward of its own. It
// owns its children.
class ModuleList : public Module {
 public:
  // Appends `child` (not null) and returns it.
  template <typename M>
  M& add(std::unique_ptr<M> child) {
    ENCORE_CHECK(child != nullptr, "%s::add: the module is null", kind());
    M& ref = register_module(std::to_string(items_.size()), std::move(child));
    items_.push_back(&ref);
    return ref;
  }
  template <typename M, typename... Args>
  M& emplace(Args&&... args) { return add(std::make_unique<M>(std::forward<Args>(args)...)); }
  size_t size() const { return items_.size(); }
  // The i-th child; throws encore::Error when i >= size().
  Module& operator[](size_t i) const;
  // The i-th child as M; throws encore::Error when it is not an M.
  template <typename M>
  M& at(size_t i) const {
    M* m = dynamic_cast<M*>(&(*this)[i]);
    ENCORE_CHECK(m != nullptr, "%s::at: child %d is not of the requested type", kind(), i);
    return *m;
  }
  std::vector<Module*>::const_iterator begin() const { return items_.begin(); }
  std::vector<Module*>::const_iterator end() const { return items_.end(); }

 protected:
  virtual const char* kind() const { return "ModuleList"; }   // for messages

 private:
  std::vector<Module*> items_;
};

// Modules run one after another: forward(x) is the last child's forward of
// ... of the first child's forward(x). A ModuleList with a forward (PyTorch's
// nn.Sequential names: "0", "1", ... in the order added).
class Sequential : public ModuleList {
 public:
  Sequential() = default;
  template <typename... M>
  explicit Sequential(std::unique_ptr<M>... children) {
    (add(std::move(children)), ...);
  }
  Tensor forward(const Tensor& x) const override;

 protected:
  const char* kind() const override { return "Sequential"; }
};

// Activations as layers, for Sequential.
class ReLU : public Module {
 public:
  Tensor forward(const Tensor& x) const override { return relu(x); }
};
class GELU : public Module {
 public:
  explicit GELU(GeluApprox approx = GeluApprox::kNone) : approx_(approx) {}   // PyTorch's default: exact
  Tensor forward(const Tensor& x) const override { return gelu(x, approx_); }
 private:
  GeluApprox approx_;
};
class Tanh : public Module {
 public:
  Tensor forward(const Tensor& x) const override { return tanh(x); }
};
class Sigmoid : public Module {
 public:
  Tensor forward(const Tensor& x) const override { return sigmoid(x); }
};
class SiLU : public Module {
 public:
  Tensor forward(const Tensor& x) const override { return silu(x); }
};
class Identity : public Module {
 public:
  Tensor forward(const Tensor& x) const override { return x; }
};

}  // namespace encore::nn
