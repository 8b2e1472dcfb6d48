// The backward pass: dependency counting, then a walk in reverse creation
// order (a node runs once every consumer of its outputs has run); around it,
// the observers of a whole backward (backward_observer.h).
#include <atomic>
#include <exception>
#include <memory>
#include <mutex>
#include <queue>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "encore/autograd.h"
#include "encore/ops.h"
#include "src/autograd/backward_observer.h"
#include "src/autograd/node.h"
#include "src/core/grad_mode.h"
#include "src/core/phase.h"
#include "src/core/step_observer.h"

namespace encore {
// NOTE [ Grad mode ] (src/core/grad_mode.h).
bool GradMode::is_enabled() { return grad_mode_internal::enabled; }
void GradMode::set_enabled(bool enabled) { grad_mode_internal::enabled = enabled; }

namespace autograd {
namespace {

struct Pending {
  int deps = 0;
  Grads grads;   // one per forward output of the node
};

using PendingMap = absl::flat_hash_map<Node*, Pending>;

// Counts, for every node reachable from the roots, how many edges point to it.
void count_dependencies(const std::vector<Node*>& roots, PendingMap& pending) {
  std::vector<Node*> stack = roots;
  for (Node* r : roots) pending.try_emplace(r);
  while (!stack.empty()) {
    Node* n = stack.back();
    stack.pop_back();
    for (Edge& e : n->next_edges()) {
      if (!e.fn) continue;
      auto [it, inserted] = pending.try_emplace(e.fn.get());
      ++it->second.deps;
      if (inserted) stack.push_back(e.fn.get());
    }
  }
}

void add_grad(Pending& p, int slot, int num_outputs, Tensor g) {
  if (p.grads.size() < static_cast<size_t>(num_outputs)) p.grads.resize(num_outputs);
  Tensor& dst = p.grads[slot];
  // Both are the engine's own: the sum may land in either's buffer (NOTE
  // [ Writing into a dying temporary ], src/ops/op_utils.h).
  dst = dst.defined() ? add(std::move(dst), std::move(g)) : std::move(g);
}

// NOTE [ Gradients written in place ] (function.h): the leaf gradients the
// running node may write directly, per input; set around each apply().
thread_local const std::vector<Tensor>* tls_grad_buffers = nullptr;

// For each input of n: the leaf's zeroed .grad() when n is its only
// contribution this backward, else undefined.
void find_grad_buffers(Node* n, const PendingMap& pending, std::vector<Tensor>& out) {
  out.assign(n->next_edges().size(), Tensor());
  for (size_t i = 0; i < out.size(); ++i) {
    const Edge& e = n->next_edges()[i];
    auto* acc = dynamic_cast<AccumulateGrad*>(e.fn.get());
    if (acc == nullptr || acc->leaf() == nullptr) continue;
    const AutogradMeta* meta = acc->leaf()->autograd.get();
    if (meta == nullptr || !meta->grad.defined() || !read_grad_zero_pending(*acc->leaf())) continue;
    auto it = pending.find(acc);
    if (it == pending.end() || it->second.deps != 1) continue;   // another node adds to it too
    out[i] = meta->grad;
  }
}

void check_grad(Node* n, size_t i, const Tensor& g) {
  const InputMeta& m = n->input_meta()[i];
  ENCORE_CHECK_CODE(g.shape() == m.shape && g.dtype() == m.dtype, kInternal,
                    "backward of %s returned a gradient of shape %s (%s) for input %d of shape %s (%s)",
                    n->name(), shape_str(g.shape()), dtype_name(g.dtype()), i, shape_str(m.shape),
                    dtype_name(m.dtype));
}

struct Later {
  bool operator()(Node* a, Node* b) const { return a->sequence_nr() < b->sequence_nr(); }
};

Tensor root_grad(const Tensor& root, const Tensor& given) {
  if (given.defined()) {
    ENCORE_CHECK(given.shape() == root.shape(), "backward: gradient shape %s does not match tensor shape %s",
                 shape_str(given.shape()), shape_str(root.shape()));
    // A backward formula takes its device from the gradient or from a saved
    // tensor: both must agree, or a kernel would read memory of the wrong kind.
    ENCORE_CHECK(given.device() == root.device(),
                 "backward: gradient on %s but the tensor %s is on %s; move it with .to(%s)", given.device().str(),
                 shape_str(root.shape()), root.device().str(), root.device().str());
    ENCORE_CHECK(is_floating(given.dtype()), "backward: gradient of dtype %s; it must be a float tensor",
                 dtype_name(given.dtype()));
    return given.dtype() == root.dtype() ? given : given.to(root.dtype());   // as the tensor's own gradient would be
  }
  ENCORE_CHECK(root.numel() == 1,
               "backward: a gradient must be given for a non-scalar tensor (shape %s, dtype %s)",
               shape_str(root.shape()), dtype_name(root.dtype()));
  return ones(root.shape(), root.dtype(), root.device());
}

}  // namespace

Tensor grad_buffer(size_t input, const Shape& shape, DType dtype, Device device) {
  if (tls_grad_buffers != nullptr && input < tls_grad_buffers->size()) {
    const Tensor& g = (*tls_grad_buffers)[input];
    if (g.defined() && g.is_contiguous() && g.shape() == shape && g.dtype() == dtype && g.device() == device) {
      return g;
    }
  }
  return empty(shape, dtype, device);
}

namespace {

// NOTE [ Backward observers ] (backward_observer.h).
struct Observers {
  std::mutex mu;
  std::vector<std::pair<int64_t, std::shared_ptr<const BackwardObserver>>> list;
  int64_t next_id = 0;
};
Observers& observers() {
  static Observers* o = new Observers();   // leaked: observers may be removed by static destructors
  return *o;
}
std::atomic<int64_t> observer_count{0};   // lets a backward without observers skip the lock
thread_local int backward_depth = 0;      // backward() calls running on this thread

using ObserverList = std::vector<std::shared_ptr<const BackwardObserver>>;

// Calls every observer; then rethrows the first exception one threw.
void notify(const ObserverList& list, BackwardEvent event) {
  std::exception_ptr first;
  for (const auto& o : list) {
    try {
      (*o)(event);
    } catch (...) {
      if (!first) first = std::current_exception();
    }
  }
  if (first) std::rethrow_exception(first);
}

void run_backward(const std::vector<Tensor>& roots, const std::vector<Tensor>& grads, bool retain_graph);

}  // namespace

int64_t add_backward_observer(BackwardObserver observer) {
  Observers& o = observers();
  std::lock_guard<std::mutex> lk(o.mu);
  o.list.emplace_back(o.next_id, std::make_shared<const BackwardObserver>(std::move(observer)));
  observer_count.store(static_cast<int64_t>(o.list.size()));
  return o.next_id++;
}

void remove_backward_observer(int64_t id) {
  Observers& o = observers();
  std::lock_guard<std::mutex> lk(o.mu);
  std::erase_if(o.list, [id](const auto& entry) { return entry.first == id; });
  observer_count.store(static_cast<int64_t>(o.list.size()));
}

void backward(const std::vector<Tensor>& roots, const std::vector<Tensor>& grads, bool retain_graph) {
  struct Depth {
    Depth() { ++backward_depth; }
    ~Depth() { --backward_depth; }
  } depth;
  if (backward_depth > 1 || observer_count.load() == 0) return run_backward(roots, grads, retain_graph);
  ObserverList list;
  {
    Observers& o = observers();
    std::lock_guard<std::mutex> lk(o.mu);
    for (const auto& entry : o.list) list.push_back(entry.second);
  }
  try {
    notify(list, BackwardEvent::kBegin);
    run_backward(roots, grads, retain_graph);
  } catch (...) {
    try {
      notify(list, BackwardEvent::kAbort);
    } catch (...) {   // the backward's own error goes on
    }
    throw;
  }
  notify(list, BackwardEvent::kEnd);
}

namespace {

void run_backward(const std::vector<Tensor>& roots, const std::vector<Tensor>& grads, bool retain_graph) {
  PhaseScope phase(Phase::kBackward);   // kernels below are tagged "backward" for profilers (src/core/phase.h)
  NoGradGuard no_grad;
  PendingMap pending;
  std::vector<Node*> root_nodes;
  std::vector<std::pair<Edge, Tensor>> seeds;
  ENCORE_CHECK(grads.empty() || grads.size() == roots.size(),
               "backward: got %d gradients for %d roots; pass one per root (undefined for a scalar root) or none",
               grads.size(), roots.size());
  for (size_t i = 0; i < roots.size(); ++i) {
    const Tensor& r = roots[i];
    ENCORE_CHECK(r.defined() && r.requires_grad(),
                 "backward: tensor %s does not require grad and has no grad_fn",
                 r.defined() ? shape_str(r.shape()) : std::string("(undefined)"));
    Edge e = gradient_edge(r);
    seeds.emplace_back(e, root_grad(r, i < grads.size() ? grads[i] : Tensor()));
    root_nodes.push_back(e.fn.get());
  }
  count_dependencies(root_nodes, pending);
  for (auto& [e, g] : seeds) add_grad(pending[e.fn.get()], e.input_nr, e.fn->num_outputs(), std::move(g));

  std::vector<Tensor> buffers;   // NOTE [ Gradients written in place ]
  std::priority_queue<Node*, std::vector<Node*>, Later> ready;
  absl::flat_hash_set<Node*> queued;   // a node may be the root of several tensors
  for (Node* r : root_nodes) {
    if (pending[r].deps == 0 && queued.insert(r).second) ready.push(r);
  }
  while (!ready.empty()) {
    Node* n = ready.top();
    ready.pop();
    Pending& p = pending[n];
    Grads in = std::move(p.grads);
    in.resize(n->num_outputs());
    find_grad_buffers(n, pending, buffers);
    tls_grad_buffers = &buffers;
    Grads out;
    try {
      out = n->apply(std::move(in));
    } catch (...) {
      tls_grad_buffers = nullptr;
      throw;
    }
    tls_grad_buffers = nullptr;
    if (!retain_graph) n->release_saved();
    for (size_t i = 0; i < n->next_edges().size(); ++i) {
      Edge& e = n->next_edges()[i];
      if (!e.fn) continue;
      Pending& q = pending[e.fn.get()];
      if (i < out.size() && out[i].defined()) {
        check_grad(n, i, out[i]);
        add_grad(q, e.input_nr, e.fn->num_outputs(), std::move(out[i]));
      }
      if (--q.deps == 0) ready.push(e.fn.get());
    }
  }
}

}  // namespace
}  // namespace autograd

void Tensor::backward(const Tensor& gradient, bool retain_graph) const {
  autograd::backward({*this}, {gradient}, retain_graph);
}

}  // namespace encore
