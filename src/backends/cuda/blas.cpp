// cuBLAS handles, the GEMM workspace, the status mapping, and the cuBLAS
// calls of the gemm family's CUDA entry (cuda/gemm.cu hands them every
// product with m, n, k > 0).
//
// Row-major on column-major: a row-major C[M, N] is the column-major C^T, so
// C = A B runs as C^T = B^T A^T, with B as cuBLAS's first operand. A matrix
// passed "transposed" to the CPU's BLAS (a column-major view such as w.t(),
// NOTE [ Matmul layouts ] in src/backends/kernels.h) is passed with
// CUBLAS_OP_T here: no copies.
//
// Dtypes: f32 runs CUBLAS_COMPUTE_32F under the default math mode (no TF32),
// so results match the CPU to ~1e-5; f16/bf16 keep their storage type for A,
// B and C and use tensor cores with f32 accumulation (CUBLAS_COMPUTE_32F).
//
// NOTE [ CUDA matmul batches ]: one strided-batched call covers one batch
// dim with a uniform stride per operand (0 = broadcast). After dropping
// size-1 dims and merging dims that are contiguous in all three operands,
// the largest dim along which out has a stride (a "parallel" dim) becomes
// the cuBLAS batch; every other dim (out reduced over it, stride 0, or a
// second parallel dim that does not merge) is looped over on the host, one
// cuBLAS call per index, all inside ONE stream launch ("gemm") and in
// order on encore's stream. A call accumulates into out with beta when its
// index is 0 on every reduced dim, else with beta = 1
// (NOTE [ Matmul accumulation ]): the sum order is fixed, so results are
// deterministic. f16/bf16 products summed over batch items accumulate in an
// f32 copy of out (cuBLAS takes f16/bf16 A, B with an f32 C; the host side,
// src/backends/gemm.cpp, makes it), rounded into out once at the end, as the
// CPU does; otherwise nothing is materialised. A product summed over a batch
// of R matrices costs R / (cuBLAS batch) calls, which ops avoid for the
// common cases by folding batch dims into rows (src/ops/matmul.cpp).
#include "src/backends/cuda/blas.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <string>

#include "absl/strings/str_format.h"
#include "encore/error.h"
#include "src/backends/cuda/launch.h"

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

// ---- the cuBLAS calls of one GemmArgs ----

namespace {

cudaDataType_t cuda_type(DType t) {
  switch (t) {
    case DType::kFloat16: return CUDA_R_16F;
    case DType::kBFloat16: return CUDA_R_16BF;
    default: return CUDA_R_32F;
  }
}

// One batch dim as cuBLAS or the host loop walks it: strides in elements.
struct BatchDim {
  int64_t size;
  int64_t stride[3];   // a, b, c
};

// How one GemmArgs runs as cuBLAS calls (NOTE [ CUDA matmul batches ]).
struct CublasPlan {
  int64_t batch = 1;                   // cuBLAS batch count (>= 1)
  int64_t batch_stride[3] = {0, 0, 0};
  int loop_ndim = 0;                   // dims looped over on the host, outermost first
  BatchDim loop[backend::kLayoutMaxDims];   // c's stride 0: out is summed over that dim
};

// The batch dims of size > 1, with neighbours merged where every operand
// steps through them as through one dim; returns how many.
int merged_batch(const backend::GemmArgs& g, BatchDim* dims) {
  int n = 0;
  for (int i = 0; i < g.batch_ndim; ++i) {
    if (g.batch_shape[i] == 1) continue;
    const BatchDim d{g.batch_shape[i], {g.batch_stride[0][i], g.batch_stride[1][i], g.batch_stride[2][i]}};
    if (n > 0) {
      BatchDim& outer = dims[n - 1];
      bool merges = true;
      for (int o = 0; o < 3; ++o) merges &= outer.stride[o] == d.stride[o] * d.size;
      if (merges) {
        outer.size *= d.size;
        std::copy(d.stride, d.stride + 3, outer.stride);
        continue;
      }
    }
    dims[n++] = d;
  }
  return n;
}

// Splits the merged batch into the cuBLAS batch dim (the largest dim c has a
// stride along) and the host-looped dims.
CublasPlan plan_batch(const backend::GemmArgs& g) {
  BatchDim dims[backend::kLayoutMaxDims];
  const int n = merged_batch(g, dims);
  int batched = -1;
  for (int i = 0; i < n; ++i) {
    if (dims[i].stride[2] != 0 && (batched < 0 || dims[i].size > dims[batched].size)) batched = i;
  }
  CublasPlan p;
  if (batched >= 0) {
    p.batch = dims[batched].size;
    std::copy(dims[batched].stride, dims[batched].stride + 3, p.batch_stride);
  }
  for (int i = 0; i < n; ++i) {
    if (i != batched) p.loop[p.loop_ndim++] = dims[i];
  }
  return p;
}

}  // namespace

