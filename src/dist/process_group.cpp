// encore::dist::ProcessGroup (include/encore/dist.h): the launcher's
// environment, the group's calls as kernels, and the capture agreement.
#include <cmath>
#include <cstdlib>
#include <string>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "encore/dist.h"
#include "encore/error.h"
#include "src/core/process_agreement.h"
#include "src/dist/collectives.h"
#include "src/dist/engine.h"
#if ENCORE_HAVE_CUDA
#include "src/backends/cuda/runtime.h"
#endif
#if ENCORE_HAVE_NCCL
#include "src/dist/nccl_comm.h"
#endif

namespace encore::dist {
namespace {

absl::Status read_int(const std::function<const char*(const char*)>& getenv, const char* name, int& out,
                      bool& found) {
  const char* v = getenv(name);
  found = v != nullptr;
  if (v == nullptr) return absl::OkStatus();
  if (!absl::SimpleAtoi(v, &out) || out < 0) {
    return absl::InvalidArgumentError(
        absl::StrFormat("dist::environment: %s=\"%s\" is not a non-negative integer", name, v));
  }
  return absl::OkStatus();
}

// A timeout the deadline arithmetic can hold (kMaxTimeoutSeconds in encore/dist.h).
bool valid_timeout(double seconds) {
  return std::isfinite(seconds) && seconds > 0 && seconds <= kMaxTimeoutSeconds;
}

// The group capture() asks (NOTE [ Same step on every rank ] in capture/capture.cpp).
std::atomic<int32_t> agreement_group{-1};

absl::Status agree(uint64_t fingerprint, int64_t kernels) {
  const int32_t g = agreement_group.load();
  if (g < 0) return absl::OkStatus();
  absl::StatusOr<std::vector<uint64_t>> all = dist_internal::all_gather(g, fingerprint, "capture agreement");
  if (!all.ok()) {
    return absl::Status(all.status().code(),
                        absl::StrCat("capture: comparing the recorded step with the other ranks: ",
                                     all.status().message()));
  }
  absl::StatusOr<std::vector<uint64_t>> counts =
      dist_internal::all_gather(g, static_cast<uint64_t>(kernels), "capture agreement");
  if (!counts.ok()) return counts.status();
  const int me = dist_internal::group_rank(g);
  std::vector<std::string> failed;
  for (size_t r = 0; r < all->size(); ++r) {
    if ((*all)[r] == 0) failed.push_back(absl::StrCat(r));
  }
  if (!failed.empty()) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "capture: on rank %d of %d: rank(s) %s could not record the step (their own error says why), so no rank "
        "captures it",
        me, all->size(), absl::StrJoin(failed, ", ")));
  }
  std::vector<std::string> differ;
  for (size_t r = 0; r < all->size(); ++r) {
    if ((*all)[r] != (*all)[0]) {
      differ.push_back(absl::StrFormat("rank %d (%d kernels, fingerprint %016x)", r, (*counts)[r], (*all)[r]));
    }
  }
  if (differ.empty()) return absl::OkStatus();
  return absl::FailedPreconditionError(absl::StrFormat(
      "capture: on rank %d of %d: the ranks recorded different steps: rank 0 (%d kernels, fingerprint %016x) but %s; "
      "every rank must capture the same step (the same model, shapes and code path), or their collectives would "
      "not match at replay",
      me, all->size(), (*counts)[0], (*all)[0], absl::StrJoin(differ, ", ")));
}

}  // namespace

