// encore's CPU worker threads (workers.h).
//
// NOTE [ Spinning workers ]
// Until session 15 every parallel kernel was an OpenMP parallel region. With
// OMP_WAIT_POLICY=passive (the setting issue 19's libtorch comparison runs
// under, and a common one on shared machines) libgomp's workers sleep on a
// futex the moment a region ends, and on a virtual machine waking one costs
// 35-50 us, up to a millisecond when its virtual CPU has halted: the MLP
// 784-512-512-10 step at two threads took 4.0-4.5 ms against libtorch's 3.1 ms,
// slower than encore's own one thread (libtorch's GEMMs run on OpenBLAS's
// threads, which spin whatever OMP_WAIT_POLICY says). A step's kernels come
// in bursts, microseconds apart, so encore's own workers spin a bounded time
// after each task (worker_spin(), 1 ms by default, about what libgomp spins
// under GOMP_SPINCOUNT=30000), yielding the core now and then, and then
// sleep; the spin ends early when park_workers() says another pool takes the
// cores (oneDNN's convolutions).
//
// Where OpenMP's workers spin too (OMP_WAIT_POLICY unset or active), encore's
// kernels stay on OpenMP's team: oneDNN's convolutions need that team, whose
// workers spin after every convolution, and a second pool's workers would
// share the cores with them (the CNN step at two threads, eager: 11.5 ms on
// OpenMP's team, 21.0 ms on encore's workers beside it; bench/worker_pool_bench). So the pool is chosen once, from
// the environment: encore's workers when OpenMP's sleep at once
// (GOMP_SPINCOUNT=0, or OMP_WAIT_POLICY=passive without GOMP_SPINCOUNT),
// OpenMP's team otherwise; ENCORE_CPU_WORKERS=encore|openmp overrides. Both run the same tasks, so
// the bits do not depend on the choice.
//
// The protocol: one caller at a time (mutex_) publishes a job by storing a
// new `job_` word, which holds a sequence number and the task count, so that
// a worker reads both at once; workers 1 .. n - 1 of an n-task job run their
// task and count `remaining_` down; the caller waits for it to reach zero.
// Each wait spins, then sleeps on the word (std::atomic::wait: a futex, on
// libstdc++'s proxy for the 64-bit job word); the writer calls notify only
// when a sleeper counter says someone sleeps (the counter is raised before
// the sleeper's last look at the word, all four accesses seq_cst, so a
// wake-up is never lost). A worker spins for worker_spin() after its own
// last task, not after every job: one that jobs with fewer tasks do not need
// goes to sleep on time. A worker that is not needed for a job only reads
// the word; the caller overwrites the task pointer only after every needed
// worker has counted down.
#include "src/backends/cpu/workers.h"

#include <omp.h>
#include <pthread.h>
#include <strings.h>
#include <sched.h>
#include <signal.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

#include "src/core/kernel_errors.h"

namespace encore::cpu {
namespace {

using Clock = std::chrono::steady_clock;

// The job word: a sequence number above the task count. 64 bits, so the
// sequence never wraps: a worker that sleeps through 2^k jobs it is not
// needed for must not see the same word again (it would sleep through the
// next job that needs it).
constexpr uint64_t kTaskBits = 12;                            // the task count's bits in the job word
constexpr int kMaxTasks = (1 << kTaskBits) - 1;               // tasks in one job
constexpr int64_t kDefaultSpinUs = 1000;
constexpr int64_t kMaxSpinUs = 1'000'000'000;                 // so that now() + spin cannot overflow

thread_local bool tls_in_task = false;   // this thread runs a task (the caller's too)

// Every task in order on the calling thread: the fallback wherever the
// workers cannot take a job (the same ranges, so the same bits).
void run_inline(int tasks, absl::FunctionRef<void(int)> task) {
  for (int t = 0; t < tasks; ++t) task(t);
}

int64_t spin_from_env() {
  const char* v = std::getenv("ENCORE_CPU_SPIN_US");
  if (v == nullptr || *v == '\0') return kDefaultSpinUs;
  char* end = nullptr;
  const long long us = std::strtoll(v, &end, 10);
  return (*end == '\0' && us >= 0) ? std::min<int64_t>(us, kMaxSpinUs) : kDefaultSpinUs;
}

// Read from the environment at first use (a kernel run by another
// translation unit's static initializer must not see them unset).
std::atomic<int64_t>& spin_us() {
  static std::atomic<int64_t> us{spin_from_env()};
  return us;
}

bool is(const char* v, const char* value) { return v != nullptr && strcasecmp(v, value) == 0; }

// The CPUs this process may run on (its affinity mask when it first runs
// a parallel kernel).
int usable_cpus() {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof(set), &set) == 0) return std::max(1, CPU_COUNT(&set));
  return std::max(1u, std::thread::hardware_concurrency());
}

