// Data-parallel training: the process group (who am I among how many
// processes, and the collectives between them) and DistributedDataParallel,
// the wrapper that averages gradients across processes during backward.
//
//   // mpirun -np 2 ./train   (or srun, or with one process: ./train)
//   std::shared_ptr<encore::dist::ProcessGroup> pg = encore::dist::ProcessGroup::create().value();
//   encore::nn::Mlp model({784, 128, 10});
//   model.to(pg->device());                                // cuda(local_rank) on GPUs, else the CPU
//   encore::dist::DistributedDataParallel ddp(model, pg);  // rank 0's parameters on every rank
//   encore::optim::AdamW opt(model.parameters(), {.lr = 1e-3});
//   for (...) {                                            // each rank its own shard of the batch
//     opt.zero_grad();
//     encore::Tensor loss = encore::cross_entropy(model.forward(x), y);
//     loss.backward();                                     // buckets all-reduced as their gradients are ready
//     ddp.finish();                                        // waits for the last of them (no-op if done)
//     opt.step();
//   }
//
// Who runs where. ProcessGroup::create() reads the launcher's variables
// (environment()): Open MPI's mpirun (OMPI_COMM_WORLD_RANK / _SIZE /
// _LOCAL_RANK), Slurm's srun (SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID) or
// torchrun (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT); without
// any of them the process is rank 0 of 1. CPU tensors travel over MPI;
// CUDA tensors over NCCL, whose communicator is set up over MPI (its unique
// id broadcast from rank 0). Built without MPI (meson finds no
// `dependency('mpi')`), a world of one process works and a larger one is
// refused with a message; torchrun's own rendezvous is not implemented, so a
// torchrun world of more than one process must be started by mpirun/srun.
//
// Collectives are kernels. Every collective is launched through encore's one
// launch path with the storage it reads and writes, so a captured step
// (encore/capture.h, encore/graphed.h) holds it as a node: on the CPU a node
// of the kernel list that calls MPI at every replay, on CUDA an NCCL call on
// the device's stream, recorded by stream capture. Every rank must therefore
// capture the same step; capture() compares a fingerprint of the recorded
// kernels across ranks and refuses a rank whose step differs.
//
// Ranks agree on each call. Every CPU collective (all_gather too) first
// gathers each rank's description of it (kind, dtype, element count,
// reduce op, root) and moves data only if all are the same; otherwise
// every rank throws kFailedPrecondition naming the ranks whose call
// differs (e.g. "rank 1: all_reduce (sum) of 16 i32 elements"), nothing is
// written, and the group goes on working (unless a rank already gave up on
// it at a timeout, below). That costs each call one small all-gather (a
// barrier is that all-gather alone). CUDA collectives (NCCL) are not
// checked: their calls are queued on the device's stream, where no host
// code runs between them in a captured graph.
//
// Bounded waits. MPI runs on a communication thread of its own, with
// nonblocking calls polled against a deadline (Options::timeout_s, counted
// from when the thread starts the call: one queued behind others, such as
// DDP's buckets, waits for them, each within its own timeout): a rank
// that threw, hangs or runs a step without the others' next call (one
// that calls a different collective is refused at once, above) makes the
// others fail with an encore::Error (kDeadlineExceeded) naming the call,
// the rank and the timeout, never hang. After such a failure the group is
// broken: its later collectives fail at once with the first error (make a
// new group to go on).
// A CPU tensor whose collective failed is never written afterwards (MPI
// works on encore's own buffer, in chunks of 64 MiB, and an abandoned call
// that a late rank completes writes only that buffer): a tensor of up to
// 64 MiB holds what it held before the call; a larger one holds the result
// in the chunks that completed before the failure and its old values in
// the rest. The late rank's own call may still succeed (one of at most
// 64 MiB, with this rank's contribution); its next collective on the
// group then times out.
// ProcessGroup::create() waits for the other ranks within the timeout too
// (kDeadlineExceeded, and no group). A rank that comes to create() after
// another gave up on it may still get its group (the late rank completes
// the abandoned duplicate of the world); its first call on that group then
// fails within the timeout (or, for a process's first group, whose create
// also makes the capture agreement's communicator, its create fails within
// the timeout). A rank's next create() first waits, within its own
// timeout, for the late ranks to complete the one it gave up on, so that
// the ranks' next groups pair up. (The first create() also starts MPI,
// whose MPI_Init waits for every process the launcher started, unbounded
// by the timeout; a process that dies first is mpirun's to report.)
// A rank that dies is reported by mpirun itself, which ends the job. NCCL
// calls are not bounded (a stuck NCCL peer blocks the stream).
//
// Determinism. With two ranks a sum is exact in either order, so every rank
// holds the same bits after an all-reduce; averages divide the sum by the
// world size on every rank alike.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "encore/nn.h"
#include "encore/tensor.h"

