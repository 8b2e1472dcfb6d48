#include "src/backends/cuda/runtime.h"

#include <array>
#include <mutex>
#include <utility>

#include "encore/error.h"
#include "src/backends/cuda/allocator.h"
#include "src/core/device_runtime.h"

namespace encore::cuda {
namespace {

thread_local bool tls_programmatic_launch = false;
thread_local cudaError_t tls_launch_error = cudaSuccess;   // from launch_kernel, for the next check_launch

void clear_noted_launch_error() { tls_launch_error = cudaSuccess; }

constexpr int kMaxDevices = 64;
thread_local int tls_device = -1;                 // the device this thread selected through set_device
thread_local cudaStream_t tls_stream = nullptr;   // encore's stream on tls_device

std::mutex streams_mu;
std::array<cudaStream_t, kMaxDevices> streams{};
// NOTE [ Kernel error words ]: host address of each device's word; the device
// address is the same under unified addressing, asked for anyway.
std::array<uint32_t*, kMaxDevices> error_words_host{};
std::array<uint32_t*, kMaxDevices> error_words_device{};

}  // namespace

absl::Status cuda_status(cudaError_t err, const char* what) {
  const bool no_device = err == cudaErrorNoDevice || err == cudaErrorInsufficientDriver;
  const std::string msg = absl::StrFormat("%s: CUDA error %d (%s): %s", what, static_cast<int>(err),
                                          cudaGetErrorName(err), cudaGetErrorString(err));
  return no_device ? absl::UnavailableError(msg) : absl::InternalError(msg);
}

absl::StatusOr<int> device_count() {
  int n = 0;
  ENCORE_RETURN_IF_CUDA_ERROR(cudaGetDeviceCount(&n), "cudaGetDeviceCount");
  if (n == 0) return absl::UnavailableError("cudaGetDeviceCount: no CUDA device");
  return n;
}

absl::Status cuda_failure(cudaError_t err, const char* what) {
  (void)cudaGetLastError();     // clear a non-sticky error so the stream stays usable
  clear_noted_launch_error();   // and a launch error noted before it: reported now or never
  return cuda_status(err, what);
}

void check(cudaError_t err, const char* what) { ENCORE_CUDA_CHECK(err, what); }

void throw_status(const absl::Status& status) { throw_error(status.code(), std::string(status.message())); }

bool programmatic_launch() { return tls_programmatic_launch; }
void set_programmatic_launch(bool on) { tls_programmatic_launch = on; }
void note_launch_error(cudaError_t err) {
  if (tls_launch_error == cudaSuccess) tls_launch_error = err;
}

void check_launch(const char* op) {
  cudaError_t err = cudaGetLastError();
  const cudaError_t noted = std::exchange(tls_launch_error, cudaSuccess);
  if (err == cudaSuccess) err = noted;
  check(err, op);
}

void set_device(int index) {
  if (tls_device == index) return;
  ENCORE_CHECK(index >= 0 && index < kMaxDevices, "cuda:%d: device index out of range", index);
  check(cudaSetDevice(index), "cudaSetDevice");
  {
    std::lock_guard<std::mutex> lock(streams_mu);
    if (streams[index] == nullptr) {
      check(cudaStreamCreateWithFlags(&streams[index], cudaStreamNonBlocking), "cudaStreamCreate");
      void* word = nullptr;
      check(cudaHostAlloc(&word, sizeof(uint32_t), cudaHostAllocMapped | cudaHostAllocPortable),
            "cudaHostAlloc (kernel error word)");
      *static_cast<uint32_t*>(word) = 0;
      void* on_device = nullptr;
      check(cudaHostGetDevicePointer(&on_device, word, 0), "cudaHostGetDevicePointer (kernel error word)");
      error_words_host[index] = static_cast<uint32_t*>(word);
      error_words_device[index] = static_cast<uint32_t*>(on_device);
    }
    tls_stream = streams[index];
  }
  tls_device = index;
}

cudaStream_t stream_for(int index) {
  set_device(index);
  return tls_stream;
}

cudaStream_t active_stream() {
  if (tls_stream == nullptr) [[unlikely]] {
    int d = 0;
    check(cudaGetDevice(&d), "cudaGetDevice");
    set_device(d);
  }
  return tls_stream;
}

void synchronize(int index) { check(cudaStreamSynchronize(stream_for(index)), "cudaStreamSynchronize"); }

uint32_t* error_word(int index) {
  set_device(index);   // creates the stream and the word
  return error_words_device[index];
}

uint32_t take_error_word(int index) {
  set_device(index);
  return __atomic_exchange_n(error_words_host[index], 0u, __ATOMIC_ACQ_REL);
}

Event::Event(int device, bool timing) : device_(device) {
  set_device(device);
  check(cudaEventCreateWithFlags(&event_, timing ? cudaEventDefault : cudaEventDisableTiming), "cudaEventCreate");
}

Event::~Event() {
  if (event_ != nullptr) (void)cudaEventDestroy(event_);   // legal on any thread, even before completion
}

Event::Event(Event&& other) noexcept : device_(other.device_), event_(other.event_) { other.event_ = nullptr; }

Event& Event::operator=(Event&& other) noexcept {
  if (this != &other) {
    if (event_ != nullptr) (void)cudaEventDestroy(event_);
    device_ = other.device_;
    event_ = other.event_;
    other.event_ = nullptr;
  }
  return *this;
}

void Event::record() { check(cudaEventRecord(event_, stream_for(device_)), "cudaEventRecord"); }

void Event::synchronize() const { check(cudaEventSynchronize(event_), "cudaEventSynchronize"); }

bool Event::query() const {
  const cudaError_t err = cudaEventQuery(event_);
  if (err == cudaErrorNotReady) return false;   // not an error, and not recorded as the last one
  check(err, "cudaEventQuery");
  return true;
}

float Event::elapsed_ms(const Event& start) const {
  float ms = 0;
  check(cudaEventElapsedTime(&ms, start.event_, event_), "cudaEventElapsedTime");
  return ms;
}

}  // namespace encore::cuda

namespace encore {

// The CUDA backend's entries of core's runtime table (src/core/device_runtime.h).
const DeviceRuntime& cuda_runtime() {
  static constexpr DeviceRuntime kRuntime = {
      .name = "cuda",
      .available = [] {
        static const bool available = cuda::device_count().ok();
        return available;
      },
      .set_device = &cuda::set_device,
      .synchronize = &cuda::synchronize,
      .allocator = &cuda::caching_allocator,
      .allocator_stats = &cuda::caching_allocator_stats,
      .reset_peak = &cuda::reset_caching_allocator_peak,
      .empty_cache = &cuda::empty_caching_allocator,
      .take_error_word = &cuda::take_error_word,
  };
  return kRuntime;
}

}  // namespace encore
