// libFuzzer target: op arguments. The input picks tensors (dtype, shape,
// values, a view of them), an op and its arguments (dims, sizes, scalars:
// small ones, and hostile ones: negative, 2^31, 2^62, INT64_MAX, nan, inf).
// Every call must return a tensor or throw encore::Error; any other
// exception, a crash or a sanitizer report is a finding. Each op family
// has one function below (unary, binary, ..., cnn, losses, indexing); the
// result is then read and, when it requires grad, backpropagated with a
// fuzzed gradient. Seeds: fuzz/make_corpus.cpp.
//
// Memory: the harness computes on tensors of at most kSmall elements and
// asks factories for at most kFactoryBytes (or sizes that overflow, which
// must be refused): a legitimate 4 TB allocation is not a bug, and
// libFuzzer would report it as one.
//
//   ./run fuzz ops_fuzz
#include <fuzzer/FuzzedDataProvider.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>
#include <vector>

#include "encore/encore.h"

namespace {

using encore::DType;
using encore::Shape;
using encore::Tensor;

constexpr int64_t kSmall = 1024;                   // elements of a tensor ops may compute on
constexpr int64_t kFactoryBytes = int64_t{1} << 22;   // what one factory call may allocate

constexpr int64_t kHostileSizes[] = {-1, -2, std::numeric_limits<int64_t>::min(), std::numeric_limits<int64_t>::max(),
                                     int64_t{1} << 31, int64_t{1} << 32, int64_t{1} << 62, int64_t{1} << 40};
constexpr double kSpecialScalars[] = {0.0, -0.0, 1.0, -1.0, 0.5, 2.0, 1e308, -1e308, 1e-310,
                                      std::numeric_limits<double>::quiet_NaN(), std::numeric_limits<double>::infinity(),
                                      -std::numeric_limits<double>::infinity(), 65504.0, 3.0};
constexpr float kSpecialValues[] = {0.0f, -0.0f, 1.0f, -1.0f, 65504.0f, 1e-40f, 3.4e38f,
                                    std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity(),
                                    -std::numeric_limits<float>::infinity()};
constexpr DType kDTypes[] = {encore::kFloat32, encore::kFloat16, encore::kBFloat16,
                             encore::kInt32,   encore::kInt64,   encore::kBool};

// Elements of shape s; INT64_MAX where a dim is negative or the product overflows.
int64_t elements(const Shape& s) {
  int64_t n = 1;
  for (int64_t d : s) {
    if (d < 0 || __builtin_mul_overflow(n, d, &n)) return std::numeric_limits<int64_t>::max();
  }
  return n;
}

struct Gen {
  FuzzedDataProvider& p;

  bool coin() { return p.ConsumeBool(); }
  int pick(int n) { return p.ConsumeIntegralInRange<int>(0, n - 1); }
  DType dtype() { return p.PickValueInArray(kDTypes); }
  DType float_dtype() { return pick(6) == 0 ? dtype() : kDTypes[pick(3)]; }   // mostly f32, f16 or bf16
  // A size or count: mostly 0..5, sometimes hostile.
  int64_t size() { return pick(12) == 0 ? p.PickValueInArray(kHostileSizes) : p.ConsumeIntegralInRange<int64_t>(0, 5); }
  // A dim or index argument: mostly -5..5, sometimes hostile.
  int64_t dim() { return pick(12) == 0 ? p.PickValueInArray(kHostileSizes) : p.ConsumeIntegralInRange<int64_t>(-5, 5); }
  // A dim of t: mostly in range (either sign), else dim().
  int64_t dim_of(const Tensor& t) {
    const int64_t r = t.dim();
    return r == 0 || pick(4) == 0 ? dim() : p.ConsumeIntegralInRange<int64_t>(-r, r - 1);
  }
  double scalar() { return coin() ? p.PickValueInArray(kSpecialScalars) : p.ConsumeFloatingPointInRange<double>(-8, 8); }
  Shape shape() {   // 0..4 dims, rarely 9 (one past kMaxDims)
    Shape s(pick(16) == 0 ? 9 : pick(5));
    for (int64_t& d : s) d = size();
    return s;
  }
  std::vector<int64_t> dims() {
    std::vector<int64_t> d(pick(4));
    for (int64_t& x : d) x = dim();
    return d;
  }

