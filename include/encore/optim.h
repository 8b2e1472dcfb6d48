// Optimizers (SGD, AdamW), global gradient-norm clipping and a warm-up +
// cosine learning-rate schedule, written so that a whole training step can be
// captured once and replayed.
//
//   using namespace encore;
//   optim::AdamW opt(model.parameters(), {.lr = 3e-4, .weight_decay = 0.1});
//   optim::WarmupCosine sched(opt, {.base_lr = 3e-4, .min_lr = 3e-5, .warmup_steps = 100,
//                                   .total_steps = 10000});
//   for (...) {
//     opt.zero_grad();
//     loss(...).backward();
//     Tensor norm = optim::clip_grad_norm(opt.params(), 1.0);   // device tensor, no host read
//     opt.step();
//     sched.step();                                            // host write, between steps
//   }
//
// NOTE [ Step state lives on the device ]: everything that changes from one
// step to the next (the learning rate, AdamW's step count, clipping's scale)
// is a device tensor that the kernels read through pointers in their
// arguments. A captured step therefore replays with the current learning rate
// and step count instead of the values seen at capture. Constants (betas, eps,
// momentum, weight decay) are plain kernel arguments: changing them needs a
// new optimizer (and a new capture).
//
// The kernels compute in f32, so the constructors and set_lr refuse
// (encore::Error, InvalidArgument, naming the optimizer, the option and the
// value) a learning rate, momentum, weight decay or eps that is negative, NaN
// or past the f32 range (which would become inf in the kernels), as well as
// betas outside [0, 1).
//
// Dtypes: parameters may be f32, f16 or bf16; updates are computed in f32 and
// optimizer state (momentum, exp_avg, exp_avg_sq) is always f32.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "encore/tensor.h"

namespace encore::optim {

// Named tensors for checkpoints: (stable name, tensor). The same alias may be
// declared by other headers (checkpoint.h); a duplicate alias of the same type
// is legal C++.
using NamedTensors = std::vector<std::pair<std::string, Tensor>>;

// The base of every optimizer: the parameters, the learning-rate tensor and
// zero_grad(). Not copyable: the kernels of a captured step point at its state.
class Optimizer {
 public:
  virtual ~Optimizer() = default;
  Optimizer(const Optimizer&) = delete;
  Optimizer& operator=(const Optimizer&) = delete;

  // Applies one update to every parameter whose .grad() is defined; others
  // are skipped (no state is created for them). State is created lazily, on
  // the parameters' device, the first time a parameter has a gradient.
  // Launches kernels only (no host reads), so it can be captured.
  virtual void step() = 0;

  // Zeroes every existing .grad(), lazily and in place (NOTE [ Lazy
  // zero_grad ] in tensor.h): it launches nothing, it marks each gradient so
  // that the next backward() overwrites it instead of adding to it (and
  // .grad() reads as zeros until then). Gradients keep their storage, which a
  // captured graph points at; unlike PyTorch's default (set_to_none=True) we
  // never make gradients undefined. Whether backward() overwrites or adds is
  // decided when its kernels are issued, so a captured graph checks the mark
  // at every replay (NOTE [ Host state as a precondition ] in
  // capture/graph_impl.h): call zero_grad() inside a captured step.
  void zero_grad();

  // The learning rate: an f32 0-d tensor on the parameters' device, read by
  // the update kernels at every step.
  const Tensor& lr() const { return lr_; }
  // Writes lr() in stream order (does not wait for the GPU: earlier steps
  // still read the old rate). Call it between steps, not inside a captured
  // step: capture refuses it like any host transfer.
  void set_lr(double lr);
  // Host read of lr() (synchronises; refused inside capture).
  double get_lr() const;

  const std::vector<Tensor>& params() const { return params_; }

  // The optimizer's state for checkpoints, in a stable order with stable
  // names: "lr", then the optimizer's own ("step", "momentum.{i}",
  // "exp_avg.{i}", "exp_avg_sq.{i}", where i indexes params()). Tensors that
  // were not created yet (lazy state) are absent. The tensors are the live
  // state: copy_ into them to restore a checkpoint.
  virtual NamedTensors state() const;
  // Creates every state tensor now (normally created by the first step()),
  // so that a checkpoint can be loaded into a fresh optimizer.
  virtual void init_state() {}

 protected:
  // Checks params (defined, float, leaves that require grad, one device, no
  // duplicates) and lr; `name` prefixes every error ("SGD", "AdamW").
  Optimizer(const char* name, std::vector<Tensor> params, double lr);

  const char* name_;
  std::vector<Tensor> params_;
  Tensor lr_;   // f32, 0-d, on the parameters' device
};

struct SgdOptions {
  double lr = 1e-3;
  double momentum = 0.0;        // 0: plain SGD, no momentum buffers
  bool nesterov = false;        // needs momentum > 0
  double weight_decay = 0.0;    // L2 penalty added to the gradient
};

// Stochastic gradient descent with PyTorch's semantics (dampening 0):
//   d = g + weight_decay * p
//   buf = momentum * buf + d             (buf starts at 0, so the first buf = d)
//   d = nesterov ? d + momentum * buf : buf   (when momentum > 0)
//   p -= lr * d
// One kernel launch per parameter.
class SGD : public Optimizer {
 public:
  SGD(std::vector<Tensor> params, SgdOptions options);
  void step() override;
  NamedTensors state() const override;   // adds "momentum.{i}"
  void init_state() override;
  const SgdOptions& options() const { return options_; }