WorkerPool pool_from_environment() {
  const char* workers = std::getenv("ENCORE_CPU_WORKERS");
  if (workers != nullptr && *workers != '\0' && !is(workers, "encore") && !is(workers, "openmp")) {
    std::fprintf(stderr, "encore: ENCORE_CPU_WORKERS=%s is neither 'encore' nor 'openmp'; ignored\n", workers);
  }
  return pool_for_environment(workers, std::getenv("GOMP_SPINCOUNT"), std::getenv("OMP_WAIT_POLICY"));
}

std::atomic<WorkerPool>& pool_setting() {
  static std::atomic<WorkerPool> p{pool_from_environment()};
  return p;
}

// The OpenMP pool: a team of `tasks` threads, or fewer where OpenMP gives
// fewer (inside another parallel region: one), each running every
// team-size-th task; the first exception is rethrown after the region.
void run_on_openmp(int tasks, absl::FunctionRef<void(int)> task) {
  std::exception_ptr error;
  std::atomic<bool> failed{false};
#pragma omp parallel num_threads(tasks)
  {
    tls_in_task = true;
    for (int t = omp_get_thread_num(); t < tasks; t += omp_get_num_threads()) {
      try {
        task(t);
      } catch (...) {
        if (!failed.exchange(true)) error = std::current_exception();
      }
    }
    tls_in_task = false;
  }
  if (error) std::rethrow_exception(error);
}

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

// Waits until done(word) holds: spins until `until` (or until *stop turns
// true), then sleeps on the word, counted in `sleepers`.
template <typename T, typename Done>
T await(const std::atomic<T>& word, Done done, std::atomic<int>& sleepers, Clock::time_point until,
        const std::atomic<bool>* stop) {
  T v = word.load(std::memory_order_acquire);
  if (done(v)) return v;
  if (Clock::now() < until) {
    for (int round = 0;; ++round) {
      for (int i = 0; i < 16; ++i) cpu_relax();
      v = word.load(std::memory_order_acquire);
      if (done(v)) return v;
      if ((round & 7) != 7) continue;
      if (Clock::now() >= until || (stop != nullptr && stop->load(std::memory_order_relaxed))) break;
      // With more threads than free cores, the thread being waited for may
      // be off its core: let it run (a no-op when nothing else is runnable).
      sched_yield();
    }
  }
  sleepers.fetch_add(1, std::memory_order_seq_cst);
  while (!done(v = word.load(std::memory_order_seq_cst))) word.wait(v, std::memory_order_seq_cst);
  sleepers.fetch_sub(1, std::memory_order_relaxed);
  return v;
}

class Workers {
 public:
  static Workers& get();
  static Workers* existing() { return instance_.load(std::memory_order_acquire); }
  static void forget_after_fork();

  void run(int tasks, absl::FunctionRef<void(int)> task);
  void park() { parked_.store(true, std::memory_order_relaxed); }
  int sleeping() const { return job_sleepers_.load(std::memory_order_relaxed); }

 private:
  void start_workers(int count);   // under mutex_
  void loop(int index, uint64_t seen);

