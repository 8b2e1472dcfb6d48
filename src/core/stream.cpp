#include "src/core/stream.h"

#include <array>
#include <atomic>
#include <mutex>

#include "encore/error.h"
#include "src/core/kernel_errors.h"
// NOTE [ Backends seen from core ]: core reaches the CUDA runtime (the
// current device, synchronization, the caching allocator, the error word)
// through the DeviceRuntime table it declares (src/core/device_runtime.h) and
// the backends define at link time: never by including a backend. A table
// found at link time, not a registry filled by static initializers: a static
// library drops self-registering objects that nothing references.
#include "src/core/device_runtime.h"

namespace encore {

void Stream::set_observer(StepObserver* observer, std::thread::id thread) {
  observer_thread_.store(thread, std::memory_order_relaxed);
  observer_.store(observer, std::memory_order_release);
}

bool Stream::observed_here() const {
  return observer_.load(std::memory_order_acquire) != nullptr &&
         observer_thread_.load(std::memory_order_relaxed) == std::this_thread::get_id();
}

StepObserver* Stream::watching(const char* op) {
  StepObserver* o = observer_.load(std::memory_order_acquire);
  if (o == nullptr || observer_thread_.load(std::memory_order_relaxed) == std::this_thread::get_id()) return o;
  ENCORE_CHECK_CODE(!device_.is_cuda(), kFailedPrecondition,
                    "%s on %s from another thread while capture() (or a profiler) on its own thread watches this "
                    "device's stream: the work would join the captured step. Keep other threads off %s until it "
                    "returns", op, device_.str(), device_.str());
  return nullptr;   // CPU: runs in this thread, outside the observed step
}

void Stream::host_access(const char* op) {
  if (StepObserver* o = watching(op); o != nullptr) o->on_host_access(op);
  synchronize();
}

void Stream::host_write(const char* op) {
  if (StepObserver* o = watching(op); o != nullptr) o->on_host_access(op);
}

void Stream::synchronize() {
  // CPU streams run each launch to completion.
  if (device_.is_cuda()) {
    cuda_runtime().synchronize(device_.index);
    // Reports of the kernels just waited for (NOTE [ Kernel error words ]).
    // While observed (capture()'s recorded warm-up) they stay in the word:
    // capture() takes them after the run and names the recorded step.
    if (observer_.load(std::memory_order_acquire) == nullptr) {
      throw_kernel_errors(take_kernel_errors(device_, /*wait=*/false), device_);
    }
  }
}

Stream& current_stream(Device device) {
  static Stream cpu_stream(kCPU);
  if (device.is_cpu()) [[likely]] return cpu_stream;
  // One encore stream per CUDA device; selecting it makes the device current
  // on this thread, so launchers find it through cuda::active_stream().
  static std::array<std::atomic<Stream*>, 64> cuda_streams{};
  static std::mutex create_mu;
  ENCORE_CHECK(device.index >= 0 && device.index < 64, "no stream for device %s", device.str());
  cuda_runtime().set_device(device.index);
  std::atomic<Stream*>& slot = cuda_streams[device.index];
  Stream* s = slot.load(std::memory_order_acquire);
  if (s == nullptr) [[unlikely]] {
    std::lock_guard<std::mutex> lock(create_mu);
    s = slot.load(std::memory_order_relaxed);
    if (s == nullptr) slot.store(s = new Stream(device), std::memory_order_release);   // never destroyed
  }
  return *s;
}

}  // namespace encore
