// Views: new geometry over the same storage, each with its backward.
#include <algorithm>
#include <numeric>

#include "encore/ops.h"
#include "src/autograd/function.h"
#include "src/ops/op_utils.h"

namespace encore {

using autograd::Grads;

namespace {

// Replaces one -1 in shape by what makes numel match; checks the product.
Shape infer_shape(const char* op, const Tensor& t, Shape shape) {
  int infer = -1;
  Shape known_dims;
  for (size_t d = 0; d < shape.size(); ++d) {
    if (shape[d] == -1) {
      ENCORE_CHECK(infer < 0, "%s: only one dim may be -1 in %s (input %s)", op, shape_str(shape),
                   shape_str(t.shape()));
      infer = static_cast<int>(d);
    } else {
      ENCORE_CHECK(shape[d] >= 0, "%s: invalid size in %s (input %s)", op, shape_str(shape), shape_str(t.shape()));
      known_dims.push_back(shape[d]);
    }
  }
  const int64_t known = checked_numel(op, known_dims);   // NOTE [ Shapes whose nonzero dims fit ]
  if (infer >= 0) {
    ENCORE_CHECK(known != 0 && t.numel() % known == 0, "%s: shape %s is invalid for input %s (%d elements)", op,
                 shape_str(shape), shape_str(t.shape()), t.numel());
    shape[infer] = t.numel() / known;
  }
  ENCORE_CHECK(numel_of(shape) == t.numel(), "%s: shape %s is invalid for input %s (%d elements)", op,
               shape_str(shape), shape_str(t.shape()), t.numel());
  return shape;
}

// Strides that view (old shape, old strides) as new_shape without copying;
// false when the memory layout does not allow it. Walks chunks of old dims
// that are contiguous with each other and matches them to runs of new dims.
bool view_strides(const char* op, const Shape& old_shape, const Shape& old_strides, const Shape& new_shape, Shape* out) {
  out->assign(new_shape.size(), 1);
  if (numel_of(old_shape) == 0 || old_shape.empty()) {
    *out = contiguous_strides(op, new_shape);
    return true;
  }
  int64_t view_d = static_cast<int64_t>(new_shape.size()) - 1;
  int64_t chunk_stride = old_strides.back();
  int64_t tensor_numel = 1, view_numel = 1;
  for (int64_t d = static_cast<int64_t>(old_shape.size()) - 1; d >= 0; --d) {
    tensor_numel *= old_shape[d];
    const bool chunk_ends = d == 0 || (old_shape[d - 1] != 1 && old_strides[d - 1] != tensor_numel * chunk_stride);
    if (!chunk_ends) continue;
    while (view_d >= 0 && (view_numel < tensor_numel || new_shape[view_d] == 1)) {
      (*out)[view_d] = view_numel * chunk_stride;
      view_numel *= new_shape[view_d];
      --view_d;
    }
    if (view_numel != tensor_numel) return false;
    if (d > 0) {
      chunk_stride = old_strides[d - 1];
      tensor_numel = 1;
      view_numel = 1;
    }
  }
  return view_d == -1;
}

// Makes `out` a differentiable view: its gradient is reshaped back to `in`'s shape.
Tensor reshape_grad_view(const char* op, const Tensor& in, Tensor out) {
  if (autograd::any_requires_grad(in)) {
    autograd::record(op, {in}, out, [shape = in.shape()](const Tensor& g) -> Grads { return {g.reshape(shape)}; });
  }
  return out;
}

}  // namespace

Tensor Tensor::view(Shape shape) const {
  ops::check_defined("view", *this, "input");
  shape = infer_shape("view", *this, std::move(shape));
  Shape strides;
  ENCORE_CHECK(view_strides("view", this->shape(), this->strides(), shape, &strides),
               "view: a tensor of shape %s with strides %s cannot be viewed as %s; use reshape() (copies)",
               shape_str(this->shape()), shape_str(this->strides()), shape_str(shape));
  return reshape_grad_view("view", *this, make_view("view", *this, std::move(shape), std::move(strides), storage_offset()));
}

Tensor Tensor::reshape(Shape shape) const {
  ops::check_defined("reshape", *this, "input");
  shape = infer_shape("reshape", *this, std::move(shape));
  Shape strides;
  if (view_strides("reshape", this->shape(), this->strides(), shape, &strides)) {
    return reshape_grad_view("reshape", *this,
                             make_view("reshape", *this, std::move(shape), std::move(strides), storage_offset()));
  }
  return contiguous().view(std::move(shape));
}

Tensor Tensor::transpose(int64_t d0, int64_t d1) const {
  ops::check_defined("transpose", *this, "input");
  d0 = ops::normalize_dim("transpose", d0, dim());
  d1 = ops::normalize_dim("transpose", d1, dim());
  Shape shape = this->shape(), strides = this->strides();
  if (dim() > 0) {
    std::swap(shape[d0], shape[d1]);
    std::swap(strides[d0], strides[d1]);
  }
  Tensor out = make_view("transpose", *this, std::move(shape), std::move(strides), storage_offset());
  if (autograd::any_requires_grad(*this)) {
    autograd::record("transpose", {*this}, out, [d0, d1](const Tensor& g) -> Grads { return {g.transpose(d0, d1)}; });
  }
  return out;
}

// torch.t: a matrix transposed; a 0-D or 1-D tensor comes back as is (a view).
// More dims are refused rather than swapping the first two silently.
Tensor Tensor::t() const {
  ops::check_defined("t", *this, "input");
  ENCORE_CHECK(dim() <= 2, "t: expects a tensor with at most 2 dims, got shape %s; use transpose(d0, d1)",
               shape_str(shape()));
  return dim() < 2 ? transpose(0, 0) : transpose(0, 1);
}

Tensor Tensor::permute(Shape dims) const {
  ops::check_defined("permute", *this, "input");
  ENCORE_CHECK(static_cast<int64_t>(dims.size()) == dim(), "permute: %d dims given for a tensor of shape %s",
               dims.size(), shape_str(shape()));
  Shape shape(dims.size()), strides(dims.size()), inverse(dims.size(), -1);
  for (size_t i = 0; i < dims.size(); ++i) {
    const int64_t d = ops::normalize_dim("permute", dims[i], dim());
    ENCORE_CHECK(inverse[d] < 0, "permute: dim %d repeats in %s", d, shape_str(dims));
    inverse[d] = static_cast<int64_t>(i);
    shape[i] = this->shape()[d];
    strides[i] = this->strides()[d];
  }
  Tensor out = make_view("permute", *this, std::move(shape), std::move(strides), storage_offset());
  if (autograd::any_requires_grad(*this)) {
    autograd::record("permute", {*this}, out, [inverse](const Tensor& g) -> Grads { return {g.permute(inverse)}; });
  }
  return out;
}

Tensor Tensor::slice(int64_t d, int64_t start, int64_t end, int64_t step) const {
  ops::check_defined("slice", *this, "input");
  ENCORE_CHECK(dim() > 0, "slice: cannot slice a 0-d tensor");
  d = ops::normalize_dim("slice", d, dim());
  ENCORE_CHECK(step > 0, "slice: step must be positive, got %d (shape %s)", step, shape_str(shape()));
  const int64_t n = shape()[d];
  if (start < 0) start += n;
  if (end < 0) end += n;
  start = std::clamp<int64_t>(start, 0, n);
  end = std::clamp<int64_t>(end, start, n);
  Shape shape = this->shape(), strides = this->strides();
  shape[d] = end == start ? 0 : (end - start - 1) / step + 1;   // no overflow for huge steps
  // One element (or none) needs no step: a huge step keeps the stride, so
  // step * stride cannot overflow. Otherwise both products lie inside the
  // storage unless the view is empty; check_view_bounds has the last word.
  int64_t offset = 0;
  ENCORE_CHECK((shape[d] <= 1 || !__builtin_mul_overflow(strides[d], step, &strides[d])) &&
                   !__builtin_mul_overflow(start, this->strides()[d], &offset) &&
                   !__builtin_add_overflow(offset, storage_offset(), &offset),
               "slice: start %d, step %d of dim %d of shape %s with strides %s overflow int64 offsets", start, step,
               d, shape_str(this->shape()), shape_str(this->strides()));
  Tensor out = make_view("slice", *this, std::move(shape), std::move(strides), offset);
  if (autograd::any_requires_grad(*this)) {
    autograd::record("slice", {*this}, out,
                     [in_shape = this->shape(), dt = dtype(), d, start, end, step](const Tensor& g) -> Grads {
                       Tensor full = zeros(in_shape, dt, g.device());
                       full.slice(d, start, end, step).copy_(g);
                       return {full};
                     });
  }
  return out;
}

Tensor Tensor::select(int64_t d, int64_t index) const {
  ops::check_defined("select", *this, "input");
  ENCORE_CHECK(dim() > 0, "select: cannot select from a 0-d tensor");
  d = ops::normalize_dim("select", d, dim());
  const int64_t n = shape()[d];
  ENCORE_CHECK(index >= -n && index < n, "select: index %d out of range for dim %d of shape %s", index, d,
               shape_str(shape()));
  if (index < 0) index += n;
  Tensor s = slice(d, index, index + 1);
  return s.squeeze(d);
}

Tensor Tensor::expand(Shape target) const {
  ops::check_defined("expand", *this, "input");
  ENCORE_CHECK(target.size() >= shape().size(), "expand: cannot expand shape %s to %s, which has fewer dims",
               shape_str(shape()), shape_str(target));
  ENCORE_CHECK(static_cast<int64_t>(target.size()) <= kMaxDims, "expand: cannot expand shape %s to %s: more than %d dims",
               shape_str(shape()), shape_str(target), kMaxDims);
  const int64_t lead = static_cast<int64_t>(target.size()) - dim();
  Shape strides(target.size(), 0);
  for (int64_t i = 0; i < static_cast<int64_t>(target.size()); ++i) {
    const int64_t k = i - lead;
    if (k < 0) {
      ENCORE_CHECK(target[i] >= 0, "expand: cannot expand shape %s to %s", shape_str(shape()), shape_str(target));
      continue;
    }
    if (target[i] == -1) target[i] = shape()[k];
    ENCORE_CHECK(target[i] >= 0 && (shape()[k] == target[i] || shape()[k] == 1),
                 "expand: cannot expand shape %s to %s (dim %d)", shape_str(shape()), shape_str(target), i);
    strides[i] = shape()[k] == target[i] ? this->strides()[k] : 0;
  }
  (void)checked_numel("expand", target);   // a broadcast view still counts its elements in int64
  Tensor out = make_view("expand", *this, target, std::move(strides), storage_offset());
  if (autograd::any_requires_grad(*this)) {
    autograd::record("expand", {*this}, out, [shape = shape()](const Tensor& g) -> Grads { return {sum_to(g, shape)}; });
  }
  return out;
}

Tensor Tensor::squeeze(int64_t d) const {
  ops::check_defined("squeeze", *this, "input");
  d = ops::normalize_dim("squeeze", d, dim());
  if (dim() == 0 || shape()[d] != 1) return *this;
  Shape shape = this->shape(), strides = this->strides();
  shape.erase(shape.begin() + d);
  strides.erase(strides.begin() + d);
  return reshape_grad_view("squeeze", *this, make_view("squeeze", *this, std::move(shape), std::move(strides), storage_offset()));
}

Tensor Tensor::unsqueeze(int64_t d) const {
  ops::check_defined("unsqueeze", *this, "input");
  // The new dim may go anywhere in [0, dim()]: name the tensor's own rank.
  ENCORE_CHECK(d >= -(dim() + 1) && d <= dim(), "unsqueeze: dim %d out of range for a %d-d tensor (valid: [%d, %d])",
               d, dim(), -(dim() + 1), dim());
  d = ops::normalize_dim("unsqueeze", d, dim() + 1);
  Shape shape = this->shape(), strides = this->strides();
  // The new dim's stride never moves (its size is 1); it is the one a
  // contiguous tensor would have, or 0 where that product does not fit
  // (only an empty tensor's strides can be that large).
  int64_t stride = 1;
  if (d < dim() && __builtin_mul_overflow(this->strides()[d], this->shape()[d], &stride)) stride = 0;
  shape.insert(shape.begin() + d, 1);
  strides.insert(strides.begin() + d, stride);
  return reshape_grad_view("unsqueeze", *this,
                           make_view("unsqueeze", *this, std::move(shape), std::move(strides), storage_offset()));
}

}  // namespace encore
