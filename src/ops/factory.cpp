// Creation functions and random draws.
#include <cstdint>
#include <cstring>
#include <mutex>

#include "encore/autograd.h"
#include "encore/ops.h"
#include "src/core/stream.h"
#include "src/core/tensor_internal.h"
#include "src/backends/dtype_checks.h"
#include "src/backends/kernels.h"
#include "src/ops/op_utils.h"

namespace encore {

namespace {
// full() for op: errors name the factory the user called.
Tensor full_for(const char* op, Shape shape, double value, DType dtype, Device device) {
  ops::check_scalar_fits(op, value, dtype, shape, /*truncates=*/true);
  ops::check_float_fits(op, value, dtype, shape);
  Tensor t = empty_for(op, std::move(shape), dtype, device);
  backend::fill(t, value);
  return t;
}
}  // namespace

Tensor zeros(Shape shape, DType dtype, Device device) { return full_for("zeros", std::move(shape), 0.0, dtype, device); }
Tensor ones(Shape shape, DType dtype, Device device) { return full_for("ones", std::move(shape), 1.0, dtype, device); }
Tensor full(Shape shape, double value, DType dtype, Device device) {
  return full_for("full", std::move(shape), value, dtype, device);
}
Tensor scalar_tensor(double value, DType dtype, Device device) {
  return full_for("scalar_tensor", {}, value, dtype, device);
}

Tensor arange(int64_t start, int64_t end, int64_t step, DType dtype, Device device) {
  backend::check_numeric(dtype, "arange");   // before the allocation: a bool range of 2^62 is refused, not tried
  ENCORE_CHECK(step != 0, "arange: step must not be 0 (start %d, end %d)", start, end);
  // In 128 bits: end - start overflows int64 for ranges wider than 2^63.
  const __int128 span = static_cast<__int128>(end) - start + step - (step > 0 ? 1 : -1);
  const __int128 count = std::max<__int128>(0, span / step);
  ENCORE_CHECK(count <= INT64_MAX, "arange: [%d, %d) with step %d has more than 2^63 elements", start, end, step);
  const int64_t n = static_cast<int64_t>(count);
  if (dtype == kInt32 && n > 0) {   // the values run from start to last: both must fit (no silent saturation)
    const __int128 last = static_cast<__int128>(start) + static_cast<__int128>(step) * (n - 1);
    for (const __int128 v : {static_cast<__int128>(start), last}) {
      ENCORE_CHECK(v >= INT32_MIN && v <= INT32_MAX, "arange: value %d of [%d, %d) with step %d does not fit i32",
                   static_cast<int64_t>(v), start, end, step);
    }
  }
  Tensor t = empty_for("arange", {n}, dtype, device);
  backend::arange(t, start, step);   // every value lies between start and end: exact in int64
  return t;
}

namespace {
template <typename T>
struct HostCopyArgs {
  T* dst;
  const T* src;   // host memory outside any tensor
  int64_t n;
  template <typename V>
  void fields(V& v) const { v("dst", dst); v("src", src); v("n", n); }
};
template <typename T>
void host_copy_kernel(const HostCopyArgs<T>& a) {
  if (a.n > 0) std::memcpy(a.dst, a.src, a.n * sizeof(T));   // an empty vector's data() may be null
}
}  // namespace

template <typename T>
Tensor from_vector(const std::vector<T>& values, Shape shape, Device device) {
  ENCORE_CHECK(checked_numel("from_vector", shape) == static_cast<int64_t>(values.size()),
               "from_vector: %d values do not fill shape %s (%s)", values.size(), shape_str(shape),
               dtype_name(dtype_of<T>));
  if (!device.is_cpu()) return from_vector<T>(values, std::move(shape), kCPU).to(device);
  Tensor t = empty_for("from_vector", std::move(shape), dtype_of<T>, device);
  Stream& s = current_stream(device);
  s.host_access("from_vector");
  s.launch<&host_copy_kernel<T>>("from_vector", HostCopyArgs<T>{t.data<T>(), values.data(), t.numel()}, {},
                                 {t.storage()});
  return t;
}
template Tensor from_vector<float>(const std::vector<float>&, Shape, Device);
template Tensor from_vector<Half>(const std::vector<Half>&, Shape, Device);
template Tensor from_vector<BFloat16>(const std::vector<BFloat16>&, Shape, Device);
template Tensor from_vector<int32_t>(const std::vector<int32_t>&, Shape, Device);
template Tensor from_vector<int64_t>(const std::vector<int64_t>&, Shape, Device);

// from_vector<bool>: std::vector<bool> is packed, so convert through bytes.
template <>
Tensor from_vector<bool>(const std::vector<bool>& values, Shape shape, Device device) {
  std::vector<int32_t> ints(values.begin(), values.end());
  return from_vector<int32_t>(ints, std::move(shape), device).to(kBool);
}

// ---- random ----

Generator::Generator(uint64_t seed, Device device) : state_(empty({2}, kInt64, device)) { manual_seed(seed); }

void Generator::manual_seed(uint64_t seed) {
  NoGradGuard no_grad;
  state_.copy_(from_vector<int64_t>({static_cast<int64_t>(seed), 0}));   // exact for every 64-bit seed
}

uint64_t Generator::seed() const { return static_cast<uint64_t>(state_.to_vector<int64_t>()[0]); }
uint64_t Generator::offset() const { return static_cast<uint64_t>(state_.to_vector<int64_t>()[1]); }

namespace {
std::mutex default_generators_mu;   // guards the two below (first draws or manual_seed from several threads)
uint64_t last_manual_seed = 0;     // seeds the CUDA generator when it is first created
Generator* cuda_generator = nullptr;   // created on first use, so manual_seed never starts CUDA; never destroyed
}  // namespace

Generator& default_generator(Device device) {
  if (device.is_cpu()) {
    static Generator* cpu_gen = new Generator(0, kCPU);   // never destroyed: tensors may outlive main
    return *cpu_gen;
  }
  ENCORE_CHECK_CODE(device.index == 0, kUnimplemented,
                    "default_generator: only cuda:0 has a default generator (asked for %s); pass a Generator",
                    device.str());
  std::lock_guard<std::mutex> lock(default_generators_mu);
  if (cuda_generator == nullptr) cuda_generator = new Generator(last_manual_seed, device);
  return *cuda_generator;
}

void manual_seed(uint64_t seed) {
  std::lock_guard<std::mutex> lock(default_generators_mu);
  last_manual_seed = seed;
  default_generator(kCPU).manual_seed(seed);
  if (cuda_generator != nullptr) cuda_generator->manual_seed(seed);
}

namespace {
Tensor draw(const char* op, Shape shape, DType dtype, Device device, Generator* gen, backend::RandomKind kind) {
  ENCORE_CHECK(is_floating(dtype), "%s: dtype %s is not a float dtype (shape %s)", op, dtype_name(dtype),
               shape_str(shape));
  Generator& g = gen != nullptr ? *gen : default_generator(device);
  ENCORE_CHECK(g.device() == device, "%s: generator on %s cannot draw on %s", op, g.device().str(),
               device.str());
  Tensor t = empty_for(op, std::move(shape), dtype, device);
  backend::random(t, g.state(), kind);
  return t;
}
}  // namespace

Tensor rand(Shape shape, DType dtype, Device device, Generator* gen) {
  return draw("rand", std::move(shape), dtype, device, gen, backend::RandomKind::kUniform);
}
Tensor randn(Shape shape, DType dtype, Device device, Generator* gen) {
  return draw("randn", std::move(shape), dtype, device, gen, backend::RandomKind::kNormal);
}

}  // namespace encore
