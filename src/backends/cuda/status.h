// The one generator of encore's checking macros for the libraries it calls on
// the GPU: the CUDA runtime (runtime.h), cuBLAS (blas.h), NCCL (nccl.h) and
// cuDNN (cudnn.h). In the manner of ggml's CUDA_CHECK_GEN, but a failure
// becomes an absl::Status (returned from a boundary function) or an
// encore::Error (thrown inside ops): never exit() or abort().
//
// A library plugs in with one function, `absl::Status <lib>_failure(code,
// what)`, that turns a failed code into a Status naming `what` (and clears
// whatever the library needs cleared after a failure), and two macros, each
// one generator call with the library's success code and failure function
// (blas.h: ENCORE_RETURN_IF_CUBLAS_ERROR is ENCORE_RETURN_IF_LIBRARY_ERROR(
// CUBLAS_STATUS_SUCCESS, cublas_status, expr, what), ENCORE_CUBLAS_CHECK is
// ENCORE_LIBRARY_CHECK with the same two):
//
//   ENCORE_RETURN_IF_CUBLAS_ERROR(cublasGetVersion(h, &v), "cublasGetVersion");   // in a Status function
//   ENCORE_CUBLAS_CHECK(cublasSetStream(h, s), "gemm: cublasSetStream");           // throws encore::Error
#pragma once

#include "absl/status/status.h"

namespace encore::cuda {

// Throws encore::Error holding `status` (which is not OK).
[[noreturn]] void throw_status(const absl::Status& status);

}  // namespace encore::cuda

// Evaluates `expr` once; unless it equals `ok`, returns failure(code, what)
// from the enclosing function (which returns absl::Status or StatusOr).
#define ENCORE_RETURN_IF_LIBRARY_ERROR(ok, failure, expr, what) \
  do {                                                          \
    const auto encore_library_code_ = (expr);                   \
    if (encore_library_code_ != (ok)) [[unlikely]] {            \
      return failure(encore_library_code_, (what));             \
    }                                                           \
  } while (0)

// Evaluates `expr` once; unless it equals `ok`, throws encore::Error holding
// failure(code, what).
#define ENCORE_LIBRARY_CHECK(ok, failure, expr, what)                       \
  do {                                                                      \
    const auto encore_library_code_ = (expr);                               \
    if (encore_library_code_ != (ok)) [[unlikely]] {                        \
      ::encore::cuda::throw_status(failure(encore_library_code_, (what)));  \
    }                                                                       \
  } while (0)
