// NCCL seen from encore: the NCCL members of the checking macro family of
// runtime.h (CUDA) and blas.h (cuBLAS), so that a collective's failure becomes
// an absl::Status (boundary functions) or an encore::Error (ops), never an
// abort. No collective uses NCCL yet; the data-parallel work will, through
// these macros. A binary that calls none of this does not load libnccl (the
// archive member is not pulled in, and meson links with --as-needed).
//
//   ENCORE_RETURN_IF_NCCL_ERROR(ncclCommInitRank(&comm, n, id, rank), "ncclCommInitRank");
//   ENCORE_NCCL_CHECK(ncclAllReduce(g, g, count, ncclFloat, ncclSum, comm, stream), "all-reduce of gradients");
//   absl::StatusOr<int> v = encore::cuda::nccl_version();   // 22809 for NCCL 2.28.9; no GPU needed
#pragma once

#include <nccl.h>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "src/backends/cuda/status.h"

namespace encore::cuda {

// A Status for an NCCL result. Codes: kInvalidArgument for
// ncclInvalidArgument, kFailedPrecondition for ncclInvalidUsage (a call out of
// order, a communicator in the wrong state), kUnavailable for ncclSystemError
// and ncclRemoteError (the network, another rank, the OS) and for
// ncclInProgress (a non-blocking communicator not ready yet), kInternal for
// ncclUnhandledCudaError, ncclInternalError and unknown values. The message
// names `what`, the result's number and NCCL's text for it, and, when `comm`
// is given, NCCL's last error message for that communicator.
absl::Status nccl_status(ncclResult_t result, const char* what, ncclComm_t comm = nullptr);

// Throws encore::Error holding nccl_status(result, what, comm) unless ncclSuccess.
void check_nccl(ncclResult_t result, const char* what, ncclComm_t comm = nullptr);

// The version of the NCCL library loaded (NCCL_VERSION_CODE form:
// major * 10000 + minor * 100 + patch).
absl::StatusOr<int> nccl_version();

}  // namespace encore::cuda

// NCCL's checking macros (src/backends/cuda/status.h); check_nccl() also
// names the communicator's last error.
#define ENCORE_RETURN_IF_NCCL_ERROR(expr, what) \
  ENCORE_RETURN_IF_LIBRARY_ERROR(ncclSuccess, ::encore::cuda::nccl_status, expr, what)
#define ENCORE_NCCL_CHECK(expr, what) ENCORE_LIBRARY_CHECK(ncclSuccess, ::encore::cuda::nccl_status, expr, what)
