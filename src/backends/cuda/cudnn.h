// cuDNN seen from encore: the cuDNN members of the checking macro family of
// status.h (CUDA, cuBLAS, NCCL, cuDNN), so that a failed cuDNN call becomes
// an absl::Status (boundary functions) or an encore::Error (ops), never an
// abort. The convolutions of the cnn family (cudnn.cpp) use them.
//
//   ENCORE_CUDNN_CHECK(cudnnSetStream(h, active_stream()), "conv2d: cudnnSetStream");   // throws
//   ENCORE_RETURN_IF_CUDNN_ERROR(cudnnCreate(&h), "cudnnCreate");                      // in a Status function
#pragma once

#include <cudnn.h>

#include "absl/status/status.h"
#include "src/backends/cuda/status.h"

namespace encore::cuda {

// A Status for a cuDNN result: kUnavailable for CUDNN_STATUS_NOT_INITIALIZED
// (no usable GPU or driver), kResourceExhausted for CUDNN_STATUS_ALLOC_FAILED,
// kInvalidArgument for CUDNN_STATUS_BAD_PARAM and CUDNN_STATUS_NOT_SUPPORTED
// (and their sub-codes), kInternal otherwise; the message names `what`, the
// code and cuDNN's text for it.
absl::Status cudnn_status(cudnnStatus_t status, const char* what);

}  // namespace encore::cuda

#define ENCORE_RETURN_IF_CUDNN_ERROR(expr, what) \
  ENCORE_RETURN_IF_LIBRARY_ERROR(CUDNN_STATUS_SUCCESS, ::encore::cuda::cudnn_status, expr, what)
#define ENCORE_CUDNN_CHECK(expr, what) \
  ENCORE_LIBRARY_CHECK(CUDNN_STATUS_SUCCESS, ::encore::cuda::cudnn_status, expr, what)
