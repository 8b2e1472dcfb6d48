// The step observer: one interface through which recording, capture,
// profiling and tests watch the work of a step (kernel launches, host reads,
// allocations and frees), and the one scope that installs it.
//
//   class CountLaunches final : public encore::StepObserver {
//    public:
//     bool on_launch(const encore::LaunchRecord& launch) override { ++launches; return true; }   // true: run it
//     int launches = 0;
//   };
//   CountLaunches count;
//   {
//     encore::StepObserverScope observe(&count);   // every stream the step may use, and this thread's
//     loss = step();                               //   allocations; what was installed before comes back
//   }                                              //   at the end of the scope
//
// Who calls the hooks: Stream::launch (on_launch), Stream::host_access and
// host_write (on_host_access), Storage::allocate and ~Storage (on_allocate,
// on_free). NOTE [ Observers belong to a thread ] (src/core/stream.h): an
// observer sees the work of the thread that installed it.
#pragma once

#include <atomic>
#include <cstdint>
#include <optional>
#include <thread>
#include <vector>

#include "absl/types/span.h"
#include "encore/device.h"
#include "encore/tensor.h"
#include "src/core/kernel.h"
#include "src/core/kernel_args.h"

namespace encore {

class Stream;
struct HostFlag;   // NOTE [ Host flags ], below

struct LaunchRecord {
  const char* op;                       // static string, e.g. "add"
  Device device;                        // the stream's device
  KernelThunk thunk;
  const void* args;                     // valid only during the observer call
  uint32_t args_size;                   // bytes
  // Appends what the bytes of `args` are (src/core/kernel_args.h). Called
  // only by observers that compare or report arguments (capture), so those
  // that only time launches (the profiler) pay nothing for it.
  void (*collect_fields)(const void* args, std::vector<ArgField>& out);
  absl::Span<Storage* const> reads;
  absl::Span<Storage* const> writes;
};

class StepObserver {
 public:
  virtual ~StepObserver() = default;
  // Sees a launch before it runs. Return true to run it now; false when the
  // observer took it (CPU capture appends it to a graph instead, a profiler
  // runs it itself between two clock reads).
  virtual bool on_launch(const LaunchRecord& launch) = 0;
  // Sees a host read or host-to-device transfer (item, to_vector, printing,
  // from_vector, synchronize, set_lr) before it happens; may throw
  // encore::Error to refuse it.
  virtual void on_host_access(const char* op) {}
  // Sees every allocation of the observing thread (Storage::allocate, on any
  // device) once it is made: the new storage (data(), nbytes(), device(),
  // and id(), unique for the life of the process).
  virtual void on_allocate(const Storage& storage) {}
  // Sees every free by the observing thread of a storage Storage::allocate
  // made, before its memory goes back to its allocator (possibly a storage
  // allocated before the observer was installed). Match it to on_allocate by
  // id(), never by data(): memory is reused, and a view that outlived its
  // owner (a Graph's output) may point at a block that now holds another
  // storage.
  virtual void on_free(const Storage& storage) {}
  // Sees host state that decides which kernels the step issues being read
  // or written by the observing thread: today autograd's lazy zero_grad flag
  // of the leaf `owner` (NOTE [ Lazy zero_grad ] in encore/tensor.h; read
  // and written only through read_grad_zero_pending / write_grad_zero_pending
  // below). `value` is the flag's value read, or the value about to be
  // written (the owner still holds the value before). A
  // captured graph turns what its step reads first into a precondition of
  // replay() and what it writes last into the state a replay leaves.
  virtual void on_host_state(TensorImpl& owner, bool write, bool value) {}
  // The same for a HostFlag (NOTE [ Host flags ]): `value` is the value
  // read, or the value about to be written.
  virtual void on_host_flag(HostFlag& flag, bool write, bool value) {}
  // NOTE [ A leaf's gradient state ]: whether a leaf has a gradient, whether
  // it requires one and which post-accumulate hooks it has decide on the
  // host which kernels a step issues (an optimizer and zero_grad skip a
  // parameter without a gradient; backward runs the hooks), so code that
  // decides on them, or changes them, first reports the leaf here
  // (observe_leaf_state, below: Tensor::grad() and autograd::zero_grad() of
  // a leaf, backward's accumulation into one (`accumulates`: its hooks run
  // there), and before requires_grad_(), set_grad() and a hook registered
  // or removed change it). A captured graph makes the state before the step
  // a precondition of replay(), and refuses a step that leaves it changed.
  virtual void on_leaf_state(TensorImpl& leaf, bool accumulates) {}
};

// Installs `observer` for the calling thread's step: on the stream of every
// device a step may use (the CPU's, and usable_gpu()'s), with this thread as
// their observing thread, and for this thread's allocations and frees.
// Restores on exit exactly what was installed before (observer and observing
// thread of each stream, and the allocation observer), so scopes nest: an
// inner observer sees everything while it is installed, the outer one again
// after it. nullptr installs "nobody watches" for the scope.
//
// The observer must outlive the scope. Scopes are strictly nested on a
// thread (RAII); two threads installing on the same stream at once is not
// supported (the stream keeps one observer: the later scope wins).
class StepObserverScope {
 public:
  explicit StepObserverScope(StepObserver* observer);
  ~StepObserverScope();
  StepObserverScope(const StepObserverScope&) = delete;
  StepObserverScope& operator=(const StepObserverScope&) = delete;

