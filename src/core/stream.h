// Stream: the one path every kernel, library call and copy takes.
//
// A launch names its op, carries its kernel's arguments by value (a trivially
// copyable struct: pointers, sizes, scalars) and lists the storages it reads
// and writes. Eagerly the kernel runs at once. When a step observer is
// installed (src/core/step_observer.h: capture/'s recorder, the profiler) it
// sees every launch first: that single hook is what makes recording,
// planning, capture and profiling possible.
//
//   struct ScaleArgs {
//     float* x; int64_t n; float s;
//     template <typename V> void fields(V& v) const { v("x", x); v("n", n); v("s", s); }   // kernel_args.h
//   };
//   void scale_kernel(const ScaleArgs& a) { for (int64_t i = 0; i < a.n; ++i) a.x[i] *= a.s; }
//   current_stream(kCPU).launch(kernel<&scale_kernel>(), "scale", ScaleArgs{p, n, 2.f}, {}, {storage});
//
// Backends name their kernels in a kernel table (src/backends/kernel_table.h)
// and the device-neutral host side of each kernel family launches an entry of
// the table of the output's device: the same call for every backend.
//
// On CPU a stream is synchronous: launch() returns after the kernel ran.
#pragma once

#include <atomic>
#include <cstdint>
#include <initializer_list>
#include <thread>
#include <type_traits>

#include "absl/types/span.h"
#include "encore/tensor.h"
#include "src/core/kernel.h"
#include "src/core/step_observer.h"

namespace encore {

class Stream {
 public:
  explicit Stream(Device device) : device_(device) {}
  Device device() const { return device_; }

  template <typename Args>
  void launch(Kernel<Args> kernel, const char* op, const Args& args, std::initializer_list<Storage*> reads,
              std::initializer_list<Storage*> writes) {
    launch_many(kernel, op, args, absl::MakeConstSpan(reads.begin(), reads.size()),
                absl::MakeConstSpan(writes.begin(), writes.size()));
  }
  // The same with read and write lists built at run time (a kernel over many
  // tensors, e.g. one optimizer update for every parameter).
  template <typename Args>
  void launch_many(Kernel<Args> kernel, const char* op, const Args& args, absl::Span<Storage* const> reads,
                   absl::Span<Storage* const> writes) {
    static_assert(std::is_trivially_copyable_v<Args>, "kernel args are copied into graphs");
    if (observer_.load(std::memory_order_acquire) != nullptr) [[unlikely]] {
      if (StepObserver* o = watching(op); o != nullptr) {
        LaunchRecord rec{op,   device_, kernel.thunk_for(args), &args, sizeof(Args), &collect_arg_fields_of<Args>,
                         reads, writes};
        if (!o->on_launch(rec)) return;
        return rec.thunk(&args);
      }
    }
    kernel.thunk_for(args)(&args);
  }
  // The same for a kernel named at compile time: launch<&scale_kernel>(...).
  template <auto Fn, typename Args>
  void launch(const char* op, const Args& args, std::initializer_list<Storage*> reads,
              std::initializer_list<Storage*> writes) {
    launch(kernel<Fn>(), op, args, reads, writes);
  }
  template <auto Fn, typename Args>
  void launch_many(const char* op, const Args& args, absl::Span<Storage* const> reads,
                   absl::Span<Storage* const> writes) {
    launch_many(kernel<Fn>(), op, args, reads, writes);
  }

  // Call before the host touches device data: lets observers refuse it, and
  // waits for queued work on asynchronous devices.
  void host_access(const char* op);
  // Call before a write whose value comes from the host but which runs as a
  // kernel on this stream (set_lr's fill): lets observers refuse it (a
  // captured graph would freeze the value) and does NOT wait: stream order
  // already puts the write after the queued work, so a replay loop that sets
  // the learning rate every step stays asynchronous.
  void host_write(const char* op);
  void synchronize();

  // NOTE [ Observers belong to a thread ]: an observer sees the launches and
  // host accesses of the thread that installed it. Another thread's work on
  // the same stream meanwhile (a data loader, say) runs unobserved on CPU,
  // where a launch runs in its caller and so stays out of the observed step;
  // on CUDA it is refused (encore::Error, FailedPrecondition), because it
  // would join the stream capture or the recording of the observing thread.
  // Observers are installed by StepObserverScope (src/core/step_observer.h).
  StepObserver* observer() const { return observer_.load(std::memory_order_acquire); }
  // True when an observer installed by the calling thread is watching.
  bool observed_here() const;

 private:
  friend class StepObserverScope;
  // Installs `observer` for `thread`'s work (nullptr removes it).
  void set_observer(StepObserver* observer, std::thread::id thread);
  std::thread::id observer_thread() const { return observer_thread_.load(std::memory_order_relaxed); }

  // The observer for the calling thread's launch or host access `op`:
  // NOTE [ Observers belong to a thread ].
  StepObserver* watching(const char* op);

  Device device_;
  std::atomic<StepObserver*> observer_{nullptr};
  std::atomic<std::thread::id> observer_thread_{};   // the thread that installed observer_
};

// The stream encore's ops use on `device` (one per device).
Stream& current_stream(Device device);

}  // namespace encore