  // A tensor of at most kSmall elements (2 kSmall for a shape from
  // near()), of any dtype, often a view (a view that broadcasts past kSmall
  // elements is replaced by its base). Its values: randn, small integers,
  // or special ones (nan, inf, subnormal, f16's largest). A shape past
  // 2 kSmall elements (a huge empty view's, or near() of it) is replaced by
  // a small one.
  Tensor tensor() { return tensor(small_shape()); }
  Tensor tensor(const Shape& s) { return tensor(s, dtype()); }
  // Mostly of a's dtype: an operand that should match a.
  Tensor like(const Shape& s, const Tensor& a) { return tensor(s, pick(8) == 0 ? dtype() : a.dtype()); }
  Tensor tensor(Shape s, DType dt) {
    if (elements(s) > 2 * kSmall) s = small_shape();
    Tensor t;
    switch (pick(3)) {
      case 0: {
        encore::Generator g(p.ConsumeIntegral<uint32_t>());
        t = encore::mul(encore::randn(s, encore::kFloat32, encore::kCPU, &g), 1 + pick(4));
        break;
      }
      case 1: {
        std::vector<int64_t> v(encore::numel_of(s));
        for (int64_t& x : v) x = p.ConsumeIntegralInRange<int64_t>(-3, 8);
        t = encore::from_vector<int64_t>(v, s);
        break;
      }
      default: {
        std::vector<float> v(encore::numel_of(s));
        for (float& x : v) x = p.PickValueInArray(kSpecialValues);
        t = encore::from_vector<float>(v, s);
      }
    }
    t = t.to(dt);
    if (!coin()) return t;
    Tensor v = view_of(t);
    return v.numel() <= kSmall ? v : t;
  }
  // Index tensor of shape s (i64, i32, rarely a float dtype, which must be
  // refused): values in 0..1 (in range for most dims) or -2..6, at times
  // with one hostile value (i32 saturates it).
  Tensor index(Shape s) {
    if (elements(s) > 2 * kSmall) s = small_shape();
    const bool wide = pick(4) == 0;
    std::vector<int64_t> v(encore::numel_of(s));
    for (int64_t& x : v) x = wide ? p.ConsumeIntegralInRange<int64_t>(-2, 6) : p.ConsumeIntegralInRange<int64_t>(0, 1);
    if (!v.empty() && pick(8) == 0) v[pick(static_cast<int>(v.size()))] = p.PickValueInArray(kHostileSizes);
    const DType dt = pick(8) == 0 ? dtype() : (coin() ? encore::kInt64 : encore::kInt32);
    return encore::from_vector<int64_t>(v, s).to(dt);
  }
  // A shape like s, for an operand that should match it: often s, else s
  // with a dim changed by one (or dropped, or added), or any shape.
  Shape near(Shape s) {
    switch (pick(6)) {
      case 0: {
        if (s.empty()) return s;
        int64_t& d = s[pick(static_cast<int>(s.size()))];
        // Down from a hostile INT64_MAX: the harness's own + 1 overflowed.
        d += (d > 0 && coin()) || d == std::numeric_limits<int64_t>::max() ? -1 : 1;
        return s;
      }
      case 1: if (!s.empty()) s.erase(s.begin() + pick(static_cast<int>(s.size()))); return s;
      case 2: s.push_back(1); return s;
      case 3: return small_shape();
      default: return s;
    }
  }
  // 0..4 dims of 0..5: at most kSmall elements.
  Shape small_shape() {
    Shape s(pick(5));
    for (int64_t& d : s) d = p.ConsumeIntegralInRange<int64_t>(0, 5);
    return s;
  }
  // An image [N, C, H, W] (sometimes 3-D, sometimes any shape) of at most
  // kSmall elements, mostly of a float dtype, often a leaf.
  Tensor image() {
    Shape s = {p.ConsumeIntegralInRange<int64_t>(0, 2), p.ConsumeIntegralInRange<int64_t>(1, 4),
               p.ConsumeIntegralInRange<int64_t>(1, 8), p.ConsumeIntegralInRange<int64_t>(1, 8)};
    if (pick(4) == 0) s.erase(s.begin());
    if (pick(8) == 0) s = small_shape();
    return maybe_leaf(tensor(s, float_dtype()));
  }
  // A window argument (kernel, stride, padding, dilation): small, one for both or a pair, sometimes hostile.
  encore::Size2 size2() { return coin() ? encore::Size2(size()) : encore::Size2(size(), size()); }
  // t as a fresh leaf that requires grad, half the time (floats only).
  Tensor maybe_leaf(const Tensor& t) {
    return coin() && t.defined() && encore::is_floating(t.dtype()) ? t.detach().clone().requires_grad_() : t;
  }

