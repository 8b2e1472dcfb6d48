#include "src/dist/nccl_comm.h"

#include <mutex>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "encore/error.h"
#include "src/backends/cuda/nccl.h"
#include "src/backends/cuda/runtime.h"
#include "src/core/stream.h"

namespace encore::dist_internal {
namespace {

struct Comms {
  std::mutex mu;
  absl::flat_hash_map<int64_t, ncclComm_t> comm;   // by (group, device)
  static int64_t key(int32_t group, int device) { return (static_cast<int64_t>(group) << 8) | device; }
};
Comms& comms() {
  static Comms* c = new Comms();
  return *c;
}

ncclDataType_t nccl_type(DType d) {
  switch (d) {
    case kFloat32: return ncclFloat32;
    case kFloat16: return ncclFloat16;
    case kBFloat16: return ncclBfloat16;
    case kInt32: return ncclInt32;
    case kInt64: return ncclInt64;
    case kBool: return ncclUint8;
  }
  return ncclUint8;
}

}  // namespace

void ensure_nccl(int32_t group, int device, const char* what) {
  Comms& c = comms();
  {
    std::lock_guard<std::mutex> lk(c.mu);
    if (c.comm.contains(Comms::key(group, device))) return;
  }
  ENCORE_CHECK_CODE(current_stream(Device::cuda(device)).observer() == nullptr, kFailedPrecondition,
                    "%s: the NCCL communicator for cuda:%d does not exist yet and cannot be made inside a captured "
                    "step; run one collective eagerly first (DistributedDataParallel's construction does)",
                    where(group, what), device);
  ncclUniqueId id{};
  if (group_rank(group) == 0) ENCORE_NCCL_CHECK(ncclGetUniqueId(&id), "ncclGetUniqueId");
  absl::Status s = broadcast_bytes(group, &id, sizeof(id), 0, "nccl unique id");
  if (!s.ok()) throw Error(s);
  cuda::set_device(device);
  ncclComm_t comm = nullptr;
  absl::Status init = cuda::nccl_status(ncclCommInitRank(&comm, group_size(group), id, group_rank(group)),
                                        "ncclCommInitRank");
  if (!init.ok()) throw Error(absl::Status(init.code(), absl::StrCat(where(group, what), ": ", init.message())));
  std::lock_guard<std::mutex> lk(c.mu);
  c.comm[Comms::key(group, device)] = comm;
}

void nccl_collective(const CollectiveArgs& a) {
  ncclComm_t comm = nullptr;
  {
    Comms& c = comms();
    std::lock_guard<std::mutex> lk(c.mu);
    auto it = c.comm.find(Comms::key(a.group, a.device));
    ENCORE_CHECK_CODE(it != c.comm.end(), kInternal, "dist: no NCCL communicator for group %d on cuda:%d", a.group,
                      a.device);
    comm = it->second;
  }
  cudaStream_t stream = cuda::stream_for(a.device);
  ncclResult_t r = ncclSuccess;
  const char* call = "ncclAllReduce";
  if (a.kind == CollKind::kAllReduce) {
    const ncclRedOp_t op = a.op == dist::ReduceOp::kAverage ? ncclAvg : ncclSum;
    r = ncclAllReduce(a.data, a.data, static_cast<size_t>(a.count), nccl_type(a.dtype), op, comm, stream);
  } else if (a.kind == CollKind::kBroadcast) {
    call = "ncclBroadcast";
    r = ncclBroadcast(a.data, a.data, static_cast<size_t>(a.count), nccl_type(a.dtype), a.root, comm, stream);
  }
  if (r != ncclSuccess) [[unlikely]] {
    // The Status names the call and this rank, then NCCL's code and text.
    const absl::Status s = cuda::nccl_status(r, call, comm);
    throw Error(absl::Status(s.code(), absl::StrCat(where(a.group, a.kind == CollKind::kAllReduce ? "all_reduce"
                                                                                                  : "broadcast"),
                                                    " on cuda:", a.device, ": ", s.message())));
  }
}

void release_nccl(int32_t group) {
  Comms& c = comms();
  std::lock_guard<std::mutex> lk(c.mu);
  for (auto it = c.comm.begin(); it != c.comm.end();) {
    if ((it->first >> 8) == group) {
      ncclCommDestroy(it->second);
      c.comm.erase(it++);
    } else {
      ++it;
    }
  }
}

}  // namespace encore::dist_internal
