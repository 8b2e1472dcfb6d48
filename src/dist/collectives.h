// Collectives as kernels of encore's one launch path (src/core/stream.h):
// what ProcessGroup's calls and DistributedDataParallel's buckets launch, so
// that recorder, planner, capture and the replay contract see them with the
// storage they read and write.
//
// A CPU collective is a host kernel that hands the work to the communication
// thread (src/dist/engine.h) and, for the blocking form, waits for it; the
// split form is a start kernel and a wait kernel joined by a slot (an
// integer the group reserves; the same on every rank and in every run, so a
// captured graph replays it). A CUDA collective is one NCCL call on the
// device's stream (src/dist/nccl_comm.h); its wait is stream order.
//
//   launch_collective(group, CollKind::kAllReduce, t, ReduceOp::kSum, 0, "all_reduce");
//   int64_t slot = reserve_slot(group);
//   launch_start(group, slot, CollKind::kAllReduce, bucket, ReduceOp::kAverage, 0, "ddp.all_reduce");
//   ...                                       // backward goes on
//   launch_wait(group, slot, bucket, "ddp.all_reduce");
#pragma once

#include <cstdint>

#include "encore/dist.h"
#include "encore/tensor.h"
#include "src/dist/engine.h"

namespace encore::dist_internal {

// The argument bytes of every collective kernel.
struct CollectiveArgs {
  void* data;
  int64_t count;     // elements
  int32_t group;     // ProcessGroup::id()
  int32_t slot;      // the start / wait pair's slot (-1: blocking)
  int32_t root;
  int32_t device;    // CUDA ordinal; -1 on the CPU
  DType dtype;
  CollKind kind;
  dist::ReduceOp op;
  template <typename V>
  void fields(V& v) const {
    v("data", data);
    v("count", count);
    v("group", group);
    v("slot", slot);
    v("root", root);
    v("device", device);
    v("dtype", dtype);
    v("kind", kind);
    v("op", op);
  }
};

// Checks t for `what` (contiguous, a dtype the transport carries) and
// launches the blocking collective on t's stream.
void launch_collective(int32_t group, CollKind kind, const Tensor& t, dist::ReduceOp op, int root, const char* what);
// A slot for a start / wait pair, owned by the caller for the group's life.
int32_t reserve_slot(int32_t group);
void launch_start(int32_t group, int32_t slot, CollKind kind, const Tensor& t, dist::ReduceOp op, int root,
                  const char* what);
void launch_wait(int32_t group, int32_t slot, const Tensor& t, const char* what);

}  // namespace encore::dist_internal