absl::StatusOr<Environment> environment_from(const std::function<const char*(const char*)>& getenv) {
  Environment env;
  bool rank_found = false, size_found = false, local_found = false;
  // local_size: the variable with the number of processes on this machine, or null.
  auto take = [&](const char* rank, const char* size, const char* local, const char* local_size,
                  const char* launcher) -> absl::Status {
    int r = 0, s = 0, l = 0, ls = 0;
    bool local_size_found = false;
    ENCORE_DIST_RETURN_IF_ERROR(read_int(getenv, rank, r, rank_found));
    ENCORE_DIST_RETURN_IF_ERROR(read_int(getenv, size, s, size_found));
    ENCORE_DIST_RETURN_IF_ERROR(read_int(getenv, local, l, local_found));
    if (local_size != nullptr) ENCORE_DIST_RETURN_IF_ERROR(read_int(getenv, local_size, ls, local_size_found));
    if (!rank_found && !size_found) return absl::OkStatus();
    if (rank_found != size_found) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "dist::environment: %s is set but %s is not (launcher %s)", rank_found ? rank : size,
          rank_found ? size : rank, launcher));
    }
    if (s < 1 || r >= s) {
      return absl::InvalidArgumentError(
          absl::StrFormat("dist::environment: %s=%d is not a rank of %s=%d", rank, r, size, s));
    }
    // A local rank names this process's GPU (ProcessGroup::device()).
    if (local_found && l >= s) {
      return absl::InvalidArgumentError(
          absl::StrFormat("dist::environment: %s=%d is not a local rank of %s=%d", local, l, size, s));
    }
    if (local_found && local_size_found && l >= ls) {
      return absl::InvalidArgumentError(
          absl::StrFormat("dist::environment: %s=%d is not a local rank of %s=%d", local, l, local_size, ls));
    }
    env.rank = r;
    env.world_size = s;
    env.local_rank = local_found ? l : r;
    env.launcher = launcher;
    return absl::OkStatus();
  };
  ENCORE_DIST_RETURN_IF_ERROR(take("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK",
                                   "OMPI_COMM_WORLD_LOCAL_SIZE", "mpirun"));
  if (env.launcher == "none") {
    ENCORE_DIST_RETURN_IF_ERROR(take("SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", nullptr, "slurm"));
  }
  if (env.launcher == "slurm") {
    // torchrun started inside a Slurm allocation (sbatch exports SLURM_PROCID
    // and SLURM_NTASKS to the batch script): Slurm's variables describe the
    // allocation, not torchrun's workers, and each worker would be rank 0 of
    // a world of one; torchrun's rendezvous is not implemented, so refuse.
    int r = 0, s = 0;
    bool r_found = false, s_found = false;
    if (read_int(getenv, "RANK", r, r_found).ok() && read_int(getenv, "WORLD_SIZE", s, s_found).ok() && r_found &&
        s_found && (r != env.rank || s != env.world_size)) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "dist::environment: SLURM_PROCID=%d of SLURM_NTASKS=%d but RANK=%d of WORLD_SIZE=%d: torchrun inside a "
          "Slurm allocation? torchrun's rendezvous is not supported; start one process per rank with srun (or "
          "mpirun) instead",
          env.rank, env.world_size, r, s));
    }
  }
  if (env.launcher == "none") {
    ENCORE_DIST_RETURN_IF_ERROR(take("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "torchrun"));
    if (env.launcher == "torchrun") {
      if (const char* a = getenv("MASTER_ADDR")) env.master_addr = a;
      bool found = false;
      ENCORE_DIST_RETURN_IF_ERROR(read_int(getenv, "MASTER_PORT", env.master_port, found));
    }
  }
  return env;
}

absl::StatusOr<Environment> environment() {
  return environment_from([](const char* name) -> const char* { return std::getenv(name); });
}

bool mpi_built() {
#if ENCORE_HAVE_MPI
  return true;
#else
  return false;
#endif
}

absl::StatusOr<std::shared_ptr<ProcessGroup>> ProcessGroup::create(const Options& options) {
  absl::StatusOr<Environment> env = dist::environment();
  if (!env.ok()) return env.status();
  double timeout = options.timeout_s;
  if (const char* t = std::getenv("ENCORE_DIST_TIMEOUT")) {
    if (!absl::SimpleAtod(t, &timeout) || !valid_timeout(timeout)) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "dist::ProcessGroup::create: ENCORE_DIST_TIMEOUT=\"%s\" is not a positive number of seconds of at most "
          "%g (every wait is bounded)",
          t, kMaxTimeoutSeconds));
    }
  }
  if (!valid_timeout(timeout)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "dist::ProcessGroup::create: timeout_s is %g; it must be positive, finite and at most %g s (every wait is "
        "bounded)",
        timeout, kMaxTimeoutSeconds));
  }
  absl::StatusOr<int32_t> id = dist_internal::new_group(*env, timeout);
  if (!id.ok()) return id.status();
  std::shared_ptr<ProcessGroup> g(new ProcessGroup());
  g->env_ = *env;
  g->id_ = *id;
  g->rank_ = dist_internal::group_rank(*id);
  g->world_size_ = dist_internal::group_size(*id);
  g->local_rank_ = env->local_rank;
  if (g->world_size_ > 1 && agreement_group.load() < 0) {
    // The capture agreement gets a communicator of its own (made by every
    // rank's first group, so in the same order everywhere): its gathers
    // never interleave with a group's collectives. It lives as long as the
    // process. It duplicates this group's communicator, not the world's, so
    // that every create() is one duplicate of the world on every rank, even
    // where this one fails on a late rank (NOTE [ Bounded group creation ]
    // in engine.cpp).
    absl::StatusOr<int32_t> a = dist_internal::new_group(*env, timeout, /*parent=*/*id);
    if (!a.ok()) return a.status();
    agreement_group.store(*a);
    set_step_agreement(&agree);
  }
  return g;
}

