// NOTE [ The communication thread ] in engine.h.
#include "src/dist/engine.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <limits>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/types/span.h"
#include "encore/error.h"

#if ENCORE_HAVE_MPI
#include <mpi.h>
#include <sys/prctl.h>
#endif

namespace encore::dist_internal {
namespace {

using Clock = std::chrono::steady_clock;

struct Group {
  int32_t id = -1;
  int rank = 0;
  int size = 1;
  std::atomic<double> timeout_s{300.0};
  std::mutex mu;
  absl::Status broken;   // the first failure; OK while the group works
#if ENCORE_HAVE_MPI
  MPI_Comm comm = MPI_COMM_NULL;
#endif
  // The chunk buffer of the group's collectives (NOTE [ Staged collectives ]);
  // the communication thread's only.
  std::shared_ptr<char[]> staging;
  int64_t staging_bytes = 0;
  // Set when a caller gave up on a call of this group because the thread
  // stopped answering: from then on the thread never touches the callers'
  // memory again (NOTE [ A thread that stops answering ]).
  std::mutex caller_mu;
  bool caller_gone = false;   // guarded by caller_mu
};

// NOTE [ Chunked collectives ]: MPI counts are ints, so a CPU collective
// is issued as chunks of at most chunk_bytes (whole elements), one after the
// other, and waited for against one deadline. The chunks depend only on the
// count and the dtype, which every rank shares, so every rank issues the same
// calls in the same order. A broadcast of 2 GiB or more failed with
// MPI_ERR_COUNT, and one of 4 GiB or more (or an all-reduce of 2^32 elements)
// moved only the count modulo 2^32 and returned OK.
//
// NOTE [ Staged collectives ]: MPI never sees the caller's memory. Each
// chunk is copied into a buffer the engine owns, reduced or broadcast there,
// and copied back only when it completed. A request abandoned at its
// deadline keeps its buffer alive (in orphans_) until a late peer completes
// it, so the late completion writes only engine memory. Before, the request
// held the tensor's raw pointer: the caller, told that the call failed,
// freed the tensor, the caching allocator gave the block to another tensor,
// and the late peer's data landed in that one (heap corruption); a tensor
// the caller kept changed at some later time. The other ways out were
// worse for a user: keeping the tensor's storage alive still lets the
// tensor change under the caller long after the error, and MPI_Abort at
// the deadline would end the job instead of giving back an error the
// program can act on (log, checkpoint, make a new group). The price is two
// copies per byte on the communication thread (the copy in runs while the
// caller's backward goes on); the buffer is at most one chunk (64 MiB: a
// default 25 MiB DDP bucket goes in one) and is kept for the group's next
// collective. So after a failed call each chunk of the tensor holds either
// what it held before the call or its result, and nothing writes to it after
// the call returns (encore/dist.h).
//
// NOTE [ Ranks agree on each call ]: every collective (and all_gather(),
// the host call) starts by gathering each rank's description of it (kind,
// dtype, count, reduce op, root) and goes on only if all are the same;
// otherwise every rank returns kFailedPrecondition naming the ranks whose
// call differs, before any data moves, and the group stays usable (its
// ranks still agree on which call is which; unless a rank had already
// given up on the group at a deadline). Before, MPI paired whatever the
// ranks called: an all-reduce of
// 16 float32 against one of 16 int32 summed bits of one type as the other
// and returned OK with wrong values on both ranks; counts that differed
// gave MPI_ERR_TRUNCATE on one rank and a timeout on the other, after which
// the world's next group could not be made; sum against average, or two
// roots, silently gave the ranks different results. A barrier is the
// gathering alone (no rank completes it before every rank joined), so it
// costs no more than before; every other call pays one small all-gather
// (bench/RESULTS.md, "Collectives agree on each call"). A rank that gives
// up on the gathering keeps its first chunk staged: when a late peer
// completes the gathering, the abandoned request's continuation starts that
// chunk's call, so the late peer's call of one chunk still completes (with
// this rank's contribution) as it did before the gathering existed; a
// larger one completes its first chunk and times out on the second, as
// before (NOTE [ Staged collectives ]). Every call on a group's
// communicator agrees first: the collectives, all_gather() and
// broadcast_bytes() (NCCL's unique id), so no two kinds of call can pair.
//
// NOTE [ Bounded group creation ]: a group's communicator is made with
// MPI_Comm_idup polled against the group's timeout, like a collective:
// MPI_Comm_dup waited for a missing peer without bound (forever, for one
// that died or never calls create). A rank that gives up returns
// kDeadlineExceeded and keeps the request, with the handle it writes, as
// an orphan. A late peer completes it: the late peer's create may then
// succeed, and its group's first call fails within the timeout, since the
// rank that gave up never calls on that communicator (nor frees it); a
// process's first create, which then duplicates the new communicator for
// the capture agreement, fails within the timeout instead. Open
// MPI makes a duplicate in several rounds of collectives on the parent,
// each posted as the one before completes, so any other collective on the
// parent would come between them, and two ranks would pair the rounds
// with different calls. Hence: nothing but duplicates runs on
// MPI_COMM_WORLD; a duplicate of the world starts only once every earlier
// one on this rank has completed (waited for within the new create's
// deadline); and a create is one duplicate of the world on every rank (the
// capture agreement's communicator duplicates the first group's, not the
// world), so every rank's n-th duplicate of the world is the same call.
// (Seen with Open MPI 4.1 without the wait: a rank's next create, started
// before the late peer joined the abandoned one, interleaved with it; the
// late peer's create and its next one failed, and the first rank's next
// group timed out in its first call.)
constexpr int64_t kDefaultChunkBytes = int64_t{64} << 20;
std::atomic<int64_t> chunk_bytes{kDefaultChunkBytes};

#if ENCORE_HAVE_MPI
// What an abandoned request does once a late peer completes it: starts the
// call that followed it in the protocol (writing its request) and returns
// the buffers that call uses, or returns null when nothing follows.
using Continuation = std::function<std::shared_ptr<void>(MPI_Request*)>;

// Starts one nonblocking MPI call, writing its request; returns MPI's code.
using Start = std::function<int(MPI_Request*)>;

// The continuation that starts `start`'s call, on `buffers`.
Continuation starting(Start start, std::shared_ptr<void> buffers) {
  return [start = std::move(start), buffers = std::move(buffers)](MPI_Request* req) -> std::shared_ptr<void> {
    return start(req) == MPI_SUCCESS ? buffers : nullptr;
  };
}

// One request abandoned at its deadline and the buffers it reads or writes.
struct Orphan {
  MPI_Request request;
  std::shared_ptr<void> buffers;
  bool world_dup = false;   // an MPI_Comm_idup of MPI_COMM_WORLD (NOTE [ Bounded group creation ])
  Continuation then;        // null: nothing follows
};

absl::Status mpi_status(int code, const std::string& where_) {
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  if (MPI_Error_string(code, text, &len) != MPI_SUCCESS) len = 0;
  return absl::UnavailableError(absl::StrCat(where_, ": MPI error ", code, ": ", std::string(text, len)));
}

MPI_Datatype mpi_type(DType d) {
  switch (d) {
    case kFloat32: return MPI_FLOAT;
    case kInt32: return MPI_INT32_T;
    case kInt64: return MPI_INT64_T;
    default: return MPI_DATATYPE_NULL;
  }
}

// Starts one chunk's call, n elements of `dtype` at buf (NOTE [ Chunked collectives ]).
int start_chunk(MPI_Comm comm, CollKind kind, DType dtype, int root, char* buf, int64_t n, MPI_Request* req) {
  return kind == CollKind::kAllReduce
             ? MPI_Iallreduce(MPI_IN_PLACE, buf, static_cast<int>(n), mpi_type(dtype), MPI_SUM, comm, req)
             : MPI_Ibcast(buf, static_cast<int>(n * dtype_size(dtype)), MPI_BYTE, root, comm, req);
}

// A rank's description of a collective (NOTE [ Ranks agree on each call ]):
// the fields that do not apply to its kind are zero.
constexpr int kCallWords = 5;
using CallWords = std::array<int64_t, kCallWords>;
CallWords describe(const Work& w) {
  const bool reduces = w.kind == CollKind::kAllReduce, moves = w.kind != CollKind::kBarrier;
  const bool typed = w.kind == CollKind::kAllReduce || w.kind == CollKind::kBroadcast;
  const bool rooted = w.kind == CollKind::kBroadcast || w.kind == CollKind::kBroadcastBytes;
  return {static_cast<int64_t>(w.kind), typed ? static_cast<int64_t>(w.dtype) : 0, moves ? w.count : 0,
          reduces ? static_cast<int64_t>(w.op) : 0, rooted ? w.root : 0};
}

std::string call_text(const CallWords& c) {
  const auto kind = static_cast<CollKind>(c[0]);
  const std::string elements =
      absl::StrCat(c[2], " ", std::string(dtype_name(static_cast<DType>(c[1]))), c[2] == 1 ? " element" : " elements");
  switch (kind) {
    case CollKind::kAllReduce:
      return absl::StrCat("all_reduce (",
                          static_cast<dist::ReduceOp>(c[3]) == dist::ReduceOp::kSum ? "sum" : "average", ") of ",
                          elements);
    case CollKind::kBroadcast: return absl::StrCat("broadcast from rank ", c[4], " of ", elements);
    case CollKind::kBarrier: return "barrier";
    case CollKind::kAllGather: return "all_gather of one value";
    case CollKind::kBroadcastBytes: return absl::StrCat("broadcast of ", c[2], " bytes from rank ", c[4]);
  }
  return "an unknown collective";
}

// The gathered descriptions (rank r's at r * kCallWords): OK when every rank's
// equals `mine`, else kFailedPrecondition naming the ranks that differ.
absl::Status check_calls(absl::Span<const int64_t> all, const CallWords& mine, const std::string& where_) {
  std::string differ;
  int count = 0;
  const int ranks = static_cast<int>(all.size()) / kCallWords;
  for (int r = 0; r < ranks; ++r) {
    CallWords theirs;
    std::copy_n(all.begin() + r * kCallWords, kCallWords, theirs.begin());
    if (theirs == mine) continue;
    if (++count <= 4) absl::StrAppend(&differ, "; rank ", r, ": ", call_text(theirs));
  }
  if (count == 0) return absl::OkStatus();
  if (count > 4) absl::StrAppend(&differ, "; and ", count - 4, " more");
  return absl::FailedPreconditionError(absl::StrFormat(
      "%s: the ranks called different collectives on this group (their programs diverged): this rank: %s%s; "
      "nothing was sent",
      where_, call_text(mine), differ));
}
#endif

// NOTE [ A thread that stops answering ]: the communication thread bounds
// each job it runs by the job's own deadline (its group's timeout, counted
// from the job's start), so a caller's wait() needs no deadline of its own:
// a collective queued behind others (DDP's buckets, another group's calls)
// waits for each of them in turn, each within its own timeout. Before, wait()
// gave up timeout + 30 s after it began, counting the time the collective
// spent queued: a collective behind slow buckets got a false "communication
// thread did not answer" while the thread worked normally, and its job,
// left in the queue, later ran and wrote the tensor the caller had been
// told had failed. The one case wait() still catches is a thread that stopped
// answering: its current job ran answer_slack_s past its own deadline (MPI
// itself stuck). The waiter then takes its job out of the queue (or, if it
// is the stuck one, drops its status and bars the thread from the callers'
// memory, Group::caller_gone), breaks the group and returns kInternal.
std::atomic<double> answer_slack_s{30.0};   // set_answer_slack() for tests

// One closure for the communication thread.
struct Job {
  uint64_t ticket = 0;
  // The bound fn keeps (its group's timeout; null: unbounded), inside a group
  // that fn keeps alive or whose caller waits for fn.
  const std::atomic<double>* timeout_s = nullptr;
  int32_t group = -1;                               // for messages; -1 for the engine's own calls
  const char* what = "";
  std::function<absl::Status()> fn;
};

// The job the thread runs, for wait()'s watchdog.
struct Running {
  uint64_t ticket = 0;   // 0: none
  Clock::time_point since;
  double bound_s = 0;
  int32_t group = -1;
  const char* what = "";
};

// The engine: groups, the queue and the communication thread.
class Engine {
 public:
  static Engine& get() {
    static Engine* e = [] {
      auto* engine = new Engine();   // leaked: the thread is stopped by the atexit handler
      std::atexit([] { get().shutdown(); });
      return engine;
    }();
    return *e;
  }

