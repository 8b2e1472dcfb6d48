// encore::Tensor: an n-dimensional array on a device, with eager ops and
// reverse-mode autograd.
//
//   using namespace encore;
//   Tensor w = randn({3, 4}).requires_grad_();     // leaf that collects .grad()
//   Tensor x = from_vector<float>({1, 2, 3, 4}, {1, 4});
//   Tensor y = (x.matmul(w.t())).sum();            // ops run at once
//   y.backward();                                  // w.grad() is now [3, 4]
//   float v = y.item<float>();
//
// A Tensor is a cheap handle (one intrusive pointer). Copying a Tensor shares
// the same data; views (reshape, transpose, slice, expand, ...) share storage
// with their base. A default-constructed Tensor (and grad() before backward()
// reached the leaf) is undefined: defined() is false, requires_grad() is
// false, is_same() and printing ("tensor(undefined)") work, and every other
// accessor throws encore::Error (InvalidArgument) naming itself.
// NOTE [ Version counter ]: every Storage counts the in-place writes made to
// it (through any view). Autograd records the count when it saves a tensor
// for backward and refuses to use it if the count changed.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#include "absl/container/inlined_vector.h"
#include "absl/types/span.h"
#include "encore/device.h"
#include "encore/dtype.h"
#include "encore/error.h"
#include "encore/ref.h"

namespace encore {

// Sizes and strides, counted in elements (never bytes).
using Shape = absl::InlinedVector<int64_t, 5>;
inline constexpr int kMaxDims = 8;  // kernels carry shapes inline; more dims is an error

namespace autograd { class Node; class AccumulateGrad; }
class Allocator;

// A block of device memory. Owned by the tensors that view it; returned to the
// allocator it came from when the last one goes.
class Storage : public RefCounted {
 public:
  // Allocates nbytes through the device's current allocator (src/core/allocator.h).
  static Ref<Storage> allocate(int64_t nbytes, Device device);
  ~Storage();
  // Storage and TensorImpl objects come from a per-thread free list: eager
  // ops create and drop them at a high rate.
  static void* operator new(size_t size);
  static void operator delete(void* p, size_t size);

  void* data() const { return data_; }
  int64_t nbytes() const { return nbytes_; }
  Device device() const { return device_; }
  // NOTE [ Version counter ]: bumped by every in-place write through any view.
  uint32_t version() const { return version_; }
  void bump_version() { ++version_; }
  // Bumped when requires_grad_() changes the flag of a tensor on this
  // storage: that changes which kernels a step's backward launches, so a
  // captured graph compares it at every replay.
  uint32_t grad_flag_version() const { return grad_flag_version_; }
  void bump_grad_flag_version() { ++grad_flag_version_; }
  // Unique for the life of the process (never reused, unlike addresses).
  uint64_t id() const { return id_; }
  // Exchanges the memory blocks of two storages of the same size and device,
  // each with the allocator it goes back to; ids, versions and flags stay
  // with the objects. Every view of `*this` then reads `other`'s bytes and
  // the reverse. For GraphedStep: an output the caller still holds moves to
  // a copy while the graph's kernels keep writing the address they captured.
  void exchange_memory(Storage& other);

 private:
  friend Ref<Storage> borrow_storage(void* data, int64_t nbytes, Device device);   // src/core/tensor_internal.h
  Storage(void* data, int64_t nbytes, Device device, Allocator* allocator);
  void* data_;
  int64_t nbytes_;
  Device device_;
  Allocator* allocator_;
  uint32_t version_ = 0;
  uint32_t grad_flag_version_ = 0;
  uint64_t id_;
};

class Tensor;
struct TensorImpl;

class Tensor {
 public:
  Tensor() = default;  // undefined: holds nothing
  explicit Tensor(Ref<TensorImpl> impl) : impl_(std::move(impl)) {}

  // ---- metadata ----
  bool defined() const { return static_cast<bool>(impl_); }
  // The accessors below throw encore::Error (InvalidArgument) on an
  // undefined tensor, except requires_grad() (false), impl() (null) and
  // is_same().
  DType dtype() const;
  Device device() const;
  const Shape& shape() const;
  const Shape& strides() const;              // in elements
  int64_t dim() const { return static_cast<int64_t>(shape().size()); }
  int64_t size(int64_t d) const;             // negative d counts from the end
  int64_t numel() const;
  int64_t storage_offset() const;            // in elements
  bool is_contiguous() const;
  // The storage and the pointers below stay valid while some Tensor (or
  // other handle) holds the storage. On a CUDA tensor they are device
  // addresses, and nothing waits for the device's stream. Element i is at
  // data<T>() + i only when is_contiguous(); otherwise walk strides().
  Storage* storage() const;
  void* data_ptr() const;                    // first element (storage + offset)
  template <typename T> T* data() const;     // checks T against dtype()
  uint32_t version() const { return storage()->version(); }
  TensorImpl* impl() const { return impl_.get(); }
  bool is_same(const Tensor& o) const { return impl_ == o.impl_; }

