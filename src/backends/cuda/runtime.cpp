#include "src/backends/cuda/runtime.h"

#include <array>
#include <mutex>

#include "encore/error.h"

namespace encore::cuda {
namespace {

constexpr int kMaxDevices = 64;
thread_local int tls_device = -1;                 // the device this thread selected through set_device
thread_local cudaStream_t tls_stream = nullptr;   // encore's stream on tls_device

std::mutex streams_mu;
std::array<cudaStream_t, kMaxDevices> streams{};

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

void check(cudaError_t err, const char* what) {
  if (err == cudaSuccess) return;
  (void)cudaGetLastError();   // clear a non-sticky error so the stream stays usable
  const absl::Status s = cuda_status(err, what);
  throw_error(s.code(), std::string(s.message()));
}

void check_launch(const char* op) { check(cudaGetLastError(), op); }

void set_device(int index) {
  if (tls_device == index) return;
  ENCORE_CHECK(index >= 0 && index < kMaxDevices, "cuda:%d: device index out of range", index);
  check(cudaSetDevice(index), "cudaSetDevice");
  {
    std::lock_guard<std::mutex> lock(streams_mu);
    if (streams[index] == nullptr) {
      check(cudaStreamCreateWithFlags(&streams[index], cudaStreamNonBlocking), "cudaStreamCreate");
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

}  // namespace encore::cuda
