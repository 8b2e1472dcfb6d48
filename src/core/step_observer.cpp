#include "src/core/step_observer.h"

#include "src/core/stream.h"

namespace encore {

std::optional<Device> usable_gpu() {
  if (!cuda_available()) return std::nullopt;
  return Device::cuda(0);
}

StepObserverScope::StepObserverScope(StepObserver* observer)
    : saved_allocations_(observer_internal::allocations) {
  // current_stream() may throw (a CUDA device that fails to start): before
  // anything is installed or counted, so a failed scope leaves nothing behind.
  saved_[0].stream = &current_stream(kCPU);
  if (const std::optional<Device> gpu = usable_gpu(); gpu.has_value()) saved_[1].stream = &current_stream(*gpu);
  // A thread sees its own increment before its allocations: relaxed suffices.
  observer_internal::scopes.fetch_add(1, std::memory_order_relaxed);
  for (Saved& s : saved_) {
    if (s.stream == nullptr) continue;
    s.observer = s.stream->observer();
    s.thread = s.stream->observer_thread();
    s.stream->set_observer(observer, std::this_thread::get_id());
  }
  observer_internal::allocations = observer;
}

StepObserverScope::~StepObserverScope() {
  observer_internal::allocations = saved_allocations_;
  for (const Saved& s : saved_) {
    if (s.stream != nullptr) s.stream->set_observer(s.observer, s.thread);
  }
  observer_internal::scopes.fetch_sub(1, std::memory_order_relaxed);
}

}  // namespace encore
