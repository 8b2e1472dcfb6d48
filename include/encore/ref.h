// Ref<T>: an intrusive, thread-safe reference-counted pointer for encore's
// internal objects (Storage, TensorImpl). One allocation per object, one word
// of count, no control block.
//
//   struct Foo : encore::RefCounted { int x = 0; };
//   encore::Ref<Foo> p = encore::make_ref<Foo>();
//   encore::Ref<Foo> q = p;   // count 2; the Foo is deleted when both go.
#pragma once

#include <atomic>
#include <cstdint>
#include <utility>

namespace encore {

class RefCounted {
 public:
  RefCounted() = default;
  RefCounted(const RefCounted&) = delete;
  RefCounted& operator=(const RefCounted&) = delete;
  int32_t use_count() const { return refs_.load(std::memory_order_relaxed); }

 protected:
  ~RefCounted() = default;

 private:
  template <typename T> friend class Ref;
  mutable std::atomic<int32_t> refs_{0};
};

template <typename T>
class Ref {
 public:
  Ref() = default;
  // Shares ownership of `p`, which must come from `new` (the last Ref
  // deletes it).
  explicit Ref(T* p) : p_(p) { retain(); }
  Ref(const Ref& o) : p_(o.p_) { retain(); }
  Ref(Ref&& o) noexcept : p_(std::exchange(o.p_, nullptr)) {}
  ~Ref() { release(); }
  Ref& operator=(const Ref& o) { Ref(o).swap(*this); return *this; }
  Ref& operator=(Ref&& o) noexcept { Ref(std::move(o)).swap(*this); return *this; }
  void swap(Ref& o) noexcept { std::swap(p_, o.p_); }
  void reset() { Ref().swap(*this); }

  T* get() const { return p_; }
  T* operator->() const { return p_; }
  T& operator*() const { return *p_; }
  explicit operator bool() const { return p_ != nullptr; }
  friend bool operator==(const Ref& a, const Ref& b) { return a.p_ == b.p_; }

 private:
  void retain() { if (p_) p_->refs_.fetch_add(1, std::memory_order_relaxed); }
  void release() {
    if (p_ && p_->refs_.fetch_sub(1, std::memory_order_acq_rel) == 1) delete p_;
  }
  T* p_ = nullptr;
};

template <typename T, typename... Args>
Ref<T> make_ref(Args&&... args) { return Ref<T>(new T(std::forward<Args>(args)...)); }

}  // namespace encore