namespace encore::dist {

// Where the launcher put this process.
struct Environment {
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;           // the rank among the processes of this machine
  std::string launcher = "none";   // "mpirun", "slurm", "torchrun" or "none"
  std::string master_addr;      // torchrun's rendezvous address (empty otherwise)
  int master_port = 0;
};

// The Environment the variables give; `getenv` answers a variable's value or
// null. Refuses malformed or inconsistent values: a rank outside the world,
// a local rank outside the world or the machine (OMPI_COMM_WORLD_LOCAL_SIZE,
// LOCAL_WORLD_SIZE), torchrun's RANK / WORLD_SIZE contradicting Slurm's.
absl::StatusOr<Environment> environment_from(const std::function<const char*(const char*)>& getenv);
// environment_from(std::getenv).
absl::StatusOr<Environment> environment();

// True when encore was built with MPI (only then can the world hold more than one process).
bool mpi_built();

// kAverage divides the sum by the world size. On i32/i64 tensors a CPU group
// rounds toward zero (C++ integer division: -3 / 2 = -1); a CUDA group uses
// NCCL's ncclAvg. Average float tensors when an exact mean matters.
enum class ReduceOp : uint8_t { kSum, kAverage };

// The longest timeout a group accepts, in seconds (about 116 days). Every
// wait is bounded: there is no "no timeout", and infinity or a larger value
// is refused (a deadline that far away overflows the clock's 64-bit
// nanoseconds, which would make the wait return at once and spin forever).
inline constexpr double kMaxTimeoutSeconds = 1e7;

struct Options {
  // Seconds a collective waits for the other ranks before failing with
  // kDeadlineExceeded (from when the communication thread starts it, not
  // counting the time it waits behind this rank's earlier collectives);
  // also how long create() waits for them (to make the
  // group's communicator) and capture() for their fingerprints.
  // ENCORE_DIST_TIMEOUT (seconds) overrides the default. Must be finite,
  // positive and at most kMaxTimeoutSeconds (create() and set_timeout()
  // refuse anything else with kInvalidArgument).
  double timeout_s = 300.0;
};

// A set of processes and the collectives between them: every process of the
// job (the world), each with its own MPI communicator, so groups made one
// after the other never see each other's messages. Shared by handle
// (std::shared_ptr): DistributedDataParallel and the kernels of captured
// graphs name it by id; a graph must not outlive its group.
class ProcessGroup {
 public:
  // A group of the whole world. The first call starts MPI (on the
  // communication thread) when the launcher says there is more than one
  // process, or when it is mpirun / srun; MPI is finalized at exit. Every
  // rank must call it: it waits for the others for at most
  // Options::timeout_s (kDeadlineExceeded; see "Bounded waits" above).
  static absl::StatusOr<std::shared_ptr<ProcessGroup>> create(const Options& options = {});
  ~ProcessGroup();
  ProcessGroup(const ProcessGroup&) = delete;
  ProcessGroup& operator=(const ProcessGroup&) = delete;

  int rank() const { return rank_; }
  int world_size() const { return world_size_; }
  int local_rank() const { return local_rank_; }
  const Environment& environment() const { return env_; }
  // This process's device: cuda(local_rank) when CUDA is available (an error
  // if this machine has fewer GPUs than processes), else the CPU.
  Device device() const;
  double timeout_s() const;
  void set_timeout(double seconds);
  int32_t id() const { return id_; }