  Group& group(int32_t id) { return *group_ptr(id); }
  std::shared_ptr<Group> group_ptr(int32_t id) {
    std::lock_guard<std::mutex> lk(groups_mu_);
    auto it = groups_.find(id);
    ENCORE_CHECK_CODE(it != groups_.end(), kInternal, "dist: no process group %d (was it destroyed?)", id);
    return it->second;
  }

  absl::StatusOr<int32_t> new_group(const dist::Environment& env, double timeout_s,
                                    [[maybe_unused]] int32_t parent) {
    auto g = std::make_shared<Group>();
    g->timeout_s = timeout_s;
    const bool use_mpi = env.world_size > 1 || env.launcher == "mpirun" || env.launcher == "slurm";
#if ENCORE_HAVE_MPI
    if (use_mpi) {
      ENCORE_DIST_RETURN_IF_ERROR(start_mpi());
      MPI_Comm from = MPI_COMM_WORLD;
      if (parent >= 0) {
        from = group(parent).comm;
        if (from == MPI_COMM_NULL) {
          return absl::InternalError(
              absl::StrFormat("dist::ProcessGroup::create: group %d has no communicator", parent));
        }
      }
      Group* gp = g.get();
      ENCORE_DIST_RETURN_IF_ERROR(
          run_on_thread(&gp->timeout_s, "ProcessGroup::create", [&] { return make_comm(*gp, from); }));
      if (gp->rank != env.rank || gp->size != env.world_size) {
        return absl::FailedPreconditionError(absl::StrFormat(
            "dist::ProcessGroup::create: the launcher (%s) says rank %d of %d, MPI says rank %d of %d; start the "
            "job with mpirun or srun (torchrun's rendezvous is not supported)",
            env.launcher, env.rank, env.world_size, gp->rank, gp->size));
      }
    }
#else
    if (use_mpi && env.world_size > 1) {
      return absl::FailedPreconditionError(absl::StrFormat(
          "dist::ProcessGroup::create: the launcher (%s) asks for %d processes (this is rank %d), but encore was "
          "built without MPI, so only a world of one process works; install libopenmpi-dev and reconfigure",
          env.launcher, env.world_size, env.rank));
    }
#endif
    if (!use_mpi && env.world_size > 1) {
      return absl::FailedPreconditionError(
          absl::StrFormat("dist::ProcessGroup::create: %d processes without MPI (launcher %s)", env.world_size,
                          env.launcher));
    }
    std::lock_guard<std::mutex> lk(groups_mu_);
    g->id = next_group_++;
    const int32_t id = g->id;
    groups_.emplace(id, std::move(g));
    return id;
  }

