#include "src/autograd/node.h"

#include <algorithm>
#include <memory>
#include <vector>

#include "encore/autograd.h"
#include "encore/ops.h"
#include "src/autograd/function.h"
#include "src/core/step_observer.h"

namespace encore::autograd {
namespace {
thread_local uint64_t next_sequence_nr = 0;
}  // namespace

Node::Node(const char* name, int num_outputs)
    : name_(name), num_outputs_(num_outputs), sequence_nr_(next_sequence_nr++) {}

// NOTE [ Destroying deep graphs ]: a node owns its next nodes through
// next_edges(), so dropping the last tensor of a chain of a million ops
// would destroy a million nodes one inside the other and overflow the
// stack. Instead, the first node destroyed takes every next node it holds
// the last reference to, and their next nodes in turn, into a local list,
// and releases each with its edges already emptied: the depth of the
// destructor calls stays one, whatever the depth of the graph (as PyTorch's
// deleteNode). A next node someone else still holds is left alone.
Node::~Node() {
  std::vector<std::shared_ptr<Node>> dying;
  auto take_sole_owned = [&dying](absl::InlinedVector<Edge, 2>& edges) {
    for (Edge& e : edges) {
      if (e.fn && e.fn.use_count() == 1) dying.push_back(std::move(e.fn));
    }
    edges.clear();
  };
  take_sole_owned(next_edges_);
  while (!dying.empty()) {
    std::shared_ptr<Node> n = std::move(dying.back());
    dying.pop_back();
    take_sole_owned(n->next_edges_);
  }   // n is destroyed here, with no edges left to recurse into
}

void throw_freed_graph(const char* name) {
  throw_error(absl::StatusCode::kFailedPrecondition,
              absl::StrFormat("backward: trying to run %s's backward a second time, but its saved "
                              "tensors were freed after the first backward; pass "
                              "retain_graph=true to the first backward() to keep them",
                              name));
}

AccumulateGrad::AccumulateGrad(TensorImpl* leaf) : Node("AccumulateGrad", 1), leaf_(leaf) { run_first(); }

Grads AccumulateGrad::apply(Grads&& grads) {
  Tensor& g = grads[0];
  if (!g.defined() || leaf_ == nullptr) return {};
  observe_leaf_state(*leaf_, /*accumulates=*/true);   // NOTE [ A leaf's gradient state ]: its gradient and hooks
  Tensor leaf{Ref<TensorImpl>(leaf_)};
  AutogradMeta* meta = leaf_->autograd.get();
  Tensor current = meta != nullptr ? meta->grad : Tensor();
  if (current.defined() && read_grad_zero_pending(*leaf_)) {
    write_grad_zero_pending(*leaf_, false);   // NOTE [ Lazy zero_grad ]: overwrite instead of 0 + g
    const bool written_in_place = g.storage() == current.storage() &&
                                  g.storage_offset() == current.storage_offset();   // NOTE [ Gradients written in place ]
    if (written_in_place) {
      current.storage()->bump_version();   // NOTE [ Version counter ]: the formula's kernel wrote it
    } else {
      current.copy_(g);
    }
  } else if (current.defined()) {
    current.add_(g);   // in place: a persistent .grad() keeps its storage across steps
  } else if (g.impl()->use_count() == 1 && g.storage()->use_count() == 1 && g.is_contiguous()) {
    leaf.set_grad(g);  // nobody else sees g: adopt it without a copy
  } else {
    leaf.set_grad(g.clone());
  }
  if (!hooks_.empty()) run_hooks(leaf);
  return {};
}

// A hook may remove itself or another hook, or add one, while it runs: the
// loop walks a snapshot, whose shared_ptrs keep each running function (and
// its captures) alive, and skips a hook removed by an earlier one. A hook
// added now first runs at the next accumulation.
void AccumulateGrad::run_hooks(const Tensor& leaf) {
  const std::vector<std::pair<int64_t, std::shared_ptr<Hook>>> snapshot = hooks_;
  for (const auto& [id, hook] : snapshot) {
    const bool registered =
        std::any_of(hooks_.begin(), hooks_.end(), [id = id](const auto& entry) { return entry.first == id; });
    if (registered) (*hook)(leaf);
  }
}

int64_t AccumulateGrad::add_hook(Hook hook) {
  hooks_.emplace_back(next_hook_, std::make_shared<Hook>(std::move(hook)));
  return next_hook_++;
}

bool AccumulateGrad::remove_hook(int64_t id) {
  for (size_t i = 0; i < hooks_.size(); ++i) {
    if (hooks_[i].first == id) {
      hooks_.erase(hooks_.begin() + static_cast<std::ptrdiff_t>(i));
      return true;
    }
  }
  return false;
}

Edge gradient_edge(const Tensor& t) {
  AutogradMeta* meta = t.impl()->autograd.get();
  if (meta == nullptr) return {};
  if (meta->grad_fn) return {meta->grad_fn, meta->output_nr};
  if (!meta->requires_grad) return {};
  if (!meta->grad_accumulator) meta->grad_accumulator = std::make_shared<AccumulateGrad>(t.impl());
  return {meta->grad_accumulator, 0};
}

SavedTensor::SavedTensor(const Tensor& t, const char* op) : op_(op) {
  if (!t.defined()) return;
  tensor_ = t.detach();
  version_ = t.version();
}

const Tensor& SavedTensor::get() const {
  if (tensor_.defined() && tensor_.version() != version_) {
    throw_error(absl::StatusCode::kFailedPrecondition,
                absl::StrFormat("backward of %s: a tensor it saved (shape %s, dtype %s) was modified "
                                "in place after it was saved (version %d, saved at %d); clone it "
                                "before the in-place op",
                                op_, shape_str(tensor_.shape()), dtype_name(tensor_.dtype()),
                                tensor_.version(), version_));
  }
  return tensor_;
}

namespace {

void connect_inputs(Node& node, std::initializer_list<Tensor> inputs) {
  for (const Tensor& in : inputs) {
    node.next_edges().push_back(in.defined() ? gradient_edge(in) : Edge{});
    node.input_meta().push_back(in.defined() ? InputMeta{in.shape(), in.dtype()} : InputMeta{{}, kFloat32});
  }
}

void connect_output(const std::shared_ptr<Node>& node, Tensor& out, int32_t nr) {
  auto& meta = out.impl()->autograd;
  if (!meta) meta = std::make_unique<AutogradMeta>();
  meta->requires_grad = true;
  meta->grad_fn = node;
  meta->output_nr = nr;
}

}  // namespace

void connect(const std::shared_ptr<Node>& node, std::initializer_list<Tensor> inputs,
             std::initializer_list<Tensor*> outputs) {
  connect_inputs(*node, inputs);
  int32_t nr = 0;
  for (Tensor* out : outputs) connect_output(node, *out, nr++);
}

void connect(const std::shared_ptr<Node>& node, std::initializer_list<Tensor> inputs, absl::Span<Tensor> outputs) {
  connect_inputs(*node, inputs);
  for (size_t i = 0; i < outputs.size(); ++i) connect_output(node, outputs[i], static_cast<int32_t>(i));
}

}  // namespace encore::autograd