  // In place on every rank: t becomes the sum (or average) over the ranks of
  // their t. Same shape, dtype, op and device on every rank (a CPU group
  // refuses ranks whose count, dtype or op differ: "Ranks agree on each
  // call" above); contiguous. CPU:
  // float32, int32, int64 (not float16/bfloat16: MPI has no such type);
  // CUDA: every float dtype. Throws encore::Error naming the call and the rank.
  void all_reduce(const Tensor& t, ReduceOp op = ReduceOp::kSum);
  // In place: every rank's t becomes rank `root`'s (any dtype; the same
  // root, count and dtype on every rank, checked on a CPU group).
  void broadcast(const Tensor& t, int root = 0);
  // Returns when every rank has called it (or throws after the timeout).
  void barrier();
  // Every rank's `value`, in rank order, on every rank (a host call, not a
  // kernel: for checks such as "do all ranks hold the same bits", never
  // inside a captured step).
  std::vector<uint64_t> all_gather(uint64_t value);

  // The error that broke this group (OK while it works).
  absl::Status health() const;

 private:
  ProcessGroup() = default;
  Environment env_;
  int rank_ = 0;
  int world_size_ = 1;
  int local_rank_ = 0;
  int32_t id_ = -1;
};

// Options of DistributedDataParallel.
struct DdpOptions {
  // Bytes of gradient per bucket (PyTorch's bucket_cap_mb = 25). A parameter
  // larger than this gets a bucket of its own.
  int64_t bucket_cap_bytes = 25ll << 20;
  // Broadcast rank 0's buffers (named_buffers(): batch norm's running
  // statistics, ...) to every rank at construction and after every
  // synchronized backward, as PyTorch's broadcast_buffers (NOTE [ Buffers
  // follow rank 0 ] in ddp.cpp). False: each rank keeps its own.
  bool broadcast_buffers = true;
};

// Averages gradients across the group, as torch.nn.parallel.DistributedDataParallel.
//
// At construction the ranks compare their models (every parameter's and
// buffer's shape, dtype, device type and requires_grad, and the options) and
// refuse, on every rank, a rank whose model differs (kFailedPrecondition
// naming the ranks and the first difference); then rank 0's parameters (and
// buffers) are broadcast to every rank, and the parameters that require grad
// are laid out in buckets, in reverse registration order (the order backward
// produces their gradients), one contiguous persistent buffer per bucket; each parameter's .grad()
// becomes a view into its bucket (PyTorch's gradient_as_bucket_view), so no
// copy is needed before or after the all-reduce. During backward a hook on
// each parameter's gradient accumulation (autograd::register_post_accumulate_hook)
// counts the bucket's gradients; the bucket whose last gradient arrived is
// all-reduced (average) at once, in bucket order, while backward goes on;
// when the last bucket is launched all of them are waited for, so after
// backward() the gradients are averaged and the optimizer may step. Every
// parameter that requires grad must receive a gradient in each synchronized
// backward (else backward() throws kFailedPrecondition at its end, naming
// the first one that did not), and only once: a backward started inside the
// synchronized one (from a hook) that reaches a parameter again is refused,
// naming it. On the CPU the parameters that require grad must be float32
// (MPI sums no half-precision type): the constructor refuses others, naming
// the parameter. A module without a parameter that requires grad is
// refused (kInvalidArgument), as by PyTorch: there is nothing to average.
//
// Buffers (DdpOptions::broadcast_buffers, the default) follow rank 0: at
// the end of every synchronized backward, after the gradients are
// averaged, rank 0's buffers are broadcast to every rank (coalesced, one
// broadcast per dtype and device), so batch norm's running statistics,
// which each rank updates from its own batch in forward, are the same on
// every rank after each step (rank 0's own are only ever sent). PyTorch
// broadcasts them before each forward instead; this wrapper never sees the
// forward (the module's own methods run it), and every forward starts from
// the same values (NOTE [ Buffers follow rank 0 ] in ddp.cpp). The
// broadcasts are kernels of the step, so a captured step replays them.
// Buffers are not sent under no_sync(), and a training-mode forward that no
// synchronized backward follows (one under NoGradGuard, say) updates each
// rank's own until the next one. Keep each buffer's dtype and device (a
// later broadcast refuses a buffer moved or converted after construction,
// naming it).
//
// A synchronized backward that throws midway (caught, the batch skipped)
// leaves no trace: the next backward first waits for the all-reduces it had
// started, then starts afresh, provided every rank threw at the same point
// (the same error); a rank that throws alone leaves the others waiting, and
// they fail with kDeadlineExceeded (NOTE [ An aborted backward ] in ddp.cpp).
//
// The module is not owned and must outlive the wrapper; do not replace the
// parameters' gradients (set_grad) or change parameters after construction,
// and make the wrapper before the optimizer's first step() (AdamW keeps a
// table of the gradients' addresses from then on). On CUDA the all-reduces
// are NCCL calls on the device's stream and the waits are stream order.
class DistributedDataParallel {
 public:
  DistributedDataParallel(nn::Module& module, std::shared_ptr<ProcessGroup> group, DdpOptions options = {});
  ~DistributedDataParallel();
  DistributedDataParallel(const DistributedDataParallel&) = delete;
  DistributedDataParallel& operator=(const DistributedDataParallel&) = delete;