  static std::atomic<Workers*> instance_;

  std::mutex mutex_;                  // one caller at a time
  int workers_ = 0;                   // started (detached) threads; worker t runs task t
  const absl::FunctionRef<void(int)>* task_ = nullptr;   // the job's task, valid while it runs
  std::atomic<uint64_t> job_{0};      // sequence << kTaskBits | tasks
  std::atomic<int> job_sleepers_{0};
  // The spin after this job's tasks (0 when its threads outnumber the CPUs
  // this process may use: a spinning worker would hold a core the others need).
  std::atomic<int64_t> job_spin_us_{0};
  const int cpus_ = usable_cpus();
  std::atomic<uint32_t> remaining_{0};   // workers still running the job's tasks
  std::atomic<int> caller_sleeps_{0};
  std::atomic<bool> parked_{false};
};

std::atomic<Workers*> Workers::instance_{nullptr};
std::vector<Workers*>* g_left_by_fork = nullptr;   // still reachable, for leak checkers

void Workers::forget_after_fork() {
  Workers* w = instance_.exchange(nullptr);
  if (w == nullptr) return;
  if (g_left_by_fork == nullptr) g_left_by_fork = new std::vector<Workers*>();
  g_left_by_fork->push_back(w);
}

Workers& Workers::get() {
  Workers* w = instance_.load(std::memory_order_acquire);
  if (w != nullptr) return *w;
  static std::once_flag at_fork;
  std::call_once(at_fork, [] { pthread_atfork(nullptr, nullptr, &Workers::forget_after_fork); });
  // Never destroyed: workers may still sleep on its words while the process
  // exits. After fork() the child makes a new one (its parent's threads are
  // not in the child); the old one is left as it was.
  static std::mutex make;
  std::lock_guard<std::mutex> lock(make);
  w = instance_.load(std::memory_order_acquire);
  if (w == nullptr) {
    w = new Workers();
    instance_.store(w, std::memory_order_release);
  }
  return *w;
}

void Workers::start_workers(int count) {
  if (workers_ >= count) return;
  const uint64_t seen = job_.load(std::memory_order_relaxed);
  // Workers start with every signal blocked, so that a process's signals go
  // to its own threads, whatever the first caller's mask.
  sigset_t all, before;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &before);
  for (; workers_ < count; ++workers_) {
    const int index = workers_ + 1;
    std::thread([this, index, seen] { loop(index, seen); }).detach();
  }
  pthread_sigmask(SIG_SETMASK, &before, nullptr);
}

void Workers::loop(int index, uint64_t seen) {
  tls_in_task = true;   // a parallel kernel inside a task runs inline
  // Spin until this time after the worker's last task: jobs that do not
  // need it (fewer tasks) do not extend its spin.
  Clock::time_point idle_until =
      Clock::now() + std::chrono::microseconds(job_spin_us_.load(std::memory_order_relaxed));
  for (;;) {
    seen = await(job_, [seen](uint64_t v) { return v != seen; }, job_sleepers_, idle_until, &parked_);
    const int tasks = static_cast<int>(seen & kMaxTasks);
    if (index >= tasks) continue;
    (*task_)(index);
    // seq_cst: with the caller's raise of caller_sleeps_ and load of
    // remaining_, one of the two sees the other (no lost wake-up).
    if (remaining_.fetch_sub(1, std::memory_order_seq_cst) == 1 &&
        caller_sleeps_.load(std::memory_order_seq_cst) > 0) {
      remaining_.notify_one();
    }
    idle_until = Clock::now() + std::chrono::microseconds(job_spin_us_.load(std::memory_order_relaxed));
  }
}

