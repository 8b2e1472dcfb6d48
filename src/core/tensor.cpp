// Tensor metadata and Storage. Ops, views and creation live in src/ops/;
// autograd accessors in src/autograd/.
#include <algorithm>
#include <atomic>
#include <utility>
#include <vector>

#include "absl/strings/str_join.h"
#include "encore/tensor.h"
#include "src/core/allocator.h"
#include "src/core/step_observer.h"
#include "src/core/tensor_internal.h"

namespace encore {
namespace {
std::atomic<uint64_t> next_storage_id{1};

// A per-thread cache of freed small objects of one size. Blocks freed on
// another thread join that thread's cache; beyond kMaxCached they go back to
// the heap.
//
// NOTE [ Objects that outlive their thread's cache ]: a tensor held in a
// static, a global or a thread_local made before the cache is destroyed
// after it (at exit, or at the thread's end). Such frees, and any allocation
// after that point, go to the heap: cache_state<T> is a trivially
// destructible thread_local, readable while the thread's other thread_locals
// are destroyed and after.
template <typename T>
inline thread_local uint8_t cache_state = 0;   // 0: not made yet, 1: alive, 2: destroyed

template <typename T>
class ObjectCache {
 public:
  ObjectCache() { cache_state<T> = 1; }
  ~ObjectCache() {
    cache_state<T> = 2;
    for (void* p : free_) ::operator delete(p);
  }
  void* get() {
    if (free_.empty()) return ::operator new(sizeof(T));
    void* p = free_.back();
    free_.pop_back();
    return p;
  }
  void put(void* p) {
    if (free_.size() >= kMaxCached) {
      ::operator delete(p);
      return;
    }
    free_.push_back(p);
  }

 private:
  static constexpr size_t kMaxCached = 4096;
  std::vector<void*> free_;
};

template <typename T>
ObjectCache<T>& object_cache() {
  thread_local ObjectCache<T> cache;
  return cache;
}

template <typename T>
void* cached_new() {
  if (cache_state<T> == 2) [[unlikely]] return ::operator new(sizeof(T));
  return object_cache<T>().get();
}

template <typename T>
void cached_delete(void* p) {
  if (cache_state<T> == 2) [[unlikely]] return ::operator delete(p);
  object_cache<T>().put(p);
}
}  // namespace

void* Storage::operator new(size_t size) { return cached_new<Storage>(); }
void Storage::operator delete(void* p, size_t size) { cached_delete<Storage>(p); }
void* AutogradMeta::operator new(size_t size) { return cached_new<AutogradMeta>(); }
void AutogradMeta::operator delete(void* p, size_t size) { cached_delete<AutogradMeta>(p); }
void* TensorImpl::operator new(size_t size) { return cached_new<TensorImpl>(); }
void TensorImpl::operator delete(void* p, size_t size) { cached_delete<TensorImpl>(p); }

Storage::Storage(void* data, int64_t nbytes, Device device, Allocator* allocator)
    : data_(data), nbytes_(nbytes), device_(device), allocator_(allocator),
      id_(next_storage_id.fetch_add(1, std::memory_order_relaxed)) {}

Ref<Storage> Storage::allocate(int64_t nbytes, Device device) {
  Allocator& a = current_allocator(device);
  Ref<Storage> storage(new Storage(a.allocate(nbytes), nbytes, device, &a));
  observe_allocate(*storage);   // the thread's step observer, if any (src/core/step_observer.h)
  return storage;
}

void Storage::exchange_memory(Storage& other) {
  ENCORE_CHECK(nbytes_ == other.nbytes_ && device_ == other.device_,
               "Storage::exchange_memory: storages of %d bytes on %s and %d bytes on %s (need one size and device)",
               nbytes_, device_.str(), other.nbytes_, other.device_.str());
  std::swap(data_, other.data_);
  std::swap(allocator_, other.allocator_);
}

Ref<Storage> borrow_storage(void* data, int64_t nbytes, Device device) {
  return Ref<Storage>(new Storage(data, nbytes, device, nullptr));
}

Storage::~Storage() {
  if (allocator_ == nullptr) return;
  observe_free(*this);
  allocator_->deallocate(data_, nbytes_);
}

void throw_undefined_tensor(const char* accessor) {
  throw_error(absl::StatusCode::kInvalidArgument,
              absl::StrCat("Tensor::", accessor, " on an undefined tensor (a default-constructed Tensor, or grad() "
                           "before backward() reached the leaf): check defined() first"));
}

std::string shape_str(absl::Span<const int64_t> shape) {
  return absl::StrCat("[", absl::StrJoin(shape, ", "), "]");
}

int64_t Tensor::size(int64_t d) const {
  const int64_t n = dim();
  ENCORE_CHECK(d >= -n && d < n, "size: dim %d out of range for shape %s", d, shape_str(shape()));
  return shape()[d < 0 ? d + n : d];
}

void TensorImpl::compute_contiguous() {
  int64_t expected = 1;
  contiguous = true;
  for (int64_t d = static_cast<int64_t>(shape.size()) - 1; d >= 0; --d) {
    if (shape[d] == 1) continue;
    if (strides[d] != expected) {
      contiguous = numel_of(shape) == 0;
      return;
    }
    expected *= shape[d];
  }
}

template <typename T>
T* Tensor::data() const {
  ENCORE_CHECK(dtype_of<T> == dtype(), "data<%s>: tensor %s has dtype %s",
               dtype_name(dtype_of<T>), shape_str(shape()), dtype_name(dtype()));
  return static_cast<T*>(data_ptr());
}
template float* Tensor::data<float>() const;
template Half* Tensor::data<Half>() const;
template BFloat16* Tensor::data<BFloat16>() const;
template int32_t* Tensor::data<int32_t>() const;
template int64_t* Tensor::data<int64_t>() const;
template bool* Tensor::data<bool>() const;

}  // namespace encore