  // One view op on t with fuzzed arguments (t itself when it is refused).
  Tensor view_of(const Tensor& t) {
    try {
      switch (pick(10)) {
        case 0: return t.transpose(dim(), dim());
        case 1: return t.slice(dim(), dim(), dim(), coin() ? 1 + pick(3) : size());
        case 2: return t.select(dim(), dim());
        case 3: return t.expand(shape());
        case 4: return t.unsqueeze(dim());
        case 5: return t.squeeze(dim());
        case 6: return t.view(shape());
        case 7: return t.reshape(shape());
        case 8: {
          Shape perm(t.dim());
          for (int64_t& d : perm) d = dim();
          return t.permute(perm);
        }
        default: return t.t();
      }
    } catch (const encore::Error&) {
      return t;
    }
  }
};

bool small(const Tensor& t) { return t.defined() && t.numel() <= kSmall; }

// Bytes a factory would allocate for shape; true when it may be asked: at
// most kFactoryBytes, or a size that must be refused (negative, overflow).
bool factory_ok(const Shape& s, DType dt) {
  int64_t bytes = encore::dtype_size(dt);
  for (int64_t d : s) {
    if (d < 0 || __builtin_mul_overflow(bytes, d, &bytes)) return true;
  }
  return bytes <= kFactoryBytes || s.size() > static_cast<size_t>(encore::kMaxDims);
}

// Reads every element of r and, when it can, runs backward through it: from
// r.sum(), from r with a fuzzed gradient (r's shape or near it, any dtype),
// from r and r.sum() at once, or twice (the second must be refused: the
// graph is freed by then).
void use(Gen& g, const Tensor& r) {
  if (!small(r)) return;
  (void)r.to(encore::kFloat32).sum().item<double>();
  if (!r.requires_grad() || !encore::is_floating(r.dtype())) return;
  switch (g.pick(4)) {
    case 0: r.backward(g.like(g.near(r.shape()), r)); break;
    case 1: encore::autograd::backward({r, r.sum()}, {g.like(g.near(r.shape()), r), Tensor()}); break;
    case 2: {
      Tensor total = r.sum();
      total.backward();
      total.backward();
      break;
    }
    default: r.sum().backward();
  }
}

Tensor unary(Gen& g, const Tensor& a) {
  switch (g.pick(14)) {
    case 0: return encore::neg(a);
    case 1: return encore::exp(a);
    case 2: return encore::log(a);
    case 3: return encore::sqrt(a);
    case 4: return encore::rsqrt(a);
    case 5: return encore::pow(a, g.scalar());
    case 6: return encore::abs(a);
    case 7: return encore::tanh(a);
    case 8: return encore::sigmoid(a);
    case 9: return encore::relu(a);
    case 10: return encore::gelu(a, g.coin() ? encore::GeluApprox::kTanh : encore::GeluApprox::kNone);
    case 11: return encore::silu(a);
    case 12: return encore::clamp(a, g.scalar(), g.scalar());
    default: {   // from the default generator or an own one
      encore::Generator gen(g.p.ConsumeIntegral<uint64_t>());
      return encore::dropout(a, g.scalar(), g.coin(), g.coin() ? &gen : nullptr);
    }
  }
}

Tensor binary(Gen& g, const Tensor& a, const Tensor& b) {
  switch (g.pick(11)) {
    case 0: return encore::add(a, b);
    case 1: return encore::sub(a, b);
    case 2: return encore::mul(a, b);
    case 3: return encore::div(a, b);
    case 4: return encore::add(a, g.scalar());
    case 5: return encore::mul(a, g.scalar());
    case 6: return encore::rsub(a, g.scalar());
    case 7: return encore::rdiv(a, g.scalar());
    case 8: return encore::div(a, g.scalar());
    case 9: return encore::matmul(a, b);
    default: return encore::linear(a, b, g.coin() ? Tensor() : g.tensor());
  }
}

Tensor reduce(Gen& g, const Tensor& a) {
  switch (g.pick(9)) {
    case 0: return encore::sum(a, g.dims(), g.coin());
    case 1: return encore::mean(a, g.dims(), g.coin());
    case 2: return encore::var(a, g.dims(), g.size(), g.coin());
    case 3: return encore::max(a, g.dim(), g.coin()).first;
    case 4: return encore::max(a);
    case 5: return encore::argmax(a, g.dim(), g.coin());
    case 6: return encore::softmax(a, g.dim());
    case 7: return encore::log_softmax(a, g.dim());
    default: return encore::sum_to(a, g.shape());
  }
}

Tensor nn_op(Gen& g, const Tensor& a, const Tensor& b) {
  switch (g.pick(6)) {
    case 0: return encore::cross_entropy(a, b, g.coin() ? -100 : g.dim());
    case 1: return encore::layer_norm(a, g.shape(), g.coin() ? Tensor() : g.tensor(), g.coin() ? Tensor() : g.tensor(),
                                      g.coin() ? 1e-5 : g.scalar());
    case 2: return encore::embedding(a, b);
    case 3: return encore::where(b, a, g.tensor());
    case 4: return encore::masked_fill(a, b, g.scalar());
    default: return encore::sum_to(a, b.shape());
  }
}

Tensor join(Gen& g, const Tensor& a, const Tensor& b) {
  std::vector<Tensor> ts = {a, b};
  if (g.coin()) ts.push_back(g.tensor());
  switch (g.pick(3)) {
    case 0: return encore::concat(ts, g.dim());
    case 1: return encore::stack(ts, g.dim());
    default: {
      std::vector<Tensor> parts = encore::split(a, g.size(), g.dim());
      return parts.empty() ? Tensor() : parts.back();
    }
  }
}

Tensor in_place(Gen& g, Tensor a, const Tensor& b) {
  switch (g.pick(4)) {
    case 0: return a.copy_(b);
    case 1: return a.fill_(g.scalar());
    case 2: return a.add_(b, g.scalar());
    default: return a.mul_(g.scalar());
  }
}

Tensor factory(Gen& g) {
  const Shape s = g.shape();
  const DType dt = g.dtype();
  if (g.pick(4) == 0) {   // arange: at most kFactoryBytes, or a count that must be refused
    auto bound = [&g] {   // a dim, sometimes scaled by 1000 (when that does not overflow)
      int64_t v = g.dim(), scaled = 0;
      return g.coin() && !__builtin_mul_overflow(v, 1000, &scaled) ? scaled : v;
    };
    const int64_t start = bound(), end = bound(), step = g.dim();
    const double count = step == 0 ? 0 : std::ceil((static_cast<double>(end) - start) / static_cast<double>(step));
    if (count * 8 > kFactoryBytes && count < 0x1p62) return Tensor();
    return encore::arange(start, end, step, g.coin() ? encore::kInt64 : dt);
  }
  if (!factory_ok(s, dt)) return Tensor();
  switch (g.pick(6)) {
    case 0: return encore::zeros(s, dt);
    case 1: return encore::ones(s, dt);
    case 2: return encore::full(s, g.scalar(), dt);
    case 3: return encore::empty(s, dt).fill_(0);   // empty's bytes are unset: a bool byte 5 is UB to read
    case 4: return encore::rand(s, dt);
    default: return encore::randn(s, dt);
  }
}

// The rvalue forms, which may write into x's buffer: x is a fresh copy
// (its buffer free to take) or shares it with y (y is x, or a view of it:
// then y must keep its values), or is both operands at once.
Tensor consume(Gen& g, const Tensor& a, const Tensor& b) {
  Tensor x = g.coin() ? a.detach().clone() : a;
  Tensor y = b;
  if (g.pick(3) == 0) {   // x itself, or a view of it of at most kSmall elements (an expand may be huge)
    const Tensor v = g.coin() ? x : g.view_of(x);
    y = v.numel() <= kSmall ? v : x;
  }
  switch (g.pick(9)) {
    case 0: return encore::add(std::move(x), y);
    case 1: return encore::sub(y, std::move(x));
    case 2: return encore::mul(std::move(x), std::move(y));
    case 3: return encore::div(std::move(x), std::move(x));
    case 4: return encore::rdiv(std::move(x), g.scalar());
    case 5: return encore::neg(std::move(x));
    case 6: return encore::pow(std::move(x), g.scalar());
    case 7: return encore::clamp(std::move(x), g.scalar(), g.scalar());
    default: return encore::gelu(std::move(x), g.coin() ? encore::GeluApprox::kTanh : encore::GeluApprox::kNone);
  }
}

Tensor compare(Gen& g, const Tensor& a, const Tensor& b) {
  using TensorFn = Tensor (*)(const Tensor&, const Tensor&);
  using ScalarFn = Tensor (*)(const Tensor&, double);
  static constexpr TensorFn kTensorFns[] = {encore::eq, encore::ne, encore::lt, encore::le, encore::gt, encore::ge};
  static constexpr ScalarFn kScalarFns[] = {encore::eq, encore::ne, encore::lt, encore::le, encore::gt, encore::ge};
  if (g.coin()) return g.p.PickValueInArray(kTensorFns)(a, b);
  return g.p.PickValueInArray(kScalarFns)(a, g.scalar());
}

encore::Reduction reduction(Gen& g) {
  static constexpr encore::Reduction kReductions[] = {encore::Reduction::kMean, encore::Reduction::kSum,
                                                      encore::Reduction::kNone};
  return g.p.PickValueInArray(kReductions);
}

// mse_loss, binary_cross_entropy_with_logits and nll_loss (cross_entropy is in nn_op).
Tensor loss(Gen& g, const Tensor& a, const Tensor& b) {
  switch (g.pick(3)) {
    case 0: return encore::mse_loss(a, g.coin() ? b : g.maybe_leaf(g.like(g.near(a.shape()), a)), reduction(g));
    case 1: {
      const Tensor target = g.maybe_leaf(g.like(g.near(a.shape()), a));
      const Tensor weight = g.coin() ? Tensor() : g.maybe_leaf(g.like(g.near(a.shape()), a));
      const Tensor pos_weight = g.coin() ? Tensor() : g.like(g.near(a.dim() > 0 ? Shape{a.size(-1)} : Shape{}), a);
      return encore::binary_cross_entropy_with_logits(a, target, weight, pos_weight, reduction(g));
    }
    default: {   // a: [C], [N, C] or [N, C, d..]; target: a's shape without C
      Shape target_shape = a.shape();
      if (!target_shape.empty()) target_shape.erase(target_shape.begin() + (a.dim() >= 2 ? 1 : 0));
      const Tensor target = g.index(g.near(target_shape));
      const Shape classes = {a.dim() >= 2 ? a.size(1) : (a.dim() == 1 ? a.size(0) : 1)};
      const Tensor weight = g.coin() ? Tensor() : g.like(g.near(classes), a);
      return encore::nll_loss(a, target, weight, g.coin() ? -100 : g.dim(), reduction(g));
    }
  }
}

Tensor indexing(Gen& g, const Tensor& a) {
  const int64_t dim = g.dim_of(a);
  switch (g.pick(5)) {
    case 0: return encore::gather(a, dim, g.index(g.near(a.shape())));
    case 1: return encore::index_select(a, dim, g.index(g.coin() ? Shape{g.size()} : g.small_shape()));
    case 2: {
      const Tensor index = g.index(g.near(a.shape()));
      return encore::scatter_add(a, dim, index, g.maybe_leaf(g.like(g.near(index.shape()), a)));
    }
    case 3: return encore::topk(a, g.dim(), dim, g.coin(), g.coin()).first;
    default: {   // with replacement, at most kFactoryBytes of samples (or a count that must be refused)
      const int64_t n = g.size();
      const bool replacement = g.coin();
      if (replacement && !factory_ok({a.dim() == 2 ? a.size(0) : 1, n}, encore::kInt64)) return Tensor();
      encore::Generator gen(g.p.ConsumeIntegral<uint64_t>());
      return encore::multinomial(g.coin() ? encore::abs(a) : a, n, replacement, g.coin() ? &gen : nullptr);
    }
  }
}

// Output length along one axis of conv2d or a pool, plus one for ceil_mode,
// in doubles: hostile arguments would overflow int64 here.
double window_out(int64_t in, int64_t kernel, int64_t stride, int64_t padding, int64_t dilation) {
  if (stride <= 0) return -1;   // refused
  const double span = static_cast<double>(in) + 2.0 * static_cast<double>(padding) -
                      static_cast<double>(dilation) * (static_cast<double>(kernel) - 1) - 1;
  return std::floor(span / static_cast<double>(stride)) + 2;
}

// Whether conv2d or a pool with an output of `planes` planes of oh x ow may
// be asked for: at most kFactoryBytes (8-byte elements: max_pool2d's
// indices), or sizes it must refuse (an axis not positive, or past 2^64 bytes).
bool window_ok(double planes, double oh, double ow) {
  const double bytes = planes * oh * ow * 8;
  return oh <= 0 || ow <= 0 || bytes <= kFactoryBytes || bytes >= 0x1p64;
}

Tensor conv(Gen& g, const Tensor& x) {
  const int64_t n = x.dim() == 4 ? x.size(0) : 1, c = x.dim() == 4 ? x.size(1) : 1;
  const int64_t groups = g.pick(4) == 0 ? g.size() : (c % 2 == 0 && g.coin() ? 2 : 1);
  const int64_t k = (1 + g.pick(3)) * (groups == 2 ? 2 : 1);
  Shape weight_shape = {k, c / std::max<int64_t>(groups, 1), 1 + g.pick(3), 1 + g.pick(3)};
  if (g.pick(6) == 0) weight_shape = g.near(weight_shape);
  const Tensor weight = g.maybe_leaf(g.like(weight_shape, x));
  const Tensor bias = g.coin() ? Tensor() : g.maybe_leaf(g.like(g.near({k}), x));
  const encore::Size2 stride = g.size2(), padding = g.size2(), dilation = g.size2();
  const int64_t kh = weight.dim() == 4 ? weight.size(2) : 1, kw = weight.dim() == 4 ? weight.size(3) : 1;
  if (!window_ok(static_cast<double>(n) * k, window_out(x.size(-2), kh, stride.h, padding.h, dilation.h),
                 window_out(x.size(-1), kw, stride.w, padding.w, dilation.w))) {
    return Tensor();
  }
  return encore::conv2d(x, weight, bias, stride, padding, dilation, groups);
}

Tensor batch_norm(Gen& g, const Tensor& x) {
  const int64_t c = x.dim() >= 2 ? x.size(1) : 1;
  auto stat = [&g, &x, c](double fill) {   // undefined, [C] of fill, or any tensor near [C]
    switch (g.pick(4)) {
      case 0: return Tensor();
      case 1: return g.like(g.near({c}), x);
      default: return encore::full({c}, fill, x.dtype());
    }
  };
  const Tensor running_mean = stat(0), running_var = stat(1);
  const Tensor weight = g.coin() ? Tensor() : g.maybe_leaf(g.like(g.near({c}), x));
  const Tensor bias = g.coin() ? Tensor() : g.maybe_leaf(g.like(g.near({c}), x));
  const bool training = g.coin();
  std::optional<double> momentum;   // nullopt: a cumulative average
  if (g.pick(4) != 0) momentum = g.coin() ? 0.1 : g.scalar();
  const double eps = g.coin() ? 1e-5 : g.scalar();
  Tensor num_batches_tracked;
  if (g.coin()) {
    num_batches_tracked = g.coin() ? encore::scalar_tensor(static_cast<double>(g.dim()), encore::kInt64) : g.tensor();
  }
  return encore::batch_norm(x, running_mean, running_var, weight, bias, training, momentum, eps, num_batches_tracked);
}

// max_pool2d or avg_pool2d on x of `planes` planes.
Tensor pool(Gen& g, const Tensor& x, double planes, bool max) {
  const encore::Size2 kernel = g.size2(), padding = g.size2(), dilation = max ? g.size2() : encore::Size2(1);
  const std::optional<encore::Size2> stride = g.coin() ? std::nullopt : std::optional<encore::Size2>(g.size2());
  const encore::Size2 s = stride.value_or(kernel);
  if (!window_ok(planes, window_out(x.size(-2), kernel.h, s.h, padding.h, dilation.h),
                 window_out(x.size(-1), kernel.w, s.w, padding.w, dilation.w))) {
    return Tensor();
  }
  const bool ceil_mode = g.coin();
  if (max) return encore::max_pool2d(x, kernel, stride, padding, dilation, ceil_mode);
  return encore::avg_pool2d(x, kernel, stride, padding, ceil_mode, /*count_include_pad=*/g.coin());
}

// conv2d, the pools, flatten and batch_norm, on an image x ([N, C, H, W] or [C, H, W], or not).
Tensor cnn(Gen& g) {
  const Tensor x = g.image();
  if (x.dim() < 2) return encore::flatten(x, g.dim(), g.dim());
  const double planes = static_cast<double>(x.numel()) / std::max<int64_t>(1, x.size(-2) * x.size(-1));
  switch (g.pick(6)) {
    case 0: return conv(g, x);
    case 1: return pool(g, x, planes, /*max=*/true);
    case 2: return pool(g, x, planes, /*max=*/false);
    case 3: {
      const encore::Size2 out = g.size2();
      if (!window_ok(planes, static_cast<double>(out.h), static_cast<double>(out.w))) return Tensor();
      return encore::adaptive_avg_pool2d(x, out);
    }
    case 4: return encore::flatten(x, g.dim(), g.dim());
    default: return batch_norm(g, x);
  }
}

// Conversions and host reads.
Tensor convert(Gen& g, const Tensor& a) {
  switch (g.pick(3)) {
    case 0: return a.to(g.dtype());
    case 1: return a.clone();
    default: return encore::scalar_tensor(a.item<double>(), g.dtype());   // refused unless a has one element
  }
}

// Leaves with gradients (from mul(p, s).sum(): s may be nan, inf or 1e308),
// sometimes none, sometimes one listed twice or an undefined one.
Tensor clip(Gen& g, const Tensor& a, const Tensor& b) {
  std::vector<Tensor> params;
  for (const Tensor& t : {a, b}) {
    if (!encore::is_floating(t.dtype())) continue;
    Tensor p = t.detach().clone().requires_grad_();
    if (g.coin()) encore::mul(p, g.scalar()).sum().backward();
    params.push_back(p);
  }
  if (!params.empty() && g.pick(8) == 0) params.push_back(params.front());
  if (g.pick(8) == 0) params.emplace_back();
  return encore::optim::clip_grad_norm(params, g.scalar());
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  FuzzedDataProvider provider(data, size);
  Gen g{provider};
  encore::manual_seed(1);
  try {
    Tensor a = g.tensor(), b = g.tensor();
    if (g.coin() && encore::is_floating(a.dtype())) a = a.detach().clone().requires_grad_();
    Tensor r;
    switch (g.pick(15)) {
      case 0: r = unary(g, a); break;
      case 1: r = binary(g, a, b); break;
      case 2: r = reduce(g, a); break;
      case 3: r = nn_op(g, a, b); break;
      case 4: r = join(g, a, b); break;
      case 5: r = in_place(g, a.detach().clone(), b); break;
      case 6: r = factory(g); break;
      case 7: r = consume(g, a, b); break;
      case 8: r = compare(g, a, b); break;
      case 9: r = loss(g, a, b); break;
      case 10: r = indexing(g, a); break;
      case 11: r = cnn(g); break;
      case 12: r = convert(g, a); break;
      case 13: r = clip(g, a, b); break;
      default: {   // a view, copied when it is small enough to compute on
        Tensor v = g.view_of(a);
        r = v.numel() <= kSmall ? v.contiguous() : v;
        break;
      }
    }
    use(g, r);
  } catch (const encore::Error&) {
    // refused with a message: what hostile arguments should get
  }
  return 0;
}