void Workers::run(int tasks, absl::FunctionRef<void(int)> task) {
  std::unique_lock<std::mutex> lock(mutex_, std::try_to_lock);
  if (!lock.owns_lock()) {   // another thread's kernel holds the workers
    run_inline(tasks, task);
    return;
  }
  start_workers(tasks - 1);
  task_ = &task;
  remaining_.store(static_cast<uint32_t>(tasks - 1), std::memory_order_relaxed);
  parked_.store(false, std::memory_order_relaxed);
  const int64_t spin = tasks > cpus_ ? 0 : spin_us().load(std::memory_order_relaxed);
  job_spin_us_.store(spin, std::memory_order_relaxed);
  const uint64_t sequence = (job_.load(std::memory_order_relaxed) >> kTaskBits) + 1;
  job_.store(sequence << kTaskBits | static_cast<uint64_t>(tasks), std::memory_order_seq_cst);
  if (job_sleepers_.load(std::memory_order_seq_cst) > 0) job_.notify_all();

  std::exception_ptr error;
  tls_in_task = true;
  try {
    task(0);
  } catch (...) {
    error = std::current_exception();
  }
  tls_in_task = false;
  await(remaining_, [](uint32_t v) { return v == 0; }, caller_sleeps_,
        Clock::now() + std::chrono::microseconds(spin), nullptr);
  task_ = nullptr;
  if (error) std::rethrow_exception(error);
}

}  // namespace

WorkerPool pool_for_environment(const char* encore_cpu_workers, const char* gomp_spincount,
                                const char* omp_wait_policy) {
  if (is(encore_cpu_workers, "encore")) return WorkerPool::kEncore;
  if (is(encore_cpu_workers, "openmp")) return WorkerPool::kOpenMp;
  // libgomp's precedence: GOMP_SPINCOUNT, when set, is the spin whatever
  // OMP_WAIT_POLICY says (so `./run test`, which exports GOMP_SPINCOUNT=30000,
  // spins under the tests' OMP_WAIT_POLICY=passive).
  if (gomp_spincount != nullptr && *gomp_spincount != '\0') {
    char* end = nullptr;
    const long long n = std::strtoll(gomp_spincount, &end, 10);
    return end != gomp_spincount && n == 0 ? WorkerPool::kEncore : WorkerPool::kOpenMp;
  }
  return is(omp_wait_policy, "passive") ? WorkerPool::kEncore : WorkerPool::kOpenMp;
}

int worker_threads() { return std::clamp(omp_get_max_threads(), 1, kMaxTasks); }

void run_tasks(int tasks, absl::FunctionRef<void(int)> task) {
  if (tasks <= 0) return;
  const bool openmp = pool_setting().load(std::memory_order_relaxed) == WorkerPool::kOpenMp;
  // Callers size by worker_threads(), which is at most kMaxTasks.
  if (tasks == 1 || tls_in_task || (!openmp && tasks > kMaxTasks)) {
    run_inline(tasks, task);
    return;
  }
  // Tasks on other threads report bad data into the caller's kernel error
  // word (NOTE [ One word per launching thread ] in src/core/kernel_errors.h).
  std::atomic<uint32_t>* const word = KernelErrorWordScope::current();
  const auto reporting = [&](int t) {
    KernelErrorWordScope scope(word);
    task(t);
  };
  if (openmp) {
    run_on_openmp(tasks, reporting);
  } else {
    Workers::get().run(tasks, reporting);
  }
}

int sleeping_workers_for_testing() {
  const Workers* w = Workers::existing();
  return w == nullptr ? 0 : w->sleeping();
}

void park_workers() {
  Workers* w = Workers::existing();
  if (w != nullptr && !tls_in_task) w->park();
}

WorkerPool worker_pool() { return pool_setting().load(std::memory_order_relaxed); }

void set_worker_pool(WorkerPool pool) { pool_setting().store(pool, std::memory_order_relaxed); }

std::chrono::microseconds worker_spin() {
  return std::chrono::microseconds(spin_us().load(std::memory_order_relaxed));
}

void set_worker_spin(std::chrono::microseconds spin) {
  spin_us().store(std::clamp<int64_t>(spin.count(), 0, kMaxSpinUs), std::memory_order_relaxed);
}

}  // namespace encore::cpu