namespace encore {

Shape contiguous_strides(const char* op, absl::Span<const int64_t> shape) {
  Shape strides(shape.size());
  int64_t s = 1;
  for (int64_t d = static_cast<int64_t>(shape.size()) - 1; d >= 0; --d) {
    strides[d] = s;
    // Only an empty tensor gets here with a product that may not fit
    // ([0, 2^62, 4]): its elements fit, its strides would not.
    if (d > 0) {
      ENCORE_CHECK(!__builtin_mul_overflow(s, std::max<int64_t>(shape[d], 1), &s),
                   "%s: the strides of shape %s do not fit in int64", op, shape_str(shape));
    }
  }
  return strides;
}

Tensor empty(Shape shape, DType dtype, Device device) { return empty_for("empty", std::move(shape), dtype, device); }

Tensor empty_for(const char* op, Shape shape, DType dtype, Device device) {
  for (int64_t s : shape) {
    ENCORE_CHECK(s >= 0, "%s: negative size in shape %s (%s)", op, shape_str(shape), dtype_name(dtype));
  }
  ENCORE_CHECK(static_cast<int64_t>(shape.size()) <= kMaxDims, "%s: shape %s has more than %d dims", op,
               shape_str(shape), kMaxDims);
  const int64_t numel = checked_numel(op, shape);
  int64_t nbytes = 0;
  ENCORE_CHECK_CODE(!__builtin_mul_overflow(numel, dtype_size(dtype), &nbytes), kResourceExhausted,
                    "%s: shape %s of %s needs more than 2^63 bytes", op, shape_str(shape), dtype_name(dtype));
  auto impl = make_ref<TensorImpl>();
  impl->storage = Storage::allocate(nbytes, device);
  impl->strides = contiguous_strides(op, shape);
  impl->shape = std::move(shape);
  impl->dtype = dtype;
  return Tensor(std::move(impl));
}

// NOTE [ Shapes whose nonzero dims fit ]: the product of a shape's nonzero
// dims must fit in int64, empty or not. Then every product of some of its
// dims, in any order (numel, outer and inner counts, contiguous strides),
// fits too: before it meets a 0 it is a product of nonzero dims. Before, the
// product was checked left to right, so [2^63 - 1, 0, 3] was a tensor and
// [3, 2^63 - 1, 0] was refused, and the ops' products over the first
// (an inner count of 2^63 - 1 * 3) overflowed.
int64_t checked_numel(const char* op, absl::Span<const int64_t> shape) {
  int64_t n = 1;
  bool empty = false;
  for (int64_t s : shape) {
    empty = empty || s == 0;
    ENCORE_CHECK(s == 0 || !__builtin_mul_overflow(n, s, &n),
                 "%s: shape %s has more than 2^63 elements (or, if empty, its nonzero dims multiply past 2^63, so "
                 "its strides do not fit in int64)",
                 op, shape_str(shape));
  }
  return empty ? 0 : n;
}

// NOTE [ Views stay inside their storage ]: every view is checked where it
// is made: its elements' offsets, offset + sum((size - 1) * stride), are
// computed without overflow and, unless the view is empty, the lowest lies
// at or after the storage's first element and the highest ends inside it.
// Kernels index with these offsets unchecked, so no op can hand them a view
// that reaches past the bytes it owns. An empty view reaches no element;
// make_view gives it its base's offset (NOTE [ Shapes whose nonzero dims
// fit ]), which lies in the storage or at its end.
void check_view_bounds(const char* op, const Storage& storage, DType dtype, absl::Span<const int64_t> shape,
                       absl::Span<const int64_t> strides, int64_t offset) {
  int64_t lo = offset, hi = offset;   // elements reached, lowest and highest
  bool empty = false, ok = true;
  for (size_t d = 0; d < shape.size(); ++d) {
    if (shape[d] == 0) empty = true;
    int64_t span = 0;
    ok = ok && !__builtin_mul_overflow(std::max<int64_t>(shape[d] - 1, 0), strides[d], &span) &&
         !__builtin_add_overflow(span < 0 ? lo : hi, span, span < 0 ? &lo : &hi);
  }
  ENCORE_CHECK(ok, "%s: a view of shape %s with strides %s at offset %d has element offsets that overflow int64",
               op, shape_str(shape), shape_str(strides), offset);
  if (empty) return;
  const int64_t elements = storage.nbytes() / dtype_size(dtype);
  ENCORE_CHECK(lo >= 0 && hi < elements,
               "%s: a view of shape %s with strides %s at offset %d reaches elements [%d, %d] of a storage of %d "
               "%s elements", op, shape_str(shape), shape_str(strides), offset, lo, hi, elements, dtype_name(dtype));
}

Tensor make_view(const char* op, const Tensor& base, Shape shape, Shape strides, int64_t offset) {
  // Kernels carry shapes inline (kMaxDims): a view is held to empty()'s limit.
  ENCORE_CHECK(static_cast<int64_t>(shape.size()) <= kMaxDims, "%s: shape %s has more than %d dims", op,
               shape_str(shape), kMaxDims);
  // An empty view reaches no element: it keeps its base's offset, which
  // fits in bytes, rather than one its op computed (a slice of the empty
  // [3, 0, 2^61] at row 2 starts at element 2^62, byte 2^64, past what
  // data_ptr() can compute). NOTE [ Shapes whose nonzero dims fit ].
  if (checked_numel(op, shape) == 0) offset = base.storage_offset();
  check_view_bounds(op, *base.storage(), base.dtype(), shape, strides, offset);
  auto impl = make_ref<TensorImpl>();
  impl->storage = base.impl()->storage;
  impl->offset = offset;
  impl->shape = std::move(shape);
  impl->strides = std::move(strides);
  impl->dtype = base.dtype();
  impl->compute_contiguous();
  return Tensor(std::move(impl));
}

}  // namespace encore
