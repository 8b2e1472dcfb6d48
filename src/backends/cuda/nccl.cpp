#include "src/backends/cuda/nccl.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "encore/error.h"

namespace encore::cuda {

absl::Status nccl_status(ncclResult_t result, const char* what, ncclComm_t comm) {
  std::string msg = absl::StrFormat("%s: NCCL error %d: %s", what, static_cast<int>(result),
                                    ncclGetErrorString(result));
  if (comm != nullptr) {
    const char* last = ncclGetLastError(comm);
    if (last != nullptr && last[0] != '\0') absl::StrAppend(&msg, " (", last, ")");
  }
  switch (result) {
    case ncclSuccess: return absl::OkStatus();
    case ncclInvalidArgument: return absl::InvalidArgumentError(msg);
    case ncclInvalidUsage: return absl::FailedPreconditionError(msg);
    case ncclSystemError:
    case ncclRemoteError:
    case ncclInProgress: return absl::UnavailableError(msg);
    default: return absl::InternalError(msg);   // ncclUnhandledCudaError, ncclInternalError, unknown
  }
}

void check_nccl(ncclResult_t result, const char* what, ncclComm_t comm) {
  if (result == ncclSuccess) [[likely]] return;
  throw_status(nccl_status(result, what, comm));
}

absl::StatusOr<int> nccl_version() {
  int version = 0;
  ENCORE_RETURN_IF_NCCL_ERROR(ncclGetVersion(&version), "ncclGetVersion");
  return version;
}

}  // namespace encore::cuda