 private:
  SgdOptions options_;
  std::vector<Tensor> momentum_;   // f32, params_[i]'s shape; undefined until needed
};

struct AdamWOptions {
  double lr = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;             // > 0 as an f32: with 0, a gradient of 0 so far gives 0/0
  double weight_decay = 0.01;   // decoupled: p -= lr * weight_decay * p
};

// Adam with decoupled weight decay (PyTorch's AdamW). With t the step count:
//   p -= lr * weight_decay * p
//   m = beta1 * m + (1 - beta1) * g          v = beta2 * v + (1 - beta2) * g^2
//   p -= lr * (m / (1 - beta1^t)) / (sqrt(v / (1 - beta2^t)) + eps)
// t is an i64 0-d device tensor ("step") incremented by a kernel at the start
// of each step() that has at least one gradient; the update kernel reads lr
// and t from device memory. One t is shared by all parameters (PyTorch keeps
// one per parameter; they differ only for parameters skipped on some steps).
class AdamW : public Optimizer {
 public:
  AdamW(std::vector<Tensor> params, AdamWOptions options = {});
  void step() override;
  NamedTensors state() const override;   // adds "step", "exp_avg.{i}", "exp_avg_sq.{i}"
  void init_state() override;
  const AdamWOptions& options() const { return options_; }

 private:
  // True when every parameter has a dense gradient of its dtype, all one
  // dtype: then step() is one launch over all of them.
  bool can_fuse() const;
  void update_table();   // rebuilds table_ when a parameter's storage changed

  AdamWOptions options_;
  Tensor step_;                       // i64, 0-d; undefined until the first step()
  std::vector<Tensor> exp_avg_;       // f32, params_[i]'s shape; undefined until needed
  std::vector<Tensor> exp_avg_sq_;
  // The multi-tensor launch (NOTE [ One AdamW launch ] in adamw.cpp): a
  // persistent table on the parameters' device, the storages it names, and
  // the storage ids and data addresses it was built from.
  Tensor table_;
  int64_t table_total_ = 0;
  std::vector<uint64_t> table_key_;
  std::vector<Storage*> table_reads_, table_writes_;
};

// Scales all existing gradients of params together so that their global L2
// norm is at most max_norm (>= 0); a parameter listed twice (or two sharing
// one gradient tensor) is refused, as the optimizers refuse it:
//   norm = sqrt(sum over grads of sum(g^2));  g *= min(1, max_norm / (norm + 1e-6))
// (sums in double: any norm f32 holds is finite, though its square is not)
// Everything runs in kernels (no host read), so it can be captured; gradients
// are left untouched when the scale is 1. Returns the norm before clipping as
// an f32 0-d tensor on the gradients' device (0 when no gradient exists); read
// it outside a captured step. A NaN norm leaves gradients unchanged; an
// infinite one scales them by 0 (as PyTorch does).
Tensor clip_grad_norm(const std::vector<Tensor>& params, double max_norm);

struct WarmupCosineOptions {
  double base_lr = 1e-3;      // > 0: the peak, reached at the end of warm-up
  double min_lr = 0.0;        // in [0, base_lr]: the floor after the cosine
  int64_t warmup_steps = 0;   // in [0, total_steps]
  int64_t total_steps = 1;    // > 0
};

// Linear warm-up, then cosine decay. With W = warmup_steps, N = total_steps:
//   lr(s) = base_lr * (s + 1) / W                                     s < W
//   lr(s) = min_lr + (base_lr - min_lr) * (1 + cos(pi * (s - W) / (N - W))) / 2   W <= s < N
//   lr(s) = min_lr                                                    s >= N
// The schedule keeps a host step counter s, starting at 0. The constructor
// writes lr(0) into the optimizer's lr tensor; each step() advances s and
// writes lr(s). Call it after opt.step(), outside any captured step. The
// schedule keeps a reference to `opt`, which must outlive it. A step() at
// s = INT64_MAX (reachable only by set_step) is refused (OutOfRange) and
// changes nothing.
class WarmupCosine {
 public:
  WarmupCosine(Optimizer& opt, WarmupCosineOptions options);
  void step();
  double lr_at(int64_t step) const;   // pure; step >= 0
  int64_t current_step() const { return step_; }
  // Resumes the schedule at `step` (>= 0): writes lr(step), as if step() had
  // been called that many times (training checkpoints restore it so).
  void set_step(int64_t step);
  const WarmupCosineOptions& options() const { return options_; }

 private:
  Optimizer& opt_;
  WarmupCosineOptions options_;
  int64_t step_ = 0;
};

}  // namespace encore::optim
