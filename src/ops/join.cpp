// Joining and splitting: concat, stack, split, each backward beside its forward.
//
// concat allocates its output and copies each input into a slice of it with
// the ordinary strided copy kernel (backend::copy): no kernel of its own. split
// returns views made with Tensor::slice and records one node for all of them:
// its backward copies each piece's gradient into its slice of one buffer
// (zeros only where some piece has none). Each view carrying its own slice
// backward instead made a zero-filled input-sized gradient per piece and
// added them up: for a transformer block's qkv split, three fills, three
// copies and two adds of [512, 768] f32, 0.71 ms of a 23 ms step (issue 19).
#include <algorithm>
#include <memory>
#include <utility>
#include <vector>

#include "encore/ops.h"
#include "src/autograd/function.h"
#include "src/backends/kernels.h"
#include "src/ops/op_utils.h"

namespace encore {

using autograd::Grads;

namespace {

// Like autograd::record, for a runtime number of inputs (record takes an
// initializer_list). Wires `out` as the node's only output, then one edge per
// input in order, exactly as autograd::connect does.
template <typename F>
void record_inputs(const char* name, const std::vector<Tensor>& inputs, Tensor& out, F fn) {
  auto node = std::make_shared<autograd::FunctionNode<F>>(name, 1, std::move(fn));
  autograd::connect(node, {}, {&out});
  for (const Tensor& in : inputs) {
    node->next_edges().push_back(autograd::gradient_edge(in));
    node->input_meta().push_back(autograd::InputMeta{in.shape(), in.dtype()});
  }
}

bool any_input_requires_grad(const std::vector<Tensor>& tensors) {
  return std::any_of(tensors.begin(), tensors.end(),
                     [](const Tensor& t) { return autograd::any_requires_grad(t); });
}

// Defined, same dtype and device as tensors[0], same rank, and same sizes as
// tensors[0] in every dim but `skip_dim` (-1: every dim must match).
void check_joinable(const char* op, const std::vector<Tensor>& tensors, int64_t skip_dim) {
  ENCORE_CHECK(!tensors.empty(), "%s: needs at least one tensor", op);
  const Tensor& first = tensors[0];
  for (size_t i = 0; i < tensors.size(); ++i) {
    const Tensor& t = tensors[i];
    ENCORE_CHECK(t.defined(), "%s: tensor %d is undefined", op, i);
    ENCORE_CHECK(t.dtype() == first.dtype() && t.device() == first.device(),
                 "%s: tensor %d is %s %s on %s but tensor 0 is %s %s on %s; all must share dtype and device", op,
                 i, shape_str(t.shape()), dtype_name(t.dtype()), t.device().str(), shape_str(first.shape()),
                 dtype_name(first.dtype()), first.device().str());
    bool match = t.dim() == first.dim();
    for (int64_t d = 0; match && d < t.dim(); ++d) match = d == skip_dim || t.shape()[d] == first.shape()[d];
    if (skip_dim < 0) {
      ENCORE_CHECK(match, "%s: tensor %d has shape %s but tensor 0 has shape %s (%s); all shapes must be equal",
                   op, i, shape_str(t.shape()), shape_str(first.shape()), dtype_name(first.dtype()));
    } else {
      ENCORE_CHECK(match,
                   "%s: tensor %d has shape %s but tensor 0 has shape %s (%s); shapes must match except in dim %d",
                   op, i, shape_str(t.shape()), shape_str(first.shape()), dtype_name(first.dtype()), skip_dim);
    }
  }
}

// The forward of concat without autograd: out = [t0 | t1 | ...] along dim.
Tensor concat_values(const std::vector<Tensor>& tensors, int64_t dim) {
  Shape shape = tensors[0].shape();
  shape[dim] = 0;
  for (const Tensor& t : tensors) {
    ENCORE_CHECK(!__builtin_add_overflow(shape[dim], t.shape()[dim], &shape[dim]),
                 "concat: %d tensors of shape %s in dim %d: the sizes add up past int64", tensors.size(),
                 shape_str(tensors[0].shape()), dim);
  }
  Tensor out = empty_for("concat", std::move(shape), tensors[0].dtype(), tensors[0].device());
  int64_t offset = 0;
  for (const Tensor& t : tensors) {
    const int64_t n = t.shape()[dim];
    // out is fresh and requires no grad, so its slice is a plain view.
    if (n > 0) backend::copy(out.slice(dim, offset, offset + n), t);
    offset += n;
  }
  return out;
}

}  // namespace

Tensor concat(const std::vector<Tensor>& tensors, int64_t dim) {
  ENCORE_CHECK(!tensors.empty(), "concat: needs at least one tensor");
  ops::check_defined("concat", tensors[0], "tensor 0");
  ENCORE_CHECK(tensors[0].dim() > 0, "concat: cannot concatenate 0-d tensors (tensor 0 has shape %s, %s)",
               shape_str(tensors[0].shape()), dtype_name(tensors[0].dtype()));
  dim = ops::normalize_dim("concat", dim, tensors[0].dim());
  check_joinable("concat", tensors, dim);
  Tensor out = concat_values(tensors, dim);
  if (any_input_requires_grad(tensors)) {
    // The gradient of input i is the slice of g it was copied into; the
    // sizes come from the node's input shapes.
    std::vector<bool> needs;
    for (const Tensor& t : tensors) needs.push_back(t.requires_grad());
    record_inputs("concat", tensors, out,
                  [dim, needs](const Tensor& g, absl::Span<const autograd::InputMeta> inputs) -> Grads {
                    Grads grads(inputs.size());
                    int64_t offset = 0;
                    for (size_t i = 0; i < inputs.size(); ++i) {
                      const int64_t n = inputs[i].shape[dim];
                      if (needs[i]) grads[i] = g.slice(dim, offset, offset + n);
                      offset += n;
                    }
                    return grads;
                  });
  }
  return out;
}

Tensor stack(const std::vector<Tensor>& tensors, int64_t dim) {
  check_joinable("stack", tensors, -1);
  dim = ops::normalize_dim("stack", dim, tensors[0].dim() + 1);
  Tensor out;
  {
    NoGradGuard no_grad;   // stack records one node of its own below
    std::vector<Tensor> pieces;
    pieces.reserve(tensors.size());
    for (const Tensor& t : tensors) pieces.push_back(t.unsqueeze(dim));
    out = concat_values(pieces, dim);
  }
  if (any_input_requires_grad(tensors)) {
    std::vector<bool> needs;
    for (const Tensor& t : tensors) needs.push_back(t.requires_grad());
    record_inputs("stack", tensors, out, [dim, needs](const Tensor& g) -> Grads {
      Grads grads(needs.size());
      for (size_t i = 0; i < needs.size(); ++i) {
        if (needs[i]) grads[i] = g.select(dim, static_cast<int64_t>(i));
      }
      return grads;
    });
  }
  return out;
}

std::vector<Tensor> split(const Tensor& a, int64_t size, int64_t dim) {
  ops::check_defined("split", a, "input");
  ENCORE_CHECK(a.dim() > 0, "split: cannot split a 0-d tensor (%s)", dtype_name(a.dtype()));
  dim = ops::normalize_dim("split", dim, a.dim());
  ENCORE_CHECK(size > 0, "split: size must be positive, got %d (shape %s, dim %d)", size, shape_str(a.shape()),
               dim);
  const int64_t n = a.shape()[dim];
  // An empty dim still gives one (empty) piece, so concat(split(a)) is a again.
  if (n == 0) return {a.slice(dim, 0, 0)};
  // No start + size or n + size - 1: both overflow for a huge size (found
  // by fuzz/ops_fuzz: split(a, INT64_MAX)).
  // A wide view (a broadcast dim of 2^62, say) split finely would make more
  // handles than memory holds (found by fuzz/ops_fuzz: vector::reserve threw).
  const int64_t count = n / size + (n % size != 0);
  constexpr int64_t kMaxPieces = int64_t{1} << 24;
  ENCORE_CHECK_CODE(count <= kMaxPieces, kResourceExhausted,
                    "split: %d pieces of size %d along dim %d of shape %s; at most %d pieces", count, size, dim,
                    shape_str(a.shape()), kMaxPieces);
  const bool grad = autograd::any_requires_grad(a);
  std::vector<Tensor> pieces;
  pieces.reserve(count);
  {
    NoGradGuard no_grad;   // one node for all the pieces, below
    for (int64_t start = 0; start < n;) {
      const int64_t end = size < n - start ? start + size : n;
      pieces.push_back(a.slice(dim, start, end));
      start = end;
    }
  }
  if (grad) {
    autograd::record_outputs(
        "split", {a}, absl::MakeSpan(pieces),
        [dim, size, shape = a.shape(), dtype = a.dtype(), device = a.device()](const Grads& grads) -> Grads {
          const bool all = std::all_of(grads.begin(), grads.end(), [](const Tensor& g) { return g.defined(); });
          const Tensor full = all ? autograd::grad_buffer(0, shape, dtype, device) : zeros(shape, dtype, device);
          for (size_t i = 0; i < grads.size(); ++i) {
            const int64_t start = static_cast<int64_t>(i) * size;
            const int64_t end = std::min(start + size, shape[dim]);
            if (grads[i].defined()) backend::copy(full.slice(dim, start, end), grads[i]);
          }
          return {full};
        });
  }
  return pieces;
}

}  // namespace encore