int64_t cublas_gemm_workspace_bytes(const backend::GemmArgs& g) {
  return blas_workspace_bytes(g.device) + kBlasWorkspaceAlignment;   // the entry rounds the pointer up
}

void cublas_gemm(const backend::GemmArgs& g) {
  const CublasPlan plan = plan_batch(g);
  set_device(g.device);
  BlasLease blas = lease_blas(g.device);
  // NOTE [ cuBLAS workspace ]: set-stream resets the workspace, so set it after.
  const auto raw = reinterpret_cast<uintptr_t>(g.workspace);
  const auto align = static_cast<uintptr_t>(kBlasWorkspaceAlignment);
  void* workspace = reinterpret_cast<void*>((raw + align - 1) & ~(align - 1));
  const int64_t workspace_bytes = g.workspace_bytes - kBlasWorkspaceAlignment;   // blas_workspace_bytes(device)
  ENCORE_CUBLAS_CHECK(cublasSetStream(blas.handle, active_stream()), "gemm: cublasSetStream");
  ENCORE_CUBLAS_CHECK(cublasSetWorkspace(blas.handle, workspace, static_cast<size_t>(workspace_bytes)),
                      "gemm: cublasSetWorkspace");
  const cudaDataType_t type = cuda_type(g.dtype), c_type = cuda_type(g.c_dtype);
  const int64_t esize = dtype_size(g.dtype), c_esize = dtype_size(g.c_dtype);
  int64_t calls = 1;
  for (int d = 0; d < plan.loop_ndim; ++d) calls *= plan.loop[d].size;
  for (int64_t i = 0; i < calls; ++i) {
    int64_t off[3] = {0, 0, 0};
    bool first = true;   // the first product summed into its C matrices
    int64_t rem = i;
    for (int d = plan.loop_ndim - 1; d >= 0; --d) {
      const int64_t idx = rem % plan.loop[d].size;
      rem /= plan.loop[d].size;
      for (int o = 0; o < 3; ++o) off[o] += idx * plan.loop[d].stride[o];
      if (plan.loop[d].stride[2] == 0 && idx != 0) first = false;
    }
    const float beta = first ? g.beta : 1.f;
    // C^T[n, m] = op(B)^T[n, k] op(A)^T[k, m] in cuBLAS's column-major terms.
    ENCORE_CUBLAS_CHECK(
        cublasGemmStridedBatchedEx_64(
            blas.handle, g.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N, g.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, g.n, g.m,
            g.k, &g.alpha, static_cast<const char*>(g.b) + off[1] * esize, type, g.ldb, plan.batch_stride[1],
            static_cast<const char*>(g.a) + off[0] * esize, type, g.lda, plan.batch_stride[0], &beta,
            static_cast<char*>(g.c) + off[2] * c_esize, c_type, g.ldc, plan.batch_stride[2], plan.batch,
            CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
        "gemm: cublasGemmStridedBatchedEx");
  }
}

}  // namespace encore::cuda