  nn::Module& module() { return module_; }
  ProcessGroup& group() { return *group_; }

  // Waits for every bucket launched in this backward. A no-op when backward
  // already waited (every backward that returned normally), and under
  // no_sync(). After a synchronized backward that threw, waits for the
  // all-reduces it had started, clears its state and throws
  // kFailedPrecondition saying that its gradients are not averaged.
  void finish();

  // Gradient accumulation: backward inside the scope only accumulates,
  // without communication; the first backward after it averages the sum.
  // A captured step checks at every replay that it runs in the setting it
  // was captured in (inside or outside no_sync()), and refuses otherwise.
  class NoSync {
   public:
    explicit NoSync(DistributedDataParallel& ddp);
    ~NoSync();
    NoSync(const NoSync&) = delete;
    NoSync& operator=(const NoSync&) = delete;

   private:
    DistributedDataParallel& ddp_;
    bool prev_;
  };
  [[nodiscard]] NoSync no_sync() { return NoSync(*this); }

  // The buckets: for each, the indices into module().parameters() it holds, in order.
  std::vector<std::vector<int64_t>> bucket_parameters() const;
  // How many all-reduces have been launched since construction, and for each
  // launch, how many parameter gradients were still to come in that backward
  // (positive: the all-reduce overlapped the rest of backward).
  struct Counters {
    int64_t launched = 0;
    std::vector<int64_t> remaining_at_launch;   // the last backward's
    // Synchronized backwards that threw midway; the next backward (or
    // finish()) waited for the all-reduces each had started and started afresh.
    int64_t aborted_backwards = 0;
    // Times rank 0's buffers were broadcast: at construction and after each
    // synchronized backward (0 without buffers or broadcast_buffers).
    int64_t buffer_broadcasts = 0;
  };
  const Counters& counters() const { return counters_; }

 private:
  struct Bucket;
  struct BufferGroup;   // the buffers of one dtype and device, broadcast together
  void check_reducible() const;
  void group_buffers();
  void sync_buffers();   // NOTE [ Buffers follow rank 0 ] in ddp.cpp
  void check_same_model_on_every_rank();   // NOTE [ Same model on every rank ] in ddp.cpp
  std::string parameter_name(int64_t index) const;
  // Each outermost backward() (NOTE [ An aborted backward ] in ddp.cpp).
  void on_backward_begin();
  void on_backward_end();
  void on_backward_abort();
  void on_gradient(int64_t bucket, int64_t param);
  void launch_ready();
  void drain();
  bool round_started() const { return grads_seen_ > 0; }

  nn::Module& module_;
  std::shared_ptr<ProcessGroup> group_;
  DdpOptions options_;
  std::vector<Tensor> params_;
  std::vector<std::unique_ptr<Bucket>> buckets_;
  std::vector<std::unique_ptr<BufferGroup>> buffer_groups_;   // empty without broadcast_buffers
  bool buffers_due_ = false;    // this backward averaged the gradients: broadcast the buffers at its end
  std::vector<bool> arrived_;   // per parameter: its gradient came in this synchronized backward
  int64_t next_launch_ = 0;
  int64_t grads_seen_ = 0;
  int64_t grads_total_ = 0;
  bool aborted_ = false;        // the round's backward threw (NOTE [ An aborted backward ] in ddp.cpp)
  int64_t observer_id_ = -1;    // of the backward observer
  // True outside no_sync(); a HostFlag, so that a captured step checks it
  // (NOTE [ no_sync as host state ] in ddp.cpp).
  Ref<HostFlag> sync_;
  Counters counters_;
};

}  // namespace encore::dist
