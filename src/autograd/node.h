// Autograd graph nodes: one per op application that needs a gradient.
//
// A Node maps the gradients of its forward's outputs to the gradients of its
// forward's inputs; next_edges()[i] says where the gradient of input i goes
// (the producer's Node, or the AccumulateGrad node of a leaf). Backward
// formulas live beside their forward ops in src/ops/ and are attached with
// record() from src/autograd/function.h.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>
#include <memory>
#include <optional>
#include <utility>

#include "absl/container/inlined_vector.h"
#include "encore/tensor.h"

namespace encore::autograd {

class Node;
using Grads = absl::InlinedVector<Tensor, 3>;   // one per input or per output

struct Edge {
  std::shared_ptr<Node> fn;   // null: the input needs no gradient
  int32_t input_nr = 0;       // which output of fn's forward this input was
};

// What a node remembers of each forward input, to check the gradient it returns.
struct InputMeta {
  Shape shape;
  DType dtype;
};

class Node {
 public:
  Node(const char* name, int num_outputs);
  virtual ~Node();   // NOTE [ Destroying deep graphs ] in node.cpp

 protected:
  void run_first() { sequence_nr_ |= uint64_t{1} << 63; }   // NOTE [ Accumulate first ]

 public:

  const char* name() const { return name_; }
  int num_outputs() const { return num_outputs_; }
  // The order of backward: of the nodes ready to run, the largest runs first
  // (the latest created; NOTE [ Accumulate first ] for leaves).
  uint64_t sequence_nr() const { return sequence_nr_; }
  absl::InlinedVector<Edge, 2>& next_edges() { return next_edges_; }
  absl::InlinedVector<InputMeta, 2>& input_meta() { return input_meta_; }
  const absl::InlinedVector<InputMeta, 2>& input_meta() const { return input_meta_; }

  // grads: one per forward output (undefined where none flowed). Returns one
  // per forward input (undefined allowed where next_edges()[i] is null).
  virtual Grads apply(Grads&& grads) = 0;
  // Frees saved tensors after backward (unless retain_graph).
  virtual void release_saved() {}

 private:
  const char* name_;
  int num_outputs_;
  uint64_t sequence_nr_;
  absl::InlinedVector<Edge, 2> next_edges_;
  absl::InlinedVector<InputMeta, 2> input_meta_;
};

// A node whose backward is a lambda; releasing it destroys the lambda and so
// every tensor it captured.
template <typename F>
class FunctionNode final : public Node {
 public:
  FunctionNode(const char* name, int num_outputs, F fn) : Node(name, num_outputs), fn_(std::move(fn)) {}
  Grads apply(Grads&& grads) override;
  void release_saved() override { fn_.reset(); }

 private:
  std::optional<F> fn_;
};

[[noreturn]] void throw_freed_graph(const char* name);

template <typename F>
Grads FunctionNode<F>::apply(Grads&& grads) {
  if (!fn_) throw_freed_graph(name());
  if constexpr (std::is_invocable_v<F&, Tensor&&> && !std::is_invocable_v<F&, const Tensor&>) {
    return (*fn_)(std::move(grads[0]));  // the formula may write into the gradient's buffer
  } else if constexpr (std::is_invocable_v<F&, const Tensor&, absl::Span<const InputMeta>>) {
    return (*fn_)(grads[0], absl::MakeConstSpan(input_meta()));
  } else if constexpr (std::is_invocable_v<F&, const Tensor&>) {
    return (*fn_)(grads[0]);
  } else {
    return (*fn_)(grads);
  }
}

// Adds the gradient into a leaf's .grad(). Owned by the leaf (see NOTE [ Leaf
// accumulators ] in tensor.h); points back at it without owning it.
//
// NOTE [ Accumulate first ]: an AccumulateGrad runs as soon as it is ready
// (its sequence number has the top bit set), as in PyTorch, where
// AccumulateGrad's sequence_nr is UINT64_MAX. Otherwise, made at the leaf's
// first use, it would be the oldest node and wait for the rest of backward,
// and the post-accumulate hooks (DistributedDataParallel's all-reduce of a
// bucket) would all fire at its very end, with nothing left to overlap.
class AccumulateGrad final : public Node {
 public:
  explicit AccumulateGrad(TensorImpl* leaf);
  Grads apply(Grads&& grads) override;
  TensorImpl* leaf() const { return leaf_; }
  void detach_leaf() { leaf_ = nullptr; }   // the leaf is being destroyed
  // autograd::register_post_accumulate_hook (encore/autograd.h).
  using Hook = std::function<void(const Tensor&)>;
  int64_t add_hook(Hook hook);
  bool remove_hook(int64_t id);   // false: no hook had that id

 private:
  void run_hooks(const Tensor& leaf);

  TensorImpl* leaf_;
  std::vector<std::pair<int64_t, std::shared_ptr<Hook>>> hooks_;   // (id, hook), in registration order
  int64_t next_hook_ = 0;
};

// Where the gradient of t must go: its grad_fn, its leaf accumulator, or nowhere.
Edge gradient_edge(const Tensor& t);

}  // namespace encore::autograd
