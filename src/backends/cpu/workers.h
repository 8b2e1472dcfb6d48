// The threads that run encore's parallel CPU kernels (parallel_for in
// parallel.h): encore's own workers, or OpenMP's team, whichever does not
// fight the environment's OpenMP setting (NOTE [ Spinning workers ] in
// workers.cpp); oneDNN's convolutions always run on OpenMP's team.
//
//   run_tasks(worker_threads(), [&](int t) { sum_part(t); });   // t = 0 on the caller
//
// run_tasks(n, task) runs task(0) on the calling thread and task(1) ...
// task(n - 1) on other threads, and returns when all n have returned.
// encore's workers (the pool when OpenMP's workers sleep at once, or with
// ENCORE_CPU_WORKERS=encore: pool_for_environment below) spin for worker_spin()
// after a task, so that the next kernel of a step finds them awake, then
// sleep until the next run_tasks: waking a sleeping CPU of a virtual machine
// costs tens of microseconds to a millisecond. The spin is
// ENCORE_CPU_SPIN_US microseconds (default 1000; 0: sleep at once; none when
// a job has more threads than the process has CPUs). Workers start with
// every signal blocked; they keep the first caller's CPU affinity.
// Otherwise (ENCORE_CPU_WORKERS=openmp, or OpenMP's workers spin) each
// run_tasks is an OpenMP parallel region.
//
// Tasks never share a thread with each other: a body may keep per-task state
// in locals. A run_tasks from inside a task, from a second thread while one
// runs on encore's workers, or with n = 1 calls task(0) ... task(n - 1) in
// order on the calling thread: the same ranges, so the same bits. A task
// must not throw on encore's workers (std::terminate); an exception from the
// caller's task, or any on OpenMP's team, is rethrown after all tasks end.
#pragma once

#include <absl/functional/function_ref.h>

#include <chrono>

namespace encore::cpu {

// Threads a parallel kernel may use: OpenMP's thread count for the calling
// thread (OMP_NUM_THREADS, omp_set_num_threads), so that one setting governs
// both encore's kernels and oneDNN's.
int worker_threads();

// Runs task(t) for every t in [0, tasks) as described above; tasks <= 0 runs
// nothing. Workers are started on first need and live until the process ends
// (a child of fork() starts its own).
void run_tasks(int tasks, absl::FunctionRef<void(int)> task);

// Sends spinning workers to sleep now, before handing the cores to another
// thread pool (oneDNN's OpenMP threads), which spinning workers would slow.
void park_workers();

enum class WorkerPool {
  kEncore,   // encore's spinning workers
  kOpenMp,   // an OpenMP parallel region per run_tasks
};

// The pool run_tasks uses (chosen from the environment at start-up);
// set_worker_pool is for tests and benchmarks (call it between kernels).
WorkerPool worker_pool();
void set_worker_pool(WorkerPool pool);

// The pool the environment picks at start-up: ENCORE_CPU_WORKERS
// (encore|openmp, any case) if set; else encore's workers where libgomp's
// sleep at once: GOMP_SPINCOUNT=0, or OMP_WAIT_POLICY=passive without
// GOMP_SPINCOUNT (which libgomp lets override the policy); OpenMP's team
// otherwise. Null: unset; another ENCORE_CPU_WORKERS value is ignored (the
// start-up choice warns on stderr).
WorkerPool pool_for_environment(const char* encore_cpu_workers, const char* gomp_spincount,
                                const char* omp_wait_policy);

// The spin of encore's workers after each task; set_worker_spin is for tests and benchmarks
// (call it between kernels).
std::chrono::microseconds worker_spin();
void set_worker_spin(std::chrono::microseconds spin);

// encore's workers asleep now (tests: a worker not needed must go to sleep).
int sleeping_workers_for_testing();

}  // namespace encore::cpu