ProcessGroup::~ProcessGroup() {
  if (id_ < 0) return;
#if ENCORE_HAVE_NCCL
  dist_internal::release_nccl(id_);
#endif
  dist_internal::release_group(id_);
}

Device ProcessGroup::device() const {
  if (!cuda_available()) return kCPU;
#if ENCORE_HAVE_CUDA
  absl::StatusOr<int> n = cuda::device_count();
  if (n.ok()) {
    ENCORE_CHECK_CODE(local_rank_ < *n, kFailedPrecondition,
                      "dist::ProcessGroup::device: rank %d is local rank %d of its machine, which has %d GPU(s); "
                      "start at most one process per GPU",
                      rank_, local_rank_, *n);
  }
#endif
  return Device::cuda(local_rank_);
}

double ProcessGroup::timeout_s() const { return dist_internal::group_timeout(id_); }
void ProcessGroup::set_timeout(double seconds) {
  ENCORE_CHECK(valid_timeout(seconds),
               "dist::ProcessGroup::set_timeout: %g s; it must be positive, finite and at most %g s (every wait is "
               "bounded)",
               seconds, kMaxTimeoutSeconds);
  dist_internal::set_group_timeout(id_, seconds);
}
absl::Status ProcessGroup::health() const { return dist_internal::group_health(id_); }

void ProcessGroup::all_reduce(const Tensor& t, ReduceOp op) {
  dist_internal::launch_collective(id_, dist_internal::CollKind::kAllReduce, t, op, 0, "all_reduce");
}
void ProcessGroup::broadcast(const Tensor& t, int root) {
  dist_internal::launch_collective(id_, dist_internal::CollKind::kBroadcast, t, ReduceOp::kSum, root, "broadcast");
}
void ProcessGroup::barrier() {
  dist_internal::launch_collective(id_, dist_internal::CollKind::kBarrier, Tensor(), ReduceOp::kSum, 0, "barrier");
}
std::vector<uint64_t> ProcessGroup::all_gather(uint64_t value) {
  absl::StatusOr<std::vector<uint64_t>> r = dist_internal::all_gather(id_, value, "all_gather");
  if (!r.ok()) throw Error(r.status());
  return *r;
}

}  // namespace encore::dist
