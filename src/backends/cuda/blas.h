// cuBLAS seen from encore: one handle per CUDA device, created on first use
// (never at static init: without a GPU cublasCreate fails with
// CUBLAS_STATUS_NOT_INITIALIZED, which must stay an error, not a crash), the
// workspace size every GEMM passes to cublasSetWorkspace, the cuBLAS
// members of the checking macro family of runtime.h, and the cuBLAS calls of
// the gemm family's CUDA entry (NOTE [ CUDA matmul batches ] in blas.cpp).
//
//   BlasLease blas = lease_blas(device);                          // locks device's handle
//   ENCORE_CUBLAS_CHECK(cublasSetStream(blas.handle, active_stream()), "cublasSetStream");
//   ENCORE_CUBLAS_CHECK(cublasSetWorkspace(blas.handle, ws, bytes), "cublasSetWorkspace");
//   ENCORE_RETURN_IF_CUBLAS_ERROR(cublasGetVersion(h, &v), "cublasGetVersion");   // in a Status function
//
// NOTE [ cuBLAS workspace ]: cublasSetStream resets the handle to cuBLAS's own
// workspace pool, which cuBLAS allocates behind encore's back and which a
// captured graph would then reference without the planner knowing. Every
// GEMM launcher therefore calls cublasSetWorkspace right after
// cublasSetStream, with a temporary tensor allocated by empty() on the device
// just before the launch (listed in the launch's writes). Eagerly the caching
// allocator hands the same block back each time; under capture the planner
// places that short-lived buffer in the arena, where every GEMM reuses it.
#pragma once

#include <cublas_v2.h>

#include <cstdint>
#include <mutex>

#include "absl/status/status.h"
#include "src/backends/cuda/runtime.h"
#include "src/backends/kernel_table.h"

namespace encore::cuda {

// Bytes of the cuBLAS workspace a GEMM on `device` gets: the sizes the cuBLAS
// docs (cublasSetWorkspace) recommend, 32 MiB on Hopper and Blackwell
// (compute capability >= 9), 4 MiB before. The capability is read once per
// device.
int64_t blas_workspace_bytes(int device);

// cuBLAS requires the workspace pointer aligned to 256 bytes; callers
// allocate this much more than blas_workspace_bytes and round the pointer up.
inline constexpr int64_t kBlasWorkspaceAlignment = 256;

// The handle of one device, held locked for one launch: the stream and
// workspace set on a handle are per handle, so two threads must not
// interleave set-stream, set-workspace and the GEMM on it.
struct BlasLease {
  cublasHandle_t handle;
  std::unique_lock<std::mutex> lock;
};

// Locks device's handle, creating it on first use (default math mode: no
// TF32 for f32 GEMMs, CUBLAS_POINTER_MODE_HOST). Throws encore::Error when
// cublasCreate fails (kUnavailable without a usable GPU). Handles live until
// the process ends (destroying them at exit races the CUDA runtime's own
// teardown).
BlasLease lease_blas(int device);

// A Status for a cuBLAS error: kUnavailable for CUBLAS_STATUS_NOT_INITIALIZED
// (no usable GPU or driver), kResourceExhausted for CUBLAS_STATUS_ALLOC_FAILED,
// kInternal otherwise; the message names `what` and the status's name and text.
absl::Status cublas_status(cublasStatus_t status, const char* what);

// Throws encore::Error holding cublas_status(status, what) unless success.
void check_cublas(cublasStatus_t status, const char* what);

// The cuBLAS calls of one product (m, n and k all > 0) on encore's stream of
// a.device, with the workspace the host allocated from
// cublas_gemm_workspace_bytes: blas_workspace_bytes plus alignment slack
// (the pointer is rounded up to kBlasWorkspaceAlignment here). Called by the
// gemm entry of the CUDA kernel table (gemm.cu), inside its launch.
void cublas_gemm(const backend::GemmArgs& a);
int64_t cublas_gemm_workspace_bytes(const backend::GemmArgs& a);

}  // namespace encore::cuda

// cuBLAS's checking macros (src/backends/cuda/status.h).
#define ENCORE_RETURN_IF_CUBLAS_ERROR(expr, what) \
  ENCORE_RETURN_IF_LIBRARY_ERROR(CUBLAS_STATUS_SUCCESS, ::encore::cuda::cublas_status, expr, what)
#define ENCORE_CUBLAS_CHECK(expr, what) \
  ENCORE_LIBRARY_CHECK(CUBLAS_STATUS_SUCCESS, ::encore::cuda::cublas_status, expr, what)
