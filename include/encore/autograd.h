// Autograd controls: grad mode, and backward over several roots.
//
// encore records a dynamic tape as ops run: every op whose input requires grad
// attaches a Node (its backward formula, defined beside the forward in
// src/ops/) to its output. Tensor::backward() walks the Nodes in reverse
// topological order and accumulates into .grad() of leaves that require grad.
//
//   {
//     encore::NoGradGuard no_grad;     // ops inside record nothing
//     w.add_(w.grad(), -0.1);          // an SGD update
//   }
//
// Backward formulas run with grad mode off: encore has no double backward.
// Saved tensors are freed after backward() unless retain_graph is set; a
// second backward through the freed graph throws encore::Error.
//
// Threads: grad mode is per thread, and a new thread starts with it on (as
// in PyTorch). Nothing in autograd takes a lock: a graph, and the leaves
// whose .grad() it accumulates into, must be used by one thread at a time
// (PyTorch locks each leaf's accumulation; encore does not).
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "encore/tensor.h"

namespace encore {

class GradMode {
 public:
  static bool is_enabled();
  static void set_enabled(bool enabled);
};

// Disables grad recording on this thread for its scope; restores the previous
// mode when the scope ends, by an exception too.
class NoGradGuard {
 public:
  NoGradGuard() : prev_(GradMode::is_enabled()) { GradMode::set_enabled(false); }
  ~NoGradGuard() { GradMode::set_enabled(prev_); }
  NoGradGuard(const NoGradGuard&) = delete;
  NoGradGuard& operator=(const NoGradGuard&) = delete;

 private:
  bool prev_;
};

namespace autograd {
// Back-propagates from several roots at once. grads is empty (every root a
// scalar) or holds one gradient per root; grads[i] may be undefined for a
// scalar root (then 1 is used). Any other number of gradients is refused.
void backward(const std::vector<Tensor>& roots, const std::vector<Tensor>& grads = {},
              bool retain_graph = false);
// Zeroes t.grad() in place, lazily (NOTE [ Lazy zero_grad ] in tensor.h): the
// next accumulated gradient overwrites it, and t.grad() reads as zeros until
// then. The gradient's storage stays. Nothing to do if t has no gradient yet.
void zero_grad(const Tensor& t);

// Runs `hook(leaf)` each time backward has accumulated a gradient into the
// leaf's .grad() (after the add or copy: leaf.grad() holds the new sum), as
// torch.Tensor.register_post_accumulate_grad_hook. Once per backward() that
// reaches the leaf, whatever the number of paths. Hooks run in registration
// order on the thread running backward(), with grad mode off; a hook may
// launch kernels (DistributedDataParallel all-reduces a bucket there), and
// an exception it throws ends the backward. A hook may register or remove
// hooks of the same leaf, itself included: one removed does not run again,
// not even later in the same round; one registered first runs at the next
// accumulation. Returns an id for remove_post_accumulate_hook. `leaf` must
// be a leaf that requires grad. The leaf owns its hooks until they are removed:
// they (and what they capture) go with the leaf's last handle, so a hook
// that holds the leaf itself keeps it alive until removed.
//
//   int64_t id = autograd::register_post_accumulate_hook(w, [](const Tensor& w) { use(w.grad()); });
//   loss.backward();                                    // the hook sees w.grad()
//   autograd::remove_post_accumulate_hook(w, id);
using PostAccumulateHook = std::function<void(const Tensor& leaf)>;
int64_t register_post_accumulate_hook(const Tensor& leaf, PostAccumulateHook hook);
// Removes a hook registered on `leaf` (no effect when it was removed already).
void remove_post_accumulate_hook(const Tensor& leaf, int64_t id);
}  // namespace autograd

}  // namespace encore
