// The references graphs hold to persistent objects (the storages a graph
// guards, the TensorImpls and HostFlags of its host conditions, the
// TensorImpls of its outputs), counted per object across every graph of
// the process, so that replay() can tell whether anything but graphs still
// holds an object: its user freed or replaced it when nothing does.
//
//   capture_internal::Held<Storage> s(storage);          // a reference, counted
//   capture_internal::HeldTensor out(t.detach());        // an output handle, counted
//   capture_internal::HoldCheck check;                   // one lock for a series of questions
//   if (!check.elsewhere(s)) { /* only graphs hold it: freed or replaced since capture */ }
//
// NOTE [ Counting the graphs' own references ]: replay() tells a freed
// tensor by reference counts. Every graph that touches a persistent storage
// holds a reference to it, so "more references than this graph's one" was
// blind as soon as two graphs guarded the same storage (a train and an eval
// graph over one model, GraphedStep's graphs of two shapes): each saw the
// other's reference. So each graph reference is a Held<T>, counted per
// object in one process-wide table, and an object is alive for its user
// when its use count exceeds the graphs' references to it. A storage is
// also referenced by the TensorImpls over it, and a graph holds a
// parameter's TensorImpl for its zero_grad flag: a TensorImpl that only
// graphs hold counts as a graph's reference to its storage too. A graph's
// outputs are counted TensorImpls as well (HeldTensor): a persistent tensor
// the step returned is held as a detached TensorImpl over its storage,
// which only graphs hold unless the user copied the handle, so once the
// user's own tensor is gone the graph refuses like any other. Two
// references a graph keeps are not counted: the tensors of
// CaptureOptions::inputs (replay(data) copies into them whatever the
// variables hold, so they are the graph's to keep; replay() checks the
// variables instead), and the step itself under verify_every, whose
// closure may hold tensors by value where nothing can count them
// (include/encore/capture.h, "Not seen").
#pragma once

#include <type_traits>
#include <utility>

#include "encore/ref.h"
#include "encore/tensor.h"

namespace encore {

struct HostFlag;

namespace capture_internal {

struct HoldNode;   // one object's entry in the table (held.cpp)

// Registers and unregisters one graph reference to `object` (`impl` when it
// is a TensorImpl, so that it counts towards its storage).
HoldNode* add_hold(const void* object, const TensorImpl* impl);
void drop_hold(HoldNode* node);

// A Ref<T> that a graph holds, counted. T is Storage, TensorImpl or HostFlag.
template <typename T>
class Held {
 public:
  Held() = default;
  explicit Held(T* p) : ref_(p), node_(p != nullptr ? add_hold(p, impl_of(p)) : nullptr) {}
  Held(const Held& o) : Held(o.get()) {}
  Held(Held&& o) noexcept : ref_(std::move(o.ref_)), node_(std::exchange(o.node_, nullptr)) {}
  Held& operator=(Held o) noexcept {
    ref_.swap(o.ref_);
    std::swap(node_, o.node_);
    return *this;
  }
  // Unregisters before the reference goes, so that no entry outlives its object.
  ~Held() {
    if (node_ != nullptr) drop_hold(node_);
  }

  T* get() const { return ref_.get(); }
  T* operator->() const { return ref_.get(); }
  T& operator*() const { return *ref_; }
  explicit operator bool() const { return static_cast<bool>(ref_); }
  const Ref<T>& ref() const { return ref_; }
  HoldNode* node() const { return node_; }

 private:
  static const TensorImpl* impl_of(const T* p) {
    if constexpr (std::is_same_v<T, TensorImpl>) {
      return p;
    } else {
      return nullptr;
    }
  }
  Ref<T> ref_;
  HoldNode* node_ = nullptr;
};

// A tensor handle a graph holds (a step output), counted as a graph's
// reference to its TensorImpl, as Held<TensorImpl> is.
class HeldTensor {
 public:
  HeldTensor() = default;
  explicit HeldTensor(Tensor t) : t_(std::move(t)), node_(t_.defined() ? add_hold(t_.impl(), t_.impl()) : nullptr) {}
  HeldTensor(const HeldTensor& o) : HeldTensor(o.t_) {}
  HeldTensor(HeldTensor&& o) noexcept : t_(std::move(o.t_)), node_(std::exchange(o.node_, nullptr)) {}
  HeldTensor& operator=(HeldTensor o) noexcept {
    std::swap(t_, o.t_);
    std::swap(node_, o.node_);
    return *this;
  }
  // Unregisters before the handle goes, as ~Held does.
  ~HeldTensor() {
    if (node_ != nullptr) drop_hold(node_);
  }

  const Tensor& get() const { return t_; }

 private:
  Tensor t_;
  HoldNode* node_ = nullptr;
};

// Answers, under the table's lock (held for the object's lifetime), whether
// anything but graphs holds an object: a handle of the user's, a module's
// parameter list, an optimizer.
class HoldCheck {
 public:
  HoldCheck();
  ~HoldCheck();
  HoldCheck(const HoldCheck&) = delete;
  HoldCheck& operator=(const HoldCheck&) = delete;

  // A storage's references, less the graphs' and those of TensorImpls over
  // it that only graphs hold.
  bool elsewhere(const Held<Storage>& s) const;
  bool elsewhere(const Held<TensorImpl>& t) const;
  bool elsewhere(const Held<HostFlag>& f) const;
};

}  // namespace capture_internal
}  // namespace encore
