// Tensor's autograd accessors.
#include "encore/autograd.h"
#include "src/autograd/node.h"
#include "src/core/step_observer.h"

namespace encore {

AutogradMeta::~AutogradMeta() {
  if (grad_accumulator) grad_accumulator->detach_leaf();
  if (grad.defined()) grad.impl()->is_leaf_grad = false;
}

Tensor& Tensor::requires_grad_(bool on) {
  checked_impl("requires_grad_()");
  // A non-leaf already requires grad: asking for it again is a no-op, as in PyTorch.
  if (!is_leaf() && on) return *this;
  ENCORE_CHECK(is_leaf(), "requires_grad_: only leaf tensors can change requires_grad (shape %s); "
               "use detach() first", shape_str(shape()));
  ENCORE_CHECK(!on || is_floating(dtype()),
               "requires_grad_: only float tensors can require grad (shape %s, dtype %s)",
               shape_str(shape()), dtype_name(dtype()));
  if (!impl_->autograd) impl_->autograd = std::make_unique<AutogradMeta>();
  if (impl_->autograd->requires_grad != on) {
    observe_leaf_state(*impl_);   // NOTE [ A leaf's gradient state ]: before it changes
    impl_->storage->bump_grad_flag_version();
  }
  impl_->autograd->requires_grad = on;
  return *this;
}

bool Tensor::is_leaf() const {
  const AutogradMeta* m = checked_impl("is_leaf()").autograd.get();
  return m == nullptr || m->grad_fn == nullptr;
}

Tensor Tensor::grad() const {
  AutogradMeta* m = checked_impl("grad()").autograd.get();
  if (m == nullptr) return Tensor();
  if (m->grad_fn == nullptr) observe_leaf_state(*impl_);   // NOTE [ A leaf's gradient state ]
  if (m->grad.defined() && read_grad_zero_pending(*impl_)) [[unlikely]] {   // NOTE [ Lazy zero_grad ]
    write_grad_zero_pending(*impl_, false);
    NoGradGuard no_grad;
    m->grad.zero_();
  }
  return m->grad;
}

void Tensor::set_grad(const Tensor& g) {
  checked_impl("set_grad()");
  ENCORE_CHECK(!g.defined() || (g.shape() == shape() && g.dtype() == dtype() && g.device() == device()),
               "set_grad: gradient %s (%s on %s) does not match tensor %s (%s on %s)",
               g.defined() ? shape_str(g.shape()) : "undefined", g.defined() ? dtype_name(g.dtype()) : "-",
               g.defined() ? g.device().str() : "-", shape_str(shape()), dtype_name(dtype()), device().str());
  // backward() adds into .grad() in place and clip_grad_norm scales it in
  // place: a broadcast view would fail there, far from this call. (An empty
  // gradient is never written, whatever its strides.)
  for (int64_t d = 0; g.defined() && g.numel() > 0 && d < g.dim(); ++d) {
    ENCORE_CHECK(g.strides()[d] != 0 || g.shape()[d] <= 1,
                 "set_grad: gradient %s (%s) is a broadcast (expanded) view, which backward cannot add into in "
                 "place; pass a contiguous tensor (e.g. .contiguous())",
                 shape_str(g.shape()), dtype_name(g.dtype()));
  }
  // NOTE [ One leaf per gradient ]: zero_grad is lazy and backward writes a
  // pending gradient by overwriting it (NOTE [ Lazy zero_grad ]), per leaf.
  // Were one tensor the .grad of two leaves, the second leaf's overwrite
  // would drop the first one's gradient, and reading the second's .grad()
  // would zero the first's: refused. (Disjoint views of one buffer, as DDP's
  // buckets, are fine.)
  const bool same = impl_->autograd && g.defined() && impl_->autograd->grad.impl() == g.impl();
  ENCORE_CHECK(!g.defined() || same || !g.impl()->is_leaf_grad,
               "set_grad: gradient %s (%s) is already the .grad() of another tensor; two tensors cannot share "
               "one gradient, since backward writes each leaf's gradient in place; pass a copy (.clone())",
               shape_str(g.shape()), dtype_name(g.dtype()));
  if (!impl_->autograd) impl_->autograd = std::make_unique<AutogradMeta>();
  if (impl_->autograd->grad_fn == nullptr) observe_leaf_state(*impl_);   // NOTE [ A leaf's gradient state ]
  Tensor& grad = impl_->autograd->grad;
  if (grad.defined()) grad.impl()->is_leaf_grad = false;
  grad = g;
  if (grad.defined()) grad.impl()->is_leaf_grad = true;
  write_grad_zero_pending(*impl_, false);
}

namespace autograd {
namespace {
// AutogradMeta::hooks_key's term for one hook id (splitmix64's finalizer).
uint64_t hook_hash(int64_t id) {
  uint64_t z = static_cast<uint64_t>(id) + 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}
}  // namespace

void zero_grad(const Tensor& t) {
  AutogradMeta* m = t.impl()->autograd.get();
  if (m != nullptr && m->grad_fn == nullptr) observe_leaf_state(*t.impl());   // NOTE [ A leaf's gradient state ]
  if (m != nullptr && m->grad.defined()) write_grad_zero_pending(*t.impl(), true);   // NOTE [ Lazy zero_grad ]
}

int64_t register_post_accumulate_hook(const Tensor& leaf, PostAccumulateHook hook) {
  ENCORE_CHECK(leaf.defined() && leaf.is_leaf() && leaf.requires_grad(),
               "register_post_accumulate_hook: the tensor must be a leaf that requires grad (shape %s)",
               leaf.defined() ? shape_str(leaf.shape()) : std::string("(undefined)"));
  ENCORE_CHECK(hook != nullptr, "register_post_accumulate_hook: the hook is empty (shape %s)",
               shape_str(leaf.shape()));
  Edge e = gradient_edge(leaf);   // creates the leaf's AccumulateGrad, which the leaf owns
  observe_leaf_state(*leaf.impl());   // NOTE [ A leaf's gradient state ]: before it changes
  const int64_t id = static_cast<AccumulateGrad*>(e.fn.get())->add_hook(std::move(hook));
  leaf.impl()->autograd->hooks_key += hook_hash(id);
  return id;
}

void remove_post_accumulate_hook(const Tensor& leaf, int64_t id) {
  AutogradMeta* m = leaf.defined() ? leaf.impl()->autograd.get() : nullptr;
  if (m == nullptr || !m->grad_accumulator) return;
  observe_leaf_state(*leaf.impl());   // NOTE [ A leaf's gradient state ]: before it changes
  if (m->grad_accumulator->remove_hook(id)) m->hooks_key -= hook_hash(id);
}
}  // namespace autograd

std::shared_ptr<autograd::Node> Tensor::grad_fn() const {
  const AutogradMeta* m = checked_impl("grad_fn()").autograd.get();
  return m != nullptr ? m->grad_fn : nullptr;
}

Tensor Tensor::detach() const {
  checked_impl("detach()");
  auto impl = make_ref<TensorImpl>();
  impl->storage = impl_->storage;
  impl->offset = impl_->offset;
  impl->shape = impl_->shape;
  impl->strides = impl_->strides;
  impl->dtype = impl_->dtype;
  impl->contiguous = impl_->contiguous;
  return Tensor(std::move(impl));
}

}  // namespace encore
