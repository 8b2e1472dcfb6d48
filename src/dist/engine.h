// The communication engine behind encore::dist::ProcessGroup (encore/dist.h):
// the registry of groups that kernels name by id, and the thread that makes
// every MPI call.
//
// NOTE [ The communication thread ]: MPI is initialized, called and finalized
// by one thread of encore's own (MPI_THREAD_FUNNELED), which takes closures
// from a queue in order. A collective is a nonblocking MPI call polled with
// MPI_Test until it completes or the group's deadline passes; so the thread
// that launched it goes on (backward computes the next bucket while the
// last one travels) and a missing peer gives kDeadlineExceeded after
// timeout_s instead of a hang. A large collective is a sequence of such
// calls, each of a chunk whose count fits MPI's int (NOTE [ Chunked
// collectives ] in engine.cpp), staged through a buffer of the engine's own
// (NOTE [ Staged collectives ]), after the ranks agree on the call (NOTE
// [ Ranks agree on each call ]). A request abandoned at its deadline is
// kept, with that buffer, and polled while the thread is idle or polls
// another call, so a late peer completes it without touching the caller's
// memory (and, for an abandoned agreement, the data's call then starts);
// the group stays
// broken (every later call fails with the first error), since its ranks no
// longer agree on which collective is which. Each call's deadline counts
// from when the thread starts it, not from when it was queued, so a call
// behind others (DDP's buckets) never fails for their time. Making a
// group's communicator is bounded by the timeout the same way
// (MPI_Comm_idup).
//
//   int32_t g = dist_internal::new_group(env, 30.0).value();
//   uint64_t t = dist_internal::submit(g, {CollKind::kAllReduce, ptr, n, kFloat32, ReduceOp::kSum}, "all_reduce");
//   absl::Status s = dist_internal::wait(g, t);
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "encore/dist.h"

#define ENCORE_DIST_RETURN_IF_ERROR(expr)  \
  do {                                     \
    absl::Status _st = (expr);             \
    if (!_st.ok()) return _st;             \
  } while (0)

namespace encore::dist_internal {

// kAllGather, kBroadcastBytes: the engine's host all_gather() of one uint64
// per rank and broadcast_bytes(), never kernels.
enum class CollKind : uint8_t { kAllReduce, kBroadcast, kBarrier, kAllGather, kBroadcastBytes };

// One collective on host memory (CPU tensors): `count` elements of `dtype` at
// `data`, in place.
struct Work {
  CollKind kind = CollKind::kBarrier;
  void* data = nullptr;
  int64_t count = 0;
  DType dtype = kFloat32;
  dist::ReduceOp op = dist::ReduceOp::kSum;
  int32_t root = 0;
};

// Makes a group of the whole world for `env` (which must match what MPI
// says); starts MPI on the communication thread the first time one is needed.
// Its communicator duplicates MPI_COMM_WORLD, or group `parent`'s when
// parent >= 0, within timeout_s (kDeadlineExceeded after it: NOTE [ Bounded
// group creation ] in engine.cpp).
absl::StatusOr<int32_t> new_group(const dist::Environment& env, double timeout_s, int32_t parent = -1);
void release_group(int32_t group);
int group_rank(int32_t group);
int group_size(int32_t group);
double group_timeout(int32_t group);
void set_group_timeout(int32_t group, double seconds);
absl::Status group_health(int32_t group);

// Queues `work` (`what` names the call in messages: a static string) and
// returns its ticket; the data must stay alive until wait() returns.
uint64_t submit(int32_t group, const Work& work, const char* what);
// Waits for the ticket's work; its status (kDeadlineExceeded after the
// group's timeout, naming the call and the rank). The timeout counts from
// when the thread starts the work: work queued behind other calls waits for
// them, each within its own timeout. kInternal only if the thread stopped
// answering (NOTE [ A thread that stops answering ] in engine.cpp).
absl::Status wait(int32_t group, uint64_t ticket);

// Every rank's `value`, in rank order (the capture agreement, all_gather).
absl::StatusOr<std::vector<uint64_t>> all_gather(int32_t group, uint64_t value, const char* what);
// Rank `root`'s `nbytes` bytes at `data` to every rank (NCCL's unique id).
absl::Status broadcast_bytes(int32_t group, void* data, int64_t nbytes, int root, const char* what);

// Time accounting of this process's collectives since the start (for
// bench/dist_bench): `in_flight_s` sums, over collectives handed to the
// communication thread, the time from submit() to completion; `blocked_s`
// sums the time callers of wait() spent waiting. 1 - blocked / in_flight is
// the share of the communication that the caller's work hid.
struct EngineTimes {
  double in_flight_s = 0;
  double blocked_s = 0;
  int64_t collectives = 0;
  // Nonblocking MPI collectives issued: per collective, one to agree on the
  // call (NOTE [ Ranks agree on each call ] in engine.cpp), then one per chunk.
  int64_t mpi_calls = 0;
};
EngineTimes engine_times();

// How many requests abandoned at their deadline are still waiting for a late
// peer (NOTE [ The communication thread ]).
int64_t abandoned_requests();

// For tests: queues `fn` on the communication thread as a job of `group`,
// bounded by the group's timeout as a collective is, and returns its ticket
// for wait(). Without MPI there is no thread: the ticket is done at once
// with kFailedPrecondition.
uint64_t submit_job(int32_t group, std::function<absl::Status()> fn, const char* what);

// For tests: how long past its own deadline a job may run before wait()
// decides the thread stopped answering (NOTE [ A thread that stops
// answering ] in engine.cpp; 30 s by default). Returns the previous value.
double set_answer_slack(double seconds);

// Sets the most bytes one MPI call of a CPU collective carries (NOTE
// [ Chunked collectives ] in engine.cpp; at most the default, 64 MiB, which
// MPI's int counts hold) and returns the previous value. For tests, which
// must set the same value on every rank while no collective runs.
int64_t set_chunk_bytes(int64_t bytes);

// The message prefix of a call on this rank: "dist::all_reduce on rank 1 of 2".
std::string where(int32_t group, const char* what);

}  // namespace encore::dist_internal
