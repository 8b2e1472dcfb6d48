// NCCL for the CUDA tensors of a process group (built with CUDA and NCCL
// only): one communicator per (group, device), made eagerly by the first
// collective on that device (its unique id broadcast from rank 0 over MPI;
// with one process no MPI is needed), then every collective is one NCCL
// call on the device's stream, so CUDA stream capture records it into the
// step's graph. A communicator must exist before capture: making one is not
// capturable, and is refused inside a captured step with a message.
//
//   ensure_nccl(group, 0, "all_reduce");          // eager, before capture
//   current_stream(cuda(0)).launch(kernel<&nccl_collective>(), "dist.all_reduce", args, {s}, {s});
#pragma once

#include <cstdint>

#include "src/dist/collectives.h"

namespace encore::dist_internal {

void ensure_nccl(int32_t group, int device, const char* what);
// The kernel: one ncclAllReduce / ncclBroadcast on stream_for(args.device).
void nccl_collective(const CollectiveArgs& args);
// Destroys the group's communicators (ProcessGroup's destructor).
void release_nccl(int32_t group);

}  // namespace encore::dist_internal