  // ---- views: share storage with *this ----
  Tensor view(Shape shape) const;            // -1 infers one dim; needs compatible strides
  Tensor reshape(Shape shape) const;         // view when possible, else a copy
  Tensor transpose(int64_t d0, int64_t d1) const;
  Tensor t() const;                          // at most 2 dims, as torch.t; 0-D and 1-D: as is
  Tensor permute(Shape dims) const;
  Tensor slice(int64_t dim, int64_t start, int64_t end, int64_t step = 1) const;
  Tensor select(int64_t dim, int64_t index) const;   // drops dim
  Tensor expand(Shape shape) const;          // broadcast size-1 dims (stride 0)
  Tensor squeeze(int64_t dim) const;
  Tensor unsqueeze(int64_t dim) const;
  Tensor flatten() const { return reshape({-1}); }
  Tensor contiguous() const;                 // *this if already contiguous

  // ---- copies and conversion ----
  Tensor clone() const;
  Tensor to(DType dtype) const;
  Tensor to(Device device) const;
  Tensor detach() const;                     // same data, no autograd history

  // ---- in-place (bump the version counter) ----
  // copy_ and add_ refuse (encore::Error, InvalidArgument) a source that
  // shares memory with this tensor without being the very same view
  // (a[1:] += a[:-1]): clone() it first. The same view (x.add_(x)) is fine.
  Tensor& copy_(const Tensor& src);          // src broadcast to shape(); dtype converted
  Tensor& fill_(double value);                // as full(): value must fit dtype
  Tensor& zero_() { return fill_(0.0); }
  Tensor& add_(const Tensor& other, double alpha = 1.0);   // this += alpha * other
  Tensor& mul_(double value);

  // ---- host access (synchronises; refused inside capture) ----
  template <typename T> T item() const;
  template <typename T> std::vector<T> to_vector() const;
  std::string to_string() const;             // shape, dtype, device and values

  // ---- autograd ----
  bool requires_grad() const;
  Tensor& requires_grad_(bool on = true);   // leaves only; true on a non-leaf is a no-op
  bool is_leaf() const;
  Tensor grad() const;                       // undefined until backward() reaches it
  // g: this tensor's shape, dtype and device, not broadcast, and not already
  // another tensor's .grad() (NOTE [ One leaf per gradient ]); undefined clears.
  void set_grad(const Tensor& g);
  std::shared_ptr<autograd::Node> grad_fn() const;
  // Back-propagates from this tensor. A scalar needs no gradient; otherwise
  // pass one of this tensor's shape. retain_graph keeps saved tensors so that
  // backward can run again through the same graph.
  void backward(const Tensor& gradient = Tensor(), bool retain_graph = false) const;

  // ---- method forms of common ops (see ops.h) ----
  Tensor matmul(const Tensor& o) const;
  Tensor sum() const;
  Tensor mean() const;

 private:
  // *impl_, or encore::Error naming `accessor` when this tensor is undefined.
  TensorImpl& checked_impl(const char* accessor) const;
  Ref<TensorImpl> impl_;
};

// Throws encore::Error (InvalidArgument): `accessor` called on an undefined tensor.
[[noreturn]] void throw_undefined_tensor(const char* accessor);

// Autograd state of one tensor; absent until autograd first touches it.
struct AutogradMeta {
  static void* operator new(size_t size);
  static void operator delete(void* p, size_t size);
  ~AutogradMeta();
  Tensor grad;                                        // accumulated gradient (leaves)
  std::shared_ptr<autograd::Node> grad_fn;            // creator (non-leaves)
  // NOTE [ Leaf accumulators ]: a leaf owns its AccumulateGrad node, which
  // points back at the leaf without owning it; ~AutogradMeta detaches it, so
  // a graph that outlives its leaf drops that leaf's gradient instead of
  // writing to freed memory.
  std::shared_ptr<autograd::AccumulateGrad> grad_accumulator;
  int32_t output_nr = 0;                              // which output of grad_fn
  bool requires_grad = false;
  // NOTE [ Lazy zero_grad ]: zero_grad() only sets this. The next gradient
  // accumulated into `grad` overwrites it (a copy instead of a fill plus an
  // add); Tensor::grad() fills the zeros first if someone reads it before.
  // The storage of `grad` never changes, so captured graphs keep pointing at
  // it. The flag decides on the host which kernels backward() issues, so a
  // captured step checks it at every replay (a precondition) and sets it as
  // the step would: encore code reads and writes it only through
  // read_grad_zero_pending / write_grad_zero_pending (src/core/step_observer.h),
  // which report to the step's observer.
  bool grad_zero_pending_ = false;
  // The set of post-accumulate hooks the leaf has (encore/autograd.h), as a
  // sum of a hash of each hook's id (ids are never reused; 0: none): which
  // hooks a leaf has decides which kernels backward() issues, so a captured
  // step checks it at every replay (NOTE [ A leaf's gradient state ] in
  // src/core/step_observer.h). A hook added and removed leaves it as it was.
  uint64_t hooks_key = 0;
};

// The data behind a Tensor handle. Internal: use Tensor's methods.
struct TensorImpl : RefCounted {
  static void* operator new(size_t size);
  static void operator delete(void* p, size_t size);
  Ref<Storage> storage;
  int64_t offset = 0;   // in elements from storage->data()
  Shape shape;          // in elements
  Shape strides;        // in elements; stride 0 = broadcast
  DType dtype = kFloat32;
  bool contiguous = true;   // cached: row-major dense (size-1 dims ignored); see compute_contiguous
  // This tensor is some leaf's .grad(): set_grad refuses to give it to a
  // second leaf (NOTE [ Lazy zero_grad ] writes a gradient in place).
  bool is_leaf_grad = false;
  std::unique_ptr<AutogradMeta> autograd;