 private:
  struct Saved {
    Stream* stream = nullptr;
    StepObserver* observer = nullptr;
    std::thread::id thread;
  };
  Saved saved_[2];                     // the CPU's stream, and usable_gpu()'s when there is one
  StepObserver* saved_allocations_;    // this thread's allocation observer before the scope
};

// The GPU a step may use: cuda:0 when the CUDA backend is built and a GPU
// answers (one GPU per process, DESIGN.md "Distributed"); nullopt otherwise.
std::optional<Device> usable_gpu();

// ---- called by the allocation path (Storage::allocate, ~Storage) ----

namespace observer_internal {
// StepObserverScopes alive in the process, on any thread: while there are
// none (eager training) the allocation path skips the thread-local read, as
// Stream::launch skips its observer check.
inline std::atomic<int> scopes{0};
// The calling thread's allocation observer: set only by StepObserverScope.
inline thread_local StepObserver* allocations = nullptr;
// Calls f(observer) for the calling thread's observer, if any (one relaxed
// load while no scope is alive anywhere).
template <typename F>
inline void notify(F&& f) {
  if (scopes.load(std::memory_order_relaxed) != 0) [[unlikely]] {
    if (StepObserver* o = allocations; o != nullptr) f(*o);
  }
}
}  // namespace observer_internal

inline void observe_allocate(const Storage& storage) {
  observer_internal::notify([&](StepObserver& o) { o.on_allocate(storage); });
}
inline void observe_free(const Storage& storage) {
  observer_internal::notify([&](StepObserver& o) { o.on_free(storage); });
}

// NOTE [ Lazy zero_grad ]'s flag, read and written only through these two,
// so that a step observer sees every use (StepObserver::on_host_state).
// `owner` is the leaf whose AutogradMeta holds the flag; it must have one.
inline bool read_grad_zero_pending(TensorImpl& owner) {
  const bool value = owner.autograd->grad_zero_pending_;
  observer_internal::notify([&](StepObserver& o) { o.on_host_state(owner, false, value); });
  return value;
}
inline void write_grad_zero_pending(TensorImpl& owner, bool value) {
  observer_internal::notify([&](StepObserver& o) { o.on_host_state(owner, true, value); });   // sees the value before
  owner.autograd->grad_zero_pending_ = value;
}

// NOTE [ A leaf's gradient state ]: `leaf` (a tensor with autograd
// metadata and no grad_fn) is about to be used by code whose kernels depend
// on its gradient's presence, its requires_grad or its hooks.
inline void observe_leaf_state(TensorImpl& leaf, bool accumulates = false) {
  observer_internal::notify([&](StepObserver& o) { o.on_leaf_state(leaf, accumulates); });
}

// NOTE [ Host flags ]: a bool on the host, outside any tensor, that decides
// which kernels a step launches: today a module's training mode
// (nn::Module::train / eval: dropout runs or not, batch norm uses the batch's
// statistics or the running ones). Modules keep it in a HostFlag, read and
// written only through read_host_flag / write_host_flag, which report to the
// step's observer (StepObserver::on_host_flag), so that a captured graph
// checks what its step read at every replay, as it does the lazy zero_grad
// flag (NOTE [ Host state as a precondition ] in capture/graph_impl.h).
// Shared by reference: a graph keeps the flag alive and knows its owner is
// gone when only graphs hold references to it.
struct HostFlag : RefCounted {
  bool value = false;
  const char* what = "";        // for messages, e.g. "the training mode of a module"
  const char* when_true = "on";   // the value's names in messages, e.g. "train()"
  const char* when_false = "off";
};

inline bool read_host_flag(HostFlag& flag) {
  const bool value = flag.value;
  observer_internal::notify([&](StepObserver& o) { o.on_host_flag(flag, false, value); });
  return value;
}
inline void write_host_flag(HostFlag& flag, bool value) {
  observer_internal::notify([&](StepObserver& o) { o.on_host_flag(flag, true, value); });   // sees the value before
  flag.value = value;
}

}  // namespace encore
