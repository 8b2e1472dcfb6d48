// Helpers for writing an op's backward beside its forward.
//
//   Tensor mul(const Tensor& a, const Tensor& b) {
//     Tensor out = ...forward...;
//     if (autograd::any_requires_grad(a, b)) {
//       autograd::record("mul", {a, b}, out,
//           [sa = autograd::SavedTensor(a, "mul"), sb = autograd::SavedTensor(b, "mul")]
//           (const Tensor& g) -> autograd::Grads {
//             return {sum_to(g * sb.get(), sa.shape()), sum_to(g * sa.get(), sb.shape())};
//           });
//     }
//     return out;
//   }
//
// A formula gets the output gradient(s) and returns one gradient per input,
// in input order; it may return an undefined Tensor for an input that needs
// none. Formulas run under NoGradGuard.
#pragma once

#include <initializer_list>
#include <memory>
#include <utility>

#include "encore/autograd.h"
#include "src/autograd/node.h"

namespace encore::autograd {

// True when grad mode is on and any argument requires grad.
template <typename... Ts>
bool any_requires_grad(const Ts&... ts) {
  return GradMode::is_enabled() && (... || (ts.defined() && ts.requires_grad()));
}

// A tensor saved for backward: a detached alias (no reference cycle through
// grad_fn) plus the version it had, checked when the backward reads it.
class SavedTensor {
 public:
  SavedTensor() = default;
  SavedTensor(const Tensor& t, const char* op);
  const Tensor& get() const;        // throws if modified in place since saving
  const Shape& shape() const { return tensor_.shape(); }
  bool defined() const { return tensor_.defined(); }

 private:
  Tensor tensor_;
  uint32_t version_ = 0;
  const char* op_ = "";
};

// NOTE [ Gradients written in place ]: a buffer for the gradient of input
// `input` of the node whose backward is running. When that input is a leaf
// whose .grad() was zeroed by zero_grad() (NOTE [ Lazy zero_grad ]), is this
// node's only contribution and has this shape, dtype and device, the buffer
// IS that .grad(): the formula's kernel writes the gradient straight into it
// and the leaf's accumulator has nothing left to do (no temporary, no copy).
// Otherwise a fresh empty() tensor. Only for formulas that overwrite every
// element of the buffer (e.g. a GEMM with beta 0).
Tensor grad_buffer(size_t input, const Shape& shape, DType dtype, Device device);

// Wires `node` between `inputs` and `outputs`.
void connect(const std::shared_ptr<Node>& node, std::initializer_list<Tensor> inputs,
             std::initializer_list<Tensor*> outputs);
void connect(const std::shared_ptr<Node>& node, std::initializer_list<Tensor> inputs, absl::Span<Tensor> outputs);

// One output: fn(const Tensor& grad) -> Grads, or
//             fn(Tensor&& grad) -> Grads, which owns the gradient and may
//             write its result into that buffer when nothing else holds it
//             (ops::output_into, NOTE [ Writing into a dying temporary ]), or
//             fn(const Tensor& grad, absl::Span<const InputMeta> inputs) -> Grads
//             when the formula needs the inputs' shapes (saves copying them).
// Several:    fn(const Grads& grads) -> Grads.
template <typename F>
void record(const char* name, std::initializer_list<Tensor> inputs, Tensor& output, F fn) {
  connect(std::make_shared<FunctionNode<F>>(name, 1, std::move(fn)), inputs, {&output});
}
template <typename F>
void record_multi(const char* name, std::initializer_list<Tensor> inputs,
                  std::initializer_list<Tensor*> outputs, F fn) {
  connect(std::make_shared<FunctionNode<F>>(name, static_cast<int>(outputs.size()), std::move(fn)),
          inputs, outputs);
}
// Several, as many as the forward made (split's pieces): fn(const Grads& grads) -> Grads.
template <typename F>
void record_outputs(const char* name, std::initializer_list<Tensor> inputs, absl::Span<Tensor> outputs, F fn) {
  connect(std::make_shared<FunctionNode<F>>(name, static_cast<int>(outputs.size()), std::move(fn)), inputs,
          outputs);
}

}  // namespace encore::autograd