  // The group leaves the table; a job still queued or running for it (one
  // its caller gave up on: NOTE [ A thread that stops answering ]) keeps it
  // alive until the job ends.
  void release(int32_t id) {
    std::shared_ptr<Group> g;
    {
      std::lock_guard<std::mutex> lk(groups_mu_);
      auto it = groups_.find(id);
      if (it == groups_.end()) return;
      g = std::move(it->second);
      groups_.erase(it);
    }
#if ENCORE_HAVE_MPI
    bool healthy = false;
    {
      std::lock_guard<std::mutex> lk(g->mu);
      healthy = g->broken.ok();
    }
    if (g->comm != MPI_COMM_NULL && mpi_started_ && healthy) {
      Group* gp = g.get();
      (void)run_on_thread(&gp->timeout_s, "MPI_Comm_free", [gp]() -> absl::Status {
        MPI_Comm_free(&gp->comm);
        return absl::OkStatus();
      });
    }
#endif
  }

  uint64_t submit(int32_t id, const Work& w, const char* what) {
    Group& g = group(id);
    const uint64_t ticket = next_ticket_.fetch_add(1);
    {
      std::lock_guard<std::mutex> lk(g.mu);
      if (!g.broken.ok()) {
        complete(ticket, absl::Status(g.broken.code(),
                                      absl::StrCat(where(id, what), ": the group failed earlier: ", g.broken.message())));
        return ticket;
      }
    }
    if (g.size == 1) {   // one process: the collective is the identity
      complete(ticket, absl::OkStatus());
      return ticket;
    }
#if ENCORE_HAVE_MPI
    {
      std::lock_guard<std::mutex> lk(mu_);
      if (stop_) {
        done_[ticket] = absl::FailedPreconditionError(
            absl::StrCat(where(id, what), ": MPI was already finalized at exit"));
        return ticket;
      }
    }
    std::shared_ptr<Group> gp = group_ptr(id);   // the job keeps the group: its caller may give up and destroy it
    const auto submitted = Clock::now();
    enqueue({ticket, &gp->timeout_s, id, what, [this, gp, w, what, submitted]() {
      absl::Status s = run_collective(*gp, w, what);
      std::lock_guard<std::mutex> lk(mu_);
      times_.in_flight_s += std::chrono::duration<double>(Clock::now() - submitted).count();
      times_.collectives += 1;
      return s;
    }});
#endif
    return ticket;
  }

