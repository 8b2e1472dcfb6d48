// libFuzzer target: op arguments. The input picks tensors (dtype, shape,
// values, a view of them), an op and its arguments (dims, sizes, scalars:
// small ones, and hostile ones: negative, 2^31, 2^62, INT64_MAX, nan, inf).
// Every call must return a tensor or throw encore::Error; any other
// exception, a crash or a sanitizer report is a finding. Seeds:
// fuzz/make_corpus.cpp.
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
constexpr DType kDTypes[] = {encore::kFloat32, encore::kFloat16, encore::kBFloat16,
                             encore::kInt32,   encore::kInt64,   encore::kBool};

struct Gen {
  FuzzedDataProvider& p;

  bool coin() { return p.ConsumeBool(); }
  int pick(int n) { return p.ConsumeIntegralInRange<int>(0, n - 1); }
  DType dtype() { return p.PickValueInArray(kDTypes); }
  // A size or count: mostly 0..5, sometimes hostile.
  int64_t size() { return pick(12) == 0 ? p.PickValueInArray(kHostileSizes) : p.ConsumeIntegralInRange<int64_t>(0, 5); }
  // A dim or index argument: mostly -5..5, sometimes hostile.
  int64_t dim() { return pick(12) == 0 ? p.PickValueInArray(kHostileSizes) : p.ConsumeIntegralInRange<int64_t>(-5, 5); }
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

  // A tensor of at most kSmall elements, of any dtype, often a view (a
  // view that broadcasts past kSmall elements is replaced by its base).
  Tensor tensor() {
    Shape s(pick(5));
    int64_t n = 1;
    for (int64_t& d : s) n *= (d = p.ConsumeIntegralInRange<int64_t>(0, 5));
    const DType dt = dtype();
    Tensor t;
    if (coin()) {
      encore::Generator g(p.ConsumeIntegral<uint32_t>());
      t = encore::mul(encore::randn(s, encore::kFloat32, encore::kCPU, &g), 1 + pick(4));
    } else {
      std::vector<int64_t> v(n);
      for (int64_t& x : v) x = p.ConsumeIntegralInRange<int64_t>(-3, 8);
      t = encore::from_vector<int64_t>(v, s);
    }
    t = t.to(dt);
    if (!coin()) return t;
    Tensor v = view_of(t);
    return v.numel() <= kSmall ? v : t;
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

// Reads every element of r and, when it can, runs backward through it.
void use(const Tensor& r) {
  if (!small(r)) return;
  (void)r.to(encore::kFloat32).sum().item<double>();
  if (r.requires_grad() && encore::is_floating(r.dtype())) r.sum().backward();
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
    default: return encore::dropout(a, g.scalar(), g.coin());
  }
}

Tensor binary(Gen& g, const Tensor& a, const Tensor& b) {
  switch (g.pick(10)) {
    case 0: return encore::add(a, b);
    case 1: return encore::sub(a, b);
    case 2: return encore::mul(a, b);
    case 3: return encore::div(a, b);
    case 4: return encore::add(a, g.scalar());
    case 5: return encore::mul(a, g.scalar());
    case 6: return encore::rsub(a, g.scalar());
    case 7: return encore::rdiv(a, g.scalar());
    case 8: return encore::matmul(a, b);
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
  switch (g.pick(5)) {
    case 0: return encore::zeros(s, dt);
    case 1: return encore::ones(s, dt);
    case 2: return encore::full(s, g.scalar(), dt);
    case 3: return encore::empty(s, dt).fill_(0);   // empty's bytes are unset: a bool byte 5 is UB to read
    default: return encore::randn(s, dt);
  }
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
    switch (g.pick(8)) {
      case 0: r = unary(g, a); break;
      case 1: r = binary(g, a, b); break;
      case 2: r = reduce(g, a); break;
      case 3: r = nn_op(g, a, b); break;
      case 4: r = join(g, a, b); break;
      case 5: r = in_place(g, a.detach().clone(), b); break;
      case 6: r = factory(g); break;
      default: {   // a view, copied when it is small enough to compute on
        Tensor v = g.view_of(a);
        r = v.numel() <= kSmall ? v.contiguous() : v;
        break;
      }
    }
    use(r);
  } catch (const encore::Error&) {
    // refused with a message: what hostile arguments should get
  }
  return 0;
}
