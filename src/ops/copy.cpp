// Copies, conversions, in-place writes and host access of Tensor.
#include <cmath>
#include <limits>
#include <ostream>
#include <type_traits>
#include <utility>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "encore/ops.h"
#include "src/autograd/function.h"
#include "src/backends/kernels.h"
#include "src/core/stream.h"
#include "src/ops/op_utils.h"

namespace encore {

using autograd::Grads;

namespace {

// The bytes [first, last] a view can touch (numel > 0).
std::pair<const char*, const char*> byte_range(const Tensor& t) {
  const char* p = static_cast<const char*>(t.data_ptr());
  int64_t lo = 0, hi = 0;   // in elements from the first element
  for (int64_t d = 0; d < t.dim(); ++d) {
    const int64_t step = (t.shape()[d] - 1) * t.strides()[d];
    (step < 0 ? lo : hi) += step;
  }
  const int64_t esize = dtype_size(t.dtype());
  return {p + lo * esize, p + hi * esize + esize - 1};
}

// NOTE [ Overlapping in-place writes ]: an in-place op whose source shares
// memory with its output without being exactly the same view is refused, as
// PyTorch does (NumPy copies the source first): an element of the output
// may be written before it is read as another element of the source, so the
// result would depend on the kernel's order (a[1:] += a[:-1] gave
// [0, 1, 3, 6]), and a copy between overlapping views was an overlapping
// memcpy. Overlap is judged on byte ranges, so interleaved views (a[::2]
// and a[1::2]) are refused too. The same view (x.add_(x)) is elementwise
// and allowed.
void check_no_partial_overlap(const char* op, const Tensor& self, const Tensor& src) {
  if (self.storage() != src.storage() || self.numel() == 0 || src.numel() == 0) return;
  if (self.data_ptr() == src.data_ptr() && self.shape() == src.shape() && self.strides() == src.strides()) return;
  const auto [a0, a1] = byte_range(self);
  const auto [b0, b1] = byte_range(src);
  ENCORE_CHECK(a1 < b0 || b1 < a0,
               "%s: the source (shape %s, strides %s) overlaps the output (shape %s, strides %s) in memory without "
               "being the same view; the result would depend on the order of the writes: clone() the source first",
               op, shape_str(src.shape()), shape_str(src.strides()), shape_str(self.shape()),
               shape_str(self.strides()));
}

// Checks an in-place write: allowed by autograd, not into a broadcast view.
// The caller bumps the version once the write happened (a refused write
// leaves it unchanged).
void check_inplace_write(const char* op, const Tensor& self, const Tensor* src) {
  ops::check_defined(op, self, "self");
  ops::check_inplace(op, self);
  for (int64_t d = 0; d < self.dim(); ++d) {
    ENCORE_CHECK(self.strides()[d] != 0 || self.shape()[d] <= 1,
                 "%s: cannot write in place into a broadcast (expanded) view of shape %s; clone() it first",
                 op, shape_str(self.shape()));
  }
  if (src != nullptr) {
    ops::check_defined(op, *src, "source");
    ENCORE_CHECK(!(GradMode::is_enabled() && src->requires_grad()),
                 "%s: the source (shape %s) requires grad but an in-place write does not carry gradients; "
                 "detach() it, or use an out-of-place op",
                 op, shape_str(src->shape()));
    const Shape b = ops::broadcast_shapes(op, self.shape(), src->shape());
    ENCORE_CHECK(b == self.shape(), "%s: source of shape %s (%s) cannot be broadcast to %s (%s)", op,
                 shape_str(src->shape()), dtype_name(src->dtype()), shape_str(self.shape()),
                 dtype_name(self.dtype()));
    check_no_partial_overlap(op, self, *src);
  }
}

}  // namespace

Tensor& Tensor::copy_(const Tensor& src) {
  check_inplace_write("copy_", *this, &src);
  // Across devices: move the source over first (dense, its dtype), then the
  // strided copy with dtype conversion runs on this tensor's device.
  const Tensor from = src.device() == device() ? src : src.detach().to(device());
  backend::copy(*this, from);
  storage()->bump_version();
  return *this;
}

Tensor& Tensor::fill_(double value) {
  check_inplace_write("fill_", *this, nullptr);
  ops::check_scalar_fits("fill_", value, dtype(), shape(), /*truncates=*/true);
  ops::check_float_fits("fill_", value, dtype(), shape());
  backend::fill(*this, value);
  storage()->bump_version();
  return *this;
}

Tensor& Tensor::add_(const Tensor& other, double alpha) {
  check_inplace_write("add_", *this, &other);
  ops::check_same("add_", *this, other);
  ops::check_arithmetic("add_", *this);
  ops::check_scalar_fits("add_", alpha, dtype(), shape());
  backend::binary(backend::BinaryOp::kAdd, *this, *this, other, alpha);
  storage()->bump_version();
  return *this;
}

Tensor& Tensor::mul_(double value) {
  check_inplace_write("mul_", *this, nullptr);
  ops::check_arithmetic("mul_", *this);
  ops::check_scalar_fits("mul_", value, dtype(), shape());
  backend::binary_scalar(backend::ScalarOp::kMul, *this, *this, value);
  storage()->bump_version();
  return *this;
}

Tensor Tensor::clone() const {
  ops::check_defined("clone", *this, "input");
  Tensor out = empty(shape(), dtype(), device());
  backend::copy(out, *this);
  if (autograd::any_requires_grad(*this)) {
    autograd::record("clone", {*this}, out, [](const Tensor& g) -> Grads { return {g}; });
  }
  return out;
}

Tensor Tensor::contiguous() const { return is_contiguous() ? *this : clone(); }

Tensor Tensor::to(DType target) const {
  ops::check_defined("to", *this, "input");
  if (target == dtype()) return *this;
  ENCORE_CHECK(!(requires_grad() && GradMode::is_enabled() && !is_floating(target)),
               "to: converting %s %s that requires grad to %s would drop its gradient", shape_str(shape()),
               dtype_name(dtype()), dtype_name(target));
  Tensor out = empty(shape(), target, device());
  backend::copy(out, *this);
  if (autograd::any_requires_grad(*this)) {
    autograd::record("to", {*this}, out, [from = dtype()](const Tensor& g) -> Grads { return {g.to(from)}; });
  }
  return out;
}

Tensor Tensor::to(Device target) const {
  ops::check_defined("to", *this, "input");
  if (target == device()) return *this;
  ENCORE_CHECK_CODE(device().is_cpu() || target.is_cpu(), kUnimplemented,
                    "to: no direct copy from %s to %s (tensor %s); go through the CPU", device().str(),
                    target.str(), shape_str(shape()));
  Tensor out = backend::copy_to_device(contiguous().detach(), target, "to");
  if (autograd::any_requires_grad(*this)) {
    autograd::record("to_device", {*this}, out, [from = device()](const Tensor& g) -> Grads { return {g.to(from)}; });
  }
  return out;
}

template <typename T>
std::vector<T> Tensor::to_vector() const {
  ops::check_defined("to_vector", *this, "input");
  current_stream(device()).host_access("to_vector");
  Tensor c = dtype() == dtype_of<T> ? *this : detach().to(dtype_of<T>);
  c = c.detach().contiguous().to(kCPU);
  const T* p = static_cast<const T*>(c.data_ptr());
  return std::vector<T>(p, p + c.numel());
}

template <typename T>
T Tensor::item() const {
  ops::check_defined("item", *this, "input");
  ENCORE_CHECK(numel() == 1, "item: tensor of shape %s (%s) has %d elements, not 1", shape_str(shape()),
               dtype_name(dtype()), numel());
  current_stream(device()).host_access("item");
  if constexpr (std::is_integral_v<T>) {
    // As libtorch's item<T>(): a value T cannot hold is refused, never
    // wrapped (an i64 of 2^40 read as i32) or saturated (a float's 1e10).
    // Floats are truncated toward zero where the result fits.
    // The value is read once and converted here, as to_vector<T> would.
    if (dtype() == kInt64 && !std::is_same_v<T, int64_t>) {
      const int64_t v = to_vector<int64_t>()[0];
      ENCORE_CHECK(v >= std::numeric_limits<T>::min() && v <= std::numeric_limits<T>::max(),
                   "item: value %d of the %s tensor does not fit %s", v, dtype_name(dtype()),
                   dtype_name(dtype_of<T>));
      return static_cast<T>(v);
    }
    if (is_floating(dtype())) {
      const double v = to_vector<float>()[0];   // f16 and bf16 widen exactly
      const double lo = static_cast<double>(std::numeric_limits<T>::min());   // -2^31 or -2^63, exact
      ENCORE_CHECK(std::trunc(v) >= lo && std::trunc(v) < -lo, "item: value %g of the %s tensor does not fit %s", v,
                   dtype_name(dtype()), dtype_name(dtype_of<T>));   // NaN fails both comparisons
      return static_cast<T>(v);   // toward zero
    }
  }
  return to_vector<T>()[0];
}

#define ENCORE_INSTANTIATE_HOST(T)                        \
  template std::vector<T> Tensor::to_vector<T>() const; \
  template T Tensor::item<T>() const;
ENCORE_INSTANTIATE_HOST(float)
ENCORE_INSTANTIATE_HOST(Half)
ENCORE_INSTANTIATE_HOST(BFloat16)
ENCORE_INSTANTIATE_HOST(int32_t)
ENCORE_INSTANTIATE_HOST(int64_t)
#undef ENCORE_INSTANTIATE_HOST

// Doubles: floats through f32, integers and bool through i64 (exact).
template <>
std::vector<double> Tensor::to_vector<double>() const {
  ops::check_defined("to_vector", *this, "input");
  if (is_floating(dtype())) {
    std::vector<float> f = to_vector<float>();
    return std::vector<double>(f.begin(), f.end());
  }
  std::vector<int64_t> i = to_vector<int64_t>();
  return std::vector<double>(i.begin(), i.end());
}
template <>
double Tensor::item<double>() const {
  ops::check_defined("item", *this, "input");
  ENCORE_CHECK(numel() == 1, "item: tensor of shape %s (%s) has %d elements, not 1", shape_str(shape()),
               dtype_name(dtype()), numel());
  current_stream(device()).host_access("item");
  return to_vector<double>()[0];
}

template <>
bool Tensor::item<bool>() const {
  ops::check_defined("item", *this, "input");
  return to(kBool).item<int32_t>() != 0;   // nonzero is true, as for .to(kBool)
}

// ---- printing ----

namespace {

constexpr int64_t kSummarizeAbove = 1000;   // elements; larger tensors print 3 + ... + 3 per dim
constexpr int64_t kEdgeItems = 3;

// The tensor printed: t itself, or, when summarizing, t cut to its first
// and last kEdgeItems along every dim longer than 2 * kEdgeItems, so that
// only what is shown is copied, converted and formatted (a whole [50257,
// 768] embedding took seconds and gigabytes; a large broadcast view could
// not be copied at all).
Tensor printed_part(const Tensor& t, bool summarize) {
  if (!summarize) return t;
  NoGradGuard no_grad;
  Tensor part = t.detach();
  for (int64_t d = 0; d < part.dim(); ++d) {
    const int64_t n = part.size(d);
    if (n > 2 * kEdgeItems) part = concat({part.slice(d, 0, kEdgeItems), part.slice(d, n - kEdgeItems, n)}, d);
  }
  return part;
}

// v holds each element of the printed part already formatted, row-major;
// `shape` is the whole tensor's. A summarized dim longer than 2 * kEdgeItems
// holds its 2 * kEdgeItems edge items in v, with "..." printed between them.
void print_values(std::ostream& os, const std::vector<std::string>& v, const Shape& shape, int64_t dim, int64_t base,
                  bool summarize) {
  if (shape.empty()) {
    os << v[0];
    return;
  }
  auto printed = [&](int64_t d) { return summarize && shape[d] > 2 * kEdgeItems ? 2 * kEdgeItems : shape[d]; };
  const int64_t n = printed(dim);
  int64_t inner = 1;
  for (size_t d = dim + 1; d < shape.size(); ++d) inner *= printed(static_cast<int64_t>(d));
  os << "[";
  for (int64_t i = 0; i < n; ++i) {
    if (n < shape[dim] && i == kEdgeItems) os << "..., ";
    if (dim + 1 == static_cast<int64_t>(shape.size())) {
      os << v[base + i];
    } else {
      print_values(os, v, shape, dim + 1, base + i * inner, summarize);
    }
    if (i + 1 < n) os << ", ";
  }
  os << "]";
}

// Floats with 6 significant digits; integers exactly (through i64).
std::vector<std::string> formatted_values(const Tensor& t) {
  std::vector<std::string> out;
  if (is_floating(t.dtype())) {
    for (float x : t.to_vector<float>()) out.push_back(absl::StrFormat("%.6g", x));
  } else {
    for (int64_t x : t.to_vector<int64_t>()) out.push_back(absl::StrCat(x));
  }
  return out;
}

}  // namespace

std::string Tensor::to_string() const {
  if (!defined()) return "tensor(undefined)";
  current_stream(device()).host_access("to_string");
  std::ostringstream os;
  os << "tensor(";
  const bool summarize = numel() > kSummarizeAbove;
  print_values(os, formatted_values(printed_part(*this, summarize)), shape(), 0, 0, summarize);
  os << ", shape=" << shape_str(shape()) << ", dtype=" << dtype_name(dtype()) << ", device=" << device().str();
  if (requires_grad()) os << ", requires_grad=true";
  os << ")";
  return os.str();
}

std::ostream& operator<<(std::ostream& os, const Tensor& t) { return os << t.to_string(); }

}  // namespace encore