  // Queues fn as a job of the group, bounded by its timeout (for tests).
  uint64_t submit_job(int32_t id, std::function<absl::Status()> fn, const char* what) {
    std::shared_ptr<Group> gp = group_ptr(id);
    const uint64_t ticket = next_ticket_.fetch_add(1);
#if ENCORE_HAVE_MPI
    if (mpi_started_) {
      enqueue({ticket, &gp->timeout_s, id, what, [gp, fn = std::move(fn)] { return fn(); }});
      return ticket;
    }
#endif
    complete(ticket,
             absl::FailedPreconditionError(absl::StrCat(where(id, what), ": no communication thread (no MPI)")));
    return ticket;
  }

  // Waits for the ticket's job. The thread keeps each job's deadline; this
  // only catches a thread that stopped answering: one whose current job has
  // run answer_slack_s past its own deadline (NOTE [ A thread that stops
  // answering ]), however long the ticket waited behind other jobs.
  absl::Status wait(int32_t id, uint64_t ticket) {
    std::unique_lock<std::mutex> lk(mu_);
    const auto start = Clock::now();
    while (!done_.contains(ticket)) {
      if (running_.ticket == 0 || std::isinf(running_.bound_s)) {
        done_cv_.wait(lk);   // the thread says when it starts or ends a job
        continue;
      }
      const double allowed_s = running_.bound_s + answer_slack_s.load();
      const auto overdue =
          running_.since + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(allowed_s));
      if (Clock::now() < overdue) {
        done_cv_.wait_until(lk, overdue);
        continue;
      }
      return give_up(id, ticket, lk);
    }
    times_.blocked_s += std::chrono::duration<double>(Clock::now() - start).count();
    absl::Status s = std::move(done_[ticket]);
    done_.erase(ticket);
    return s;
  }

  // wait()'s way out when the thread stopped answering (lk holds mu_): the
  // ticket's job never runs, or never touches the caller's memory again,
  // and the group is broken, since the ranks no longer agree on which call
  // is which.
  absl::Status give_up(int32_t id, uint64_t ticket, std::unique_lock<std::mutex>& lk) {
    const double ran = std::chrono::duration<double>(Clock::now() - running_.since).count();
    std::string stuck = running_.ticket == ticket ? "this call" : absl::StrCat("dist::", running_.what);
    if (running_.group >= 0 && running_.ticket != ticket) absl::StrAppend(&stuck, " of group ", running_.group);
    const absl::Status s = absl::InternalError(absl::StrFormat(
        "%s: the communication thread did not answer: it has run %s for %.0f s, %.0f s past that call's own "
        "deadline of %g s (MPI itself is stuck); this call is abandoned and the group broken",
        where(id, "wait"), stuck, ran, ran - running_.bound_s, running_.bound_s));
    auto queued = std::find_if(queue_.begin(), queue_.end(), [&](const Job& j) { return j.ticket == ticket; });
    if (queued != queue_.end()) {
      queue_.erase(queued);
    } else {
      abandoned_.insert(ticket);   // complete() drops its status
    }
    lk.unlock();
    Group& g = group(id);
    {
      std::lock_guard<std::mutex> guard(g.caller_mu);
      g.caller_gone = true;
    }
    return fail(g, s);
  }

  absl::Status fail(Group& g, absl::Status s) {
    std::lock_guard<std::mutex> lk(g.mu);
    if (g.broken.ok()) g.broken = s;
    return s;
  }

  absl::StatusOr<std::vector<uint64_t>> all_gather(int32_t id, uint64_t value, const char* what) {
    Group& g = group(id);
    std::vector<uint64_t> out(g.size, value);
    if (g.size == 1) return out;
#if ENCORE_HAVE_MPI
    {
      std::lock_guard<std::mutex> lk(g.mu);
      if (!g.broken.ok()) return absl::Status(g.broken.code(), absl::StrCat(where(id, what), ": ", g.broken.message()));
    }
    Group* gp = &g;
    // The engine's own buffers (NOTE [ Staged collectives ]): [0] is this rank's value.
    auto buf = std::make_shared<std::vector<uint64_t>>(g.size + 1, value);
    ENCORE_DIST_RETURN_IF_ERROR(run_on_thread(&gp->timeout_s, what, [&]() -> absl::Status {
      const Start start = [buf, comm = gp->comm](MPI_Request* req) {
        return MPI_Iallgather(buf->data(), 1, MPI_UINT64_T, buf->data() + 1, 1, MPI_UINT64_T, comm, req);
      };
      const auto deadline = deadline_of(*gp);
      ENCORE_DIST_RETURN_IF_ERROR(agree(*gp, Work{.kind = CollKind::kAllGather, .count = 1, .dtype = kInt64}, what,
                                        deadline, starting(start, buf)));
      return start_and_poll(*gp, start, what, deadline, buf);
    }));
    std::copy(buf->begin() + 1, buf->end(), out.begin());
#endif
    return out;
  }

