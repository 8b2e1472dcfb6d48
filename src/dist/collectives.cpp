#include "src/dist/collectives.h"

#include <mutex>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_format.h"
#include "encore/error.h"
#include "src/core/stream.h"
#if ENCORE_HAVE_NCCL
#include "src/dist/nccl_comm.h"
#endif

namespace encore::dist_internal {
namespace {

const char* kind_name(CollKind k) {
  switch (k) {
    case CollKind::kAllReduce: return "all_reduce";
    case CollKind::kBroadcast: return "broadcast";
    case CollKind::kBarrier: return "barrier";
    case CollKind::kAllGather: return "all_gather";
    case CollKind::kBroadcastBytes: return "broadcast_bytes";
  }
  return "collective";
}

Work work_of(const CollectiveArgs& a) {
  return Work{a.kind, a.data, a.count, a.dtype, a.op, a.root};
}

// The tickets of in-flight start / wait pairs, by (group, slot).
struct Slots {
  std::mutex mu;
  absl::flat_hash_map<int64_t, uint64_t> ticket;
  absl::flat_hash_map<int32_t, int32_t> next;
  static int64_t key(int32_t group, int32_t slot) { return (static_cast<int64_t>(group) << 32) | uint32_t(slot); }
};
Slots& slots() {
  static Slots* s = new Slots();
  return *s;
}

void throw_if(const absl::Status& s) {
  if (!s.ok()) throw Error(s);
}

// ---- CPU kernels ----
void cpu_collective(const CollectiveArgs& a) {
  throw_if(wait(a.group, submit(a.group, work_of(a), kind_name(a.kind))));
}
void cpu_start(const CollectiveArgs& a) {
  const uint64_t t = submit(a.group, work_of(a), kind_name(a.kind));
  Slots& s = slots();
  std::lock_guard<std::mutex> lk(s.mu);
  s.ticket[Slots::key(a.group, a.slot)] = t;
}
void cpu_wait(const CollectiveArgs& a) {
  uint64_t t = 0;
  {
    Slots& s = slots();
    std::lock_guard<std::mutex> lk(s.mu);
    auto it = s.ticket.find(Slots::key(a.group, a.slot));
    ENCORE_CHECK_CODE(it != s.ticket.end(), kInternal, "%s: waiting for slot %d, which nothing started",
                      where(a.group, kind_name(a.kind)), a.slot);
    t = it->second;
    s.ticket.erase(it);
  }
  throw_if(wait(a.group, t));
}

CollectiveArgs args_for(int32_t group, int32_t slot, CollKind kind, const Tensor& t, dist::ReduceOp op, int root,
                        const char* what) {
  CollectiveArgs a{};
  a.group = group;
  a.slot = slot;
  a.kind = kind;
  a.op = op;
  a.root = root;
  a.device = -1;
  a.dtype = kFloat32;
  if (kind == CollKind::kBarrier) return a;
  const int size = group_size(group);
  ENCORE_CHECK(t.defined(), "%s: the tensor is undefined", where(group, what));
  ENCORE_CHECK(t.is_contiguous(), "%s: the tensor %s must be contiguous; pass t.contiguous() and copy back",
               where(group, what), shape_str(t.shape()));
  ENCORE_CHECK(root >= 0 && root < size, "%s: root %d is not a rank of a world of %d", where(group, what), root,
               size);
  if (kind == CollKind::kAllReduce && t.device().is_cpu()) {
    ENCORE_CHECK(t.dtype() == kFloat32 || t.dtype() == kInt32 || t.dtype() == kInt64,
                 "%s: a CPU tensor of dtype %s; MPI reduces float32, int32 and int64 (convert with .to(kFloat32))",
                 where(group, what), dtype_name(t.dtype()));
  }
  if (kind == CollKind::kAllReduce && t.device().is_cuda()) {
    ENCORE_CHECK(t.dtype() != kBool, "%s: a tensor of dtype bool cannot be reduced", where(group, what));
  }
  a.data = static_cast<char*>(t.storage()->data()) + t.storage_offset() * dtype_size(t.dtype());
  a.count = t.numel();
  a.dtype = t.dtype();
  if (t.device().is_cuda()) a.device = t.device().index;
  return a;
}

#if ENCORE_HAVE_NCCL
constexpr Kernel<CollectiveArgs> kNccl = kernel<&nccl_collective>();
#endif

void launch_on(const CollectiveArgs& a, const Tensor& t, Kernel<CollectiveArgs> cpu_kernel, const char* op,
               bool reads, const char* what) {
  if (a.kind == CollKind::kBarrier || t.device().is_cpu()) {
    if (!t.defined()) {
      current_stream(kCPU).launch(cpu_kernel, op, a, {}, {});
    } else if (reads) {
      current_stream(kCPU).launch(cpu_kernel, op, a, {t.storage()}, {t.storage()});
    } else {
      current_stream(kCPU).launch(cpu_kernel, op, a, {}, {t.storage()});
    }
    return;
  }
#if ENCORE_HAVE_NCCL
  ensure_nccl(a.group, a.device, what);
  current_stream(t.device()).launch(kNccl, op, a, {t.storage()}, {t.storage()});
#else
  throw_error(absl::StatusCode::kUnimplemented,
              absl::StrFormat("%s: a CUDA tensor, but encore was built without NCCL", where(a.group, what)));
#endif
}

}  // namespace

void launch_collective(int32_t group, CollKind kind, const Tensor& t, dist::ReduceOp op, int root, const char* what) {
  static constexpr Kernel<CollectiveArgs> kCpu = kernel<&cpu_collective>();
  const CollectiveArgs a = args_for(group, -1, kind, t, op, root, what);
  const char* op_name = kind == CollKind::kAllReduce ? "dist.all_reduce"
                        : kind == CollKind::kBroadcast ? "dist.broadcast"
                                                       : "dist.barrier";
  launch_on(a, t, kCpu, op_name, true, what);
}

int32_t reserve_slot(int32_t group) {
  Slots& s = slots();
  std::lock_guard<std::mutex> lk(s.mu);
  return s.next[group]++;
}

void launch_start(int32_t group, int32_t slot, CollKind kind, const Tensor& t, dist::ReduceOp op, int root,
                  const char* what) {
  static constexpr Kernel<CollectiveArgs> kStart = kernel<&cpu_start>();
  launch_on(args_for(group, slot, kind, t, op, root, what), t, kStart, "dist.start", true, what);
}

void launch_wait(int32_t group, int32_t slot, const Tensor& t, const char* what) {
  if (t.device().is_cuda()) return;   // NCCL: stream order is the wait
  static constexpr Kernel<CollectiveArgs> kWait = kernel<&cpu_wait>();
  CollectiveArgs a = args_for(group, slot, CollKind::kAllReduce, t, dist::ReduceOp::kSum, 0, what);
  // The wait writes the tensor: what the thread wrote becomes visible to the kernels after it.
  launch_on(a, t, kWait, "dist.wait", false, what);
}

}  // namespace encore::dist_internal
