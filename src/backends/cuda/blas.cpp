#include "src/backends/cuda/blas.h"

#include <array>
#include <atomic>
#include <string>

#include "absl/strings/str_format.h"
#include "encore/error.h"

namespace encore::cuda {
namespace {

constexpr int kMaxDevices = 64;
constexpr int64_t kMiB = int64_t{1} << 20;

struct DeviceBlas {
  std::mutex mu;                        // guards handle and its stream/workspace settings
  cublasHandle_t handle = nullptr;      // created on first lease, never destroyed
  std::atomic<int64_t> workspace_bytes{0};   // 0 until read
};

std::array<DeviceBlas, kMaxDevices>& devices() {
  static auto* d = new std::array<DeviceBlas, kMaxDevices>();   // never destroyed (see blas.h)
  return *d;
}

DeviceBlas& device_blas(int device) {
  ENCORE_CHECK(device >= 0 && device < kMaxDevices, "cuda:%d: device index out of range for cuBLAS", device);
  return devices()[device];
}

}  // namespace

absl::Status cublas_status(cublasStatus_t status, const char* what) {
  const std::string msg = absl::StrFormat("%s: cuBLAS error %d (%s): %s", what, static_cast<int>(status),
                                          cublasGetStatusName(status), cublasGetStatusString(status));
  switch (status) {
    case CUBLAS_STATUS_NOT_INITIALIZED: return absl::UnavailableError(msg);
    case CUBLAS_STATUS_ALLOC_FAILED: return absl::ResourceExhaustedError(msg);
    default: return absl::InternalError(msg);
  }
}

void check_cublas(cublasStatus_t status, const char* what) { ENCORE_CUBLAS_CHECK(status, what); }

int64_t blas_workspace_bytes(int device) {
  DeviceBlas& d = device_blas(device);
  int64_t bytes = d.workspace_bytes.load(std::memory_order_relaxed);
  if (bytes == 0) [[unlikely]] {
    int major = 0;
    ENCORE_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device),
                      "cudaDeviceGetAttribute(compute capability)");
    bytes = major >= 9 ? 32 * kMiB : 4 * kMiB;
    d.workspace_bytes.store(bytes, std::memory_order_relaxed);
  }
  return bytes;
}

BlasLease lease_blas(int device) {
  DeviceBlas& d = device_blas(device);
  std::unique_lock<std::mutex> lock(d.mu);
  if (d.handle == nullptr) [[unlikely]] {
    set_device(device);   // cublasCreate binds the handle to the current device
    cublasHandle_t h = nullptr;
    ENCORE_CUBLAS_CHECK(cublasCreate(&h), "cublasCreate");
    // Default math: f32 GEMMs with CUBLAS_COMPUTE_32F stay in f32 (no TF32).
    const cublasStatus_t s = cublasSetMathMode(h, CUBLAS_DEFAULT_MATH);
    if (s != CUBLAS_STATUS_SUCCESS) {
      cublasDestroy(h);
      check_cublas(s, "cublasSetMathMode");
    }
    d.handle = h;
  }
  return BlasLease{d.handle, std::move(lock)};
}

}  // namespace encore::cuda