  absl::Status broadcast_bytes(int32_t id, void* data, int64_t nbytes, int root, const char* what) {
    Group& g = group(id);
    if (g.size == 1) return absl::OkStatus();
#if ENCORE_HAVE_MPI
    if (nbytes > kDefaultChunkBytes) {
      return absl::InvalidArgumentError(absl::StrFormat("%s: %d bytes; at most %d", where(id, what), nbytes,
                                                        kDefaultChunkBytes));
    }
    Group* gp = &g;
    const char* bytes = static_cast<const char*>(data);
    auto buf = std::make_shared<std::vector<char>>(bytes, bytes + nbytes);   // NOTE [ Staged collectives ]
    ENCORE_DIST_RETURN_IF_ERROR(run_on_thread(&gp->timeout_s, what, [&]() -> absl::Status {
      const Start start = [buf, root, comm = gp->comm](MPI_Request* req) {
        return MPI_Ibcast(buf->data(), static_cast<int>(buf->size()), MPI_BYTE, root, comm, req);
      };
      const auto deadline = deadline_of(*gp);
      const Work call{.kind = CollKind::kBroadcastBytes, .count = nbytes, .root = root};
      ENCORE_DIST_RETURN_IF_ERROR(agree(*gp, call, what, deadline, starting(start, buf)));
      return start_and_poll(*gp, start, what, deadline, buf);
    }));
    std::copy(buf->begin(), buf->end(), static_cast<char*>(data));
    return absl::OkStatus();
#else
    return absl::OkStatus();
#endif
  }

  int64_t abandoned() const { return orphan_count_.load(); }

  EngineTimes times() {
    std::lock_guard<std::mutex> lk(mu_);
    EngineTimes t = times_;
    t.mpi_calls = mpi_calls_.load();
    return t;
  }

  std::string where(int32_t id, const char* what) { return where_of(group(id), what); }

 private:
  Engine() = default;

  // Also for a group not registered yet (being made).
  static std::string where_of(const Group& g, const char* what) {
    return absl::StrFormat("dist::%s on rank %d of %d", what, g.rank, g.size);
  }

  void complete(uint64_t ticket, absl::Status s) {
    {
      std::lock_guard<std::mutex> lk(mu_);
      if (running_.ticket == ticket) running_ = {};
      if (!abandoned_.erase(ticket)) done_[ticket] = std::move(s);
    }
    done_cv_.notify_all();
  }

#if ENCORE_HAVE_MPI
  absl::Status start_mpi() {
    std::lock_guard<std::mutex> lk(start_mu_);
    if (mpi_started_) return init_status_;
    mpi_started_ = true;
    thread_ = std::thread([this] { loop(); });
    // Unbounded (null): MPI_Init waits for every process the launcher started.
    init_status_ = run_on_thread(nullptr, "MPI_Init_thread", [this]() -> absl::Status {
      int initialized = 0;
      MPI_Initialized(&initialized);
      if (initialized) {
        int provided = 0;
        MPI_Query_thread(&provided);
        if (provided < MPI_THREAD_SERIALIZED) {
          return absl::FailedPreconditionError(
              "dist: MPI was initialized by the program with less than MPI_THREAD_SERIALIZED; encore calls MPI from "
              "a thread of its own: initialize it with MPI_Init_thread(MPI_THREAD_SERIALIZED) or let encore do it");
        }
      } else {
        int provided = 0;
        int rc = MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided);
        if (rc != MPI_SUCCESS) return mpi_status(rc, "dist: MPI_Init_thread");
        we_initialized_ = true;
      }
      MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
      return absl::OkStatus();
    });
    return init_status_;
  }

  // Runs fn on the communication thread and waits for it. `timeout_s` is the
  // bound fn keeps (its group's timeout; null: unbounded), `what` names it.
  // Waits without a watchdog: fn may point into the caller's frame.
  absl::Status run_on_thread(const std::atomic<double>* timeout_s, const char* what,
                             std::function<absl::Status()> fn) {
    {
      std::lock_guard<std::mutex> lk(mu_);
      // After exit's shutdown (a group destroyed by a later static destructor): nobody would answer.
      if (stop_) return absl::FailedPreconditionError("dist: MPI was already finalized at exit");
    }
    const uint64_t ticket = next_ticket_.fetch_add(1);
    enqueue({ticket, timeout_s, -1, what, std::move(fn)});
    std::unique_lock<std::mutex> lk(mu_);
    done_cv_.wait(lk, [&] { return done_.contains(ticket); });
    absl::Status s = std::move(done_[ticket]);
    done_.erase(ticket);
    return s;
  }

  void enqueue(Job job) {
    {
      std::lock_guard<std::mutex> lk(mu_);
      queue_.push_back(std::move(job));
    }
    queue_cv_.notify_one();
  }