  // Recomputes `contiguous` after shape or strides change.
  void compute_contiguous();
};

inline TensorImpl& Tensor::checked_impl(const char* accessor) const {
  if (!impl_) [[unlikely]] throw_undefined_tensor(accessor);
  return *impl_;
}
inline DType Tensor::dtype() const { return checked_impl("dtype()").dtype; }
inline Device Tensor::device() const { return checked_impl("device()").storage->device(); }
inline const Shape& Tensor::shape() const { return checked_impl("shape()").shape; }
inline const Shape& Tensor::strides() const { return checked_impl("strides()").strides; }
inline int64_t Tensor::storage_offset() const { return checked_impl("storage_offset()").offset; }
inline bool Tensor::is_contiguous() const { return checked_impl("is_contiguous()").contiguous; }
inline bool Tensor::requires_grad() const {
  const AutogradMeta* m = impl_ ? impl_->autograd.get() : nullptr;
  return m != nullptr && m->requires_grad;
}
inline Storage* Tensor::storage() const { return checked_impl("storage()").storage.get(); }
inline void* Tensor::data_ptr() const {
  const TensorImpl& impl = checked_impl("data_ptr()");
  return static_cast<char*>(impl.storage->data()) + impl.offset * dtype_size(impl.dtype);
}
inline int64_t numel_of(absl::Span<const int64_t> shape) {
  int64_t n = 1;
  for (int64_t s : shape) n *= s;
  return n;
}
inline int64_t Tensor::numel() const { return numel_of(checked_impl("numel()").shape); }

// Host reads of bool go through i32; doubles through f32 (floats) or i64.
template <> bool Tensor::item<bool>() const;
template <> double Tensor::item<double>() const;
template <> std::vector<double> Tensor::to_vector<double>() const;

// ---- creation ----
// Every creation function allocates fresh, contiguous memory.
Tensor empty(Shape shape, DType dtype = kFloat32, Device device = kCPU);
Tensor zeros(Shape shape, DType dtype = kFloat32, Device device = kCPU);
Tensor ones(Shape shape, DType dtype = kFloat32, Device device = kCPU);
// value must fit dtype, as in PyTorch: integers truncate toward zero within
// range; a finite value past a float dtype's largest (65504 for f16) is refused.
Tensor full(Shape shape, double value, DType dtype = kFloat32, Device device = kCPU);
inline Tensor empty(Shape shape, Device device) { return empty(std::move(shape), kFloat32, device); }
inline Tensor zeros(Shape shape, Device device) { return zeros(std::move(shape), kFloat32, device); }
inline Tensor ones(Shape shape, Device device) { return ones(std::move(shape), kFloat32, device); }
// [start, end) in steps of step; i64 unless dtype says otherwise.
Tensor arange(int64_t start, int64_t end, int64_t step = 1, DType dtype = kInt64, Device device = kCPU);
inline Tensor arange(int64_t end) { return arange(0, end); }
// Integers only: arange(0, 1, 0.1) or arange(0.5, 3.5) would truncate their
// arguments to integers silently, so they do not compile. For a float range,
// scale an integer one: arange(0, 10, 1, kFloat32) * 0.1.
template <typename A, typename B, typename C = int64_t>
  requires(std::is_floating_point_v<A> || std::is_floating_point_v<B> || std::is_floating_point_v<C>)
Tensor arange(A start, B end, C step = 1, DType dtype = kInt64, Device device = kCPU) = delete;
template <typename A>
  requires std::is_floating_point_v<A>
Tensor arange(A end) = delete;
// Copies host values into a tensor of `shape` (an empty shape {} with one
// value makes a 0-d tensor).
template <typename T>
Tensor from_vector(const std::vector<T>& values, Shape shape, Device device = kCPU);
// Without a shape: 1-D [values.size()] on the CPU.
template <typename T>
Tensor from_vector(const std::vector<T>& values) {
  return from_vector<T>(values, Shape{static_cast<int64_t>(values.size())}, kCPU);
}
Tensor scalar_tensor(double value, DType dtype = kFloat32, Device device = kCPU);  // 0-d

// Printing: "tensor([[1, 2], [3, 4]], shape=[2, 2], dtype=f32, device=cpu)",
// with ", requires_grad=true" when set; an undefined tensor prints
// "tensor(undefined)".
std::ostream& operator<<(std::ostream& os, const Tensor& t);
std::string shape_str(absl::Span<const int64_t> shape);   // "[2, 3]"

}  // namespace encore