  void loop() {
    // The poll loop sleeps 20-200 us between tests of a request; Linux adds
    // its default timer slack (50 us) to every such sleep, which made a
    // barrier between two processes of one machine take about 55 us.
    prctl(PR_SET_TIMERSLACK, 1UL, 0UL, 0UL, 0UL);
    for (;;) {
      Job job;
      {
        std::unique_lock<std::mutex> lk(mu_);
        while (queue_.empty() && !stop_) {
          if (orphans_.empty()) {
            queue_cv_.wait(lk);
          } else {
            lk.unlock();
            poll_orphans();
            std::this_thread::sleep_for(std::chrono::microseconds(200));
            lk.lock();
          }
        }
        if (queue_.empty()) break;   // stop_
        job = std::move(queue_.front());
        queue_.pop_front();
        running_ = {job.ticket, Clock::now(),
                    job.timeout_s != nullptr ? job.timeout_s->load() : std::numeric_limits<double>::infinity(),
                    job.group, job.what};
      }
      done_cv_.notify_all();   // waiters measure the new job
      absl::Status s = job.fn();
      complete(job.ticket, std::move(s));
    }
    // Give abandoned requests a moment to be completed by late peers.
    const auto grace = Clock::now() + std::chrono::seconds(2);
    while (!orphans_.empty() && Clock::now() < grace) {
      poll_orphans();
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    if (we_initialized_ && orphans_.empty()) MPI_Finalize();
  }

  void poll_orphans() {
    for (size_t i = 0; i < orphans_.size();) {
      int flag = 0;
      MPI_Test(&orphans_[i].request, &flag, MPI_STATUS_IGNORE);
      if (flag && orphans_[i].then) {
        Continuation then = std::move(orphans_[i].then);
        orphans_[i].then = nullptr;
        if (std::shared_ptr<void> next = then(&orphans_[i].request)) {
          orphans_[i].buffers = std::move(next);   // the next call of the protocol, polled from now on
          ++i;
          continue;
        }
      }
      if (flag) {
        orphans_[i] = std::move(orphans_.back());
        orphans_.pop_back();
      } else {
        ++i;
      }
    }
    orphan_count_.store(static_cast<int64_t>(orphans_.size()));
  }

  // The group's deadline for a call that starts now.
  static Clock::time_point deadline_of(const Group& g) {
    const std::chrono::duration<double> timeout(g.timeout_s.load());   // at most kMaxTimeoutSeconds: no overflow
    return Clock::now() + std::chrono::duration_cast<Clock::duration>(timeout);
  }

  // Polls `req` until it completes or `deadline` passes; then it keeps
  // `buffers` (what the request reads and writes) until a late peer completes it.
  // `then` is what the request's protocol does next, run if a late peer
  // completes it after this rank gave up (Orphan::then).
  absl::Status poll(Group& g, MPI_Request& req, const char* what, Clock::time_point deadline,
                    std::shared_ptr<void> buffers, bool world_dup = false, Continuation then = nullptr) {
    const double timeout = g.timeout_s.load();
    int spins = 0;
    for (;;) {
      int flag = 0;
      int rc = MPI_Test(&req, &flag, MPI_STATUS_IGNORE);
      if (rc != MPI_SUCCESS) return fail(g, mpi_status(rc, where_of(g, what)));
      if (flag) return absl::OkStatus();
      // A late peer of an abandoned call may be waiting for its continuation.
      if (!orphans_.empty() && spins % 64 == 0) poll_orphans();
      if (Clock::now() >= deadline) {
        orphans_.push_back({req, std::move(buffers), world_dup, std::move(then)});
        orphan_count_.store(static_cast<int64_t>(orphans_.size()));
        return fail(g, absl::DeadlineExceededError(absl::StrFormat(
                           "%s: the other ranks did not join within %g s (a rank died, threw, is stuck, or runs a "
                           "step without this call); raise dist::Options::timeout_s or ENCORE_DIST_TIMEOUT if they "
                           "are only slow",
                           where_of(g, what), timeout)));
      }
      // Spin briefly (a collective between ranks of one machine takes microseconds), yielding, then sleep.
      ++spins;
      if (spins <= 512) {
        std::this_thread::yield();
      } else {
        std::this_thread::sleep_for(std::chrono::microseconds(spins > 1024 ? 200 : 20));
      }
    }
  }

  // Starts a call and polls it (poll() above; `then` as there).
  absl::Status start_and_poll(Group& g, const Start& start, const char* what, Clock::time_point deadline,
                              std::shared_ptr<void> buffers, Continuation then = nullptr) {
    MPI_Request req;
    const int rc = start(&req);
    mpi_calls_.fetch_add(1);
    if (rc != MPI_SUCCESS) return fail(g, mpi_status(rc, where_of(g, what)));
    return poll(g, req, what, deadline, std::move(buffers), false, std::move(then));
  }

  // Divides the n elements at p by the group's size (an average after the sum).
  static void divide(void* p, int64_t n, DType dtype, int size) {
    if (dtype == kFloat32) {
      float* f = static_cast<float*>(p);
      const float d = static_cast<float>(size);
      for (int64_t i = 0; i < n; ++i) f[i] = f[i] / d;
    } else if (dtype == kInt32) {
      int32_t* v = static_cast<int32_t*>(p);
      for (int64_t i = 0; i < n; ++i) v[i] /= size;
    } else if (dtype == kInt64) {
      int64_t* v = static_cast<int64_t*>(p);
      for (int64_t i = 0; i < n; ++i) v[i] /= size;
    }
  }

  // One chunk of w: n elements at p, through the group's staging buffer
  // (NOTE [ Chunked collectives ], NOTE [ Staged collectives ]); the first
  // chunk is staged before the ranks agree on the call (NOTE [ Ranks agree
  // on each call ]).
  absl::Status run_chunk(Group& g, const Work& w, char* p, int64_t n, bool first, const char* what,
                         Clock::time_point deadline) {
    const int64_t bytes = n * dtype_size(w.dtype);
    if (g.staging_bytes < bytes) {
      g.staging = std::make_shared_for_overwrite<char[]>(bytes);
      g.staging_bytes = bytes;
    }
    char* buf = g.staging.get();
    const bool sends = w.kind == CollKind::kAllReduce || g.rank == w.root;
    const bool receives = w.kind == CollKind::kAllReduce || g.rank != w.root;
    if (sends) ENCORE_DIST_RETURN_IF_ERROR(copy_for_caller(g, buf, p, bytes, what));
    const Start start = [buf, comm = g.comm, kind = w.kind, dtype = w.dtype, root = w.root, n](MPI_Request* req) {
      return start_chunk(comm, kind, dtype, root, buf, n, req);
    };
    absl::Status s = first ? agree(g, w, what, deadline, starting(start, g.staging)) : absl::OkStatus();
    if (s.ok()) s = start_and_poll(g, start, what, deadline, g.staging);
    if (!s.ok()) {
      if (absl::IsDeadlineExceeded(s)) {   // an orphan may hold the buffer: the group's next collective gets another
        g.staging.reset();
        g.staging_bytes = 0;
      }
      return s;
    }
    if (w.kind == CollKind::kAllReduce && w.op == dist::ReduceOp::kAverage) divide(buf, n, w.dtype, g.size);
    if (receives) ENCORE_DIST_RETURN_IF_ERROR(copy_for_caller(g, p, buf, bytes, what));
    return absl::OkStatus();
  }

  // Gathers every rank's description of w and compares (NOTE [ Ranks agree
  // on each call ]). `next` starts the call that follows a matching
  // agreement (null: none); this rank runs it itself after an OK, but if it
  // gives up and a late peer completes the gathering, `next` is started
  // then, as the peer expects.
  absl::Status agree(Group& g, const Work& w, const char* what, Clock::time_point deadline, Continuation next) {
    const CallWords mine = describe(w);
    auto calls = std::make_shared<std::vector<int64_t>>(kCallWords * (g.size + 1));
    std::copy(mine.begin(), mine.end(), calls->begin());   // [0, kCallWords): this rank's, then every rank's
    const Start gather = [calls, comm = g.comm](MPI_Request* req) {
      return MPI_Iallgather(calls->data(), kCallWords, MPI_INT64_T, calls->data() + kCallWords, kCallWords,
                            MPI_INT64_T, comm, req);
    };
    Continuation then;
    if (next) {
      then = [calls, mine, next = std::move(next)](MPI_Request* next_req) -> std::shared_ptr<void> {
        const absl::Span<const int64_t> all = absl::MakeConstSpan(*calls).subspan(kCallWords);
        if (!check_calls(all, mine, "").ok()) return nullptr;   // the late peer stops here too
        return next(next_req);
      };
    }
    ENCORE_DIST_RETURN_IF_ERROR(start_and_poll(g, gather, what, deadline, calls, std::move(then)));
    return check_calls(absl::MakeConstSpan(*calls).subspan(kCallWords), mine, where_of(g, what));
  }

  // A copy between the caller's memory and the staging buffer, unless a
  // caller gave up on the group (NOTE [ A thread that stops answering ]).
  absl::Status copy_for_caller(Group& g, void* dst, const void* src, int64_t bytes, const char* what) {
    std::lock_guard<std::mutex> lk(g.caller_mu);
    if (g.caller_gone) {
      return absl::InternalError(absl::StrCat(where_of(g, what), ": abandoned by its caller"));
    }
    std::memcpy(dst, src, bytes);
    return absl::OkStatus();
  }

  absl::Status run_collective(Group& g, const Work& w, const char* what) {
    {
      std::lock_guard<std::mutex> lk(g.mu);
      if (!g.broken.ok()) {
        return absl::Status(g.broken.code(),
                            absl::StrCat(where_of(g, what), ": the group failed earlier: ", g.broken.message()));
      }
    }
    const auto deadline = deadline_of(g);
    // A barrier, or a collective of no elements, is the agreement alone.
    if (w.kind == CollKind::kBarrier || w.count == 0) return agree(g, w, what, deadline, nullptr);
    const int64_t size = dtype_size(w.dtype);
    const int64_t step = std::max<int64_t>(1, chunk_bytes.load() / size);   // elements per chunk
    for (int64_t first = 0; first < w.count; first += step) {
      const int64_t n = std::min(step, w.count - first);
      ENCORE_DIST_RETURN_IF_ERROR(
          run_chunk(g, w, static_cast<char*>(w.data) + first * size, n, first == 0, what, deadline));
    }
    return absl::OkStatus();
  }

  // Makes g.comm, a duplicate of `parent` (MPI_COMM_WORLD or another
  // group's), within g's timeout (NOTE [ Bounded group creation ]).
  absl::Status make_comm(Group& g, MPI_Comm parent) {
    const char* what = "ProcessGroup::create";
    MPI_Comm_rank(parent, &g.rank);   // for the messages until the duplicate exists
    MPI_Comm_size(parent, &g.size);
    const auto deadline = deadline_of(g);
    const bool world_dup = parent == MPI_COMM_WORLD;
    if (world_dup) ENCORE_DIST_RETURN_IF_ERROR(finish_world_dups(g, what, deadline));
    auto comm = std::make_shared<MPI_Comm>(MPI_COMM_NULL);   // written when the request completes, maybe late
    MPI_Request req;
    const int rc = MPI_Comm_idup(parent, comm.get(), &req);
    if (rc != MPI_SUCCESS) return mpi_status(rc, where_of(g, what));
    ENCORE_DIST_RETURN_IF_ERROR(poll(g, req, what, deadline, comm, world_dup));
    g.comm = *comm;
    MPI_Comm_set_errhandler(g.comm, MPI_ERRORS_RETURN);
    MPI_Comm_rank(g.comm, &g.rank);
    MPI_Comm_size(g.comm, &g.size);
    return absl::OkStatus();
  }

  // Waits until `deadline` for the duplicates of the world that earlier
  // creates abandoned to be completed by their late peers, so that this
  // rank's duplicates of the world pair with the others' in order (NOTE
  // [ Bounded group creation ]).
  absl::Status finish_world_dups(const Group& g, const char* what, Clock::time_point deadline) {
    const double timeout = g.timeout_s.load();
    for (;;) {
      poll_orphans();
      if (std::none_of(orphans_.begin(), orphans_.end(), [](const Orphan& o) { return o.world_dup; })) {
        return absl::OkStatus();
      }
      if (Clock::now() >= deadline) {
        return absl::DeadlineExceededError(absl::StrFormat(
            "%s: an earlier dist::ProcessGroup::create on this rank gave up waiting for the other ranks, and they "
            "did not join it within %g s either; a new group is made only once every rank has joined the earlier "
            "one (so that the ranks' groups pair up): a rank died, is stuck, or never calls create",
            where_of(g, what), timeout));
      }
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
  }
#endif

  void shutdown() {
#if ENCORE_HAVE_MPI
    {
      std::lock_guard<std::mutex> lk(mu_);
      stop_ = true;
    }
    queue_cv_.notify_all();
    if (thread_.joinable()) thread_.join();
#endif
  }

  std::mutex groups_mu_;
  absl::flat_hash_map<int32_t, std::shared_ptr<Group>> groups_;
  int32_t next_group_ = 0;
  std::atomic<uint64_t> next_ticket_{1};
  std::atomic<int64_t> mpi_calls_{0};
  std::atomic<int64_t> orphan_count_{0};   // orphans_.size(), for any thread

  std::mutex mu_;   // queue_, running_, done_, abandoned_, stop_
  std::condition_variable queue_cv_, done_cv_;
  std::deque<Job> queue_;
  Running running_;
  absl::flat_hash_map<uint64_t, absl::Status> done_;
  absl::flat_hash_set<uint64_t> abandoned_;   // given up by wait() while running
  bool stop_ = false;
  EngineTimes times_;

#if ENCORE_HAVE_MPI
  std::mutex start_mu_;
  bool mpi_started_ = false;
  bool we_initialized_ = false;
  absl::Status init_status_;
  std::thread thread_;
  std::vector<Orphan> orphans_;   // communication thread only
#endif
};

}  // namespace

absl::StatusOr<int32_t> new_group(const dist::Environment& env, double timeout_s, int32_t parent) {
  return Engine::get().new_group(env, timeout_s, parent);
}
void release_group(int32_t group) { Engine::get().release(group); }
int group_rank(int32_t group) { return Engine::get().group(group).rank; }
int group_size(int32_t group) { return Engine::get().group(group).size; }
double group_timeout(int32_t group) { return Engine::get().group(group).timeout_s.load(); }
void set_group_timeout(int32_t group, double seconds) { Engine::get().group(group).timeout_s = seconds; }
absl::Status group_health(int32_t group) {
  Group& g = Engine::get().group(group);
  std::lock_guard<std::mutex> lk(g.mu);
  return g.broken;
}
uint64_t submit(int32_t group, const Work& work, const char* what) { return Engine::get().submit(group, work, what); }
absl::Status wait(int32_t group, uint64_t ticket) { return Engine::get().wait(group, ticket); }
absl::StatusOr<std::vector<uint64_t>> all_gather(int32_t group, uint64_t value, const char* what) {
  return Engine::get().all_gather(group, value, what);
}
absl::Status broadcast_bytes(int32_t group, void* data, int64_t nbytes, int root, const char* what) {
  return Engine::get().broadcast_bytes(group, data, nbytes, root, what);
}
std::string where(int32_t group, const char* what) { return Engine::get().where(group, what); }
EngineTimes engine_times() { return Engine::get().times(); }
int64_t abandoned_requests() { return Engine::get().abandoned(); }
uint64_t submit_job(int32_t group, std::function<absl::Status()> fn, const char* what) {
  return Engine::get().submit_job(group, std::move(fn), what);
}
double set_answer_slack(double seconds) {
  ENCORE_CHECK(seconds > 0 && seconds <= dist::kMaxTimeoutSeconds, "dist: an answer slack of %g s", seconds);
  return answer_slack_s.exchange(seconds);
}
int64_t set_chunk_bytes(int64_t bytes) {
  ENCORE_CHECK(bytes >= 1 && bytes <= kDefaultChunkBytes, "dist: a chunk of %d bytes; it must be in [1, %d]", bytes,
               kDefaultChunkBytes);
  return chunk_bytes.exchange(bytes);
}

}  // namespace encore::dist_internal
