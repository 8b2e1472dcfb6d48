// encore's CPU worker threads (src/backends/cpu/workers.h) and parallel_for
// on them: every task runs once, on its own thread, nested and concurrent
// calls run inline, an exception on the caller waits for the workers, and a
// child of fork() gets workers of its own; the same on OpenMP's team.
#include <omp.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <mutex>
#include <ostream>
#include <string>
#include <set>
#include <stdexcept>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "src/backends/cpu/parallel.h"
#include "src/backends/cpu/workers.h"
#include "src/core/kernel_errors.h"

namespace encore::cpu {
namespace {

using std::chrono::microseconds;

struct Pool {
  WorkerPool pool;
  int spin_us;   // encore's workers only
};

void PrintTo(const Pool& p, std::ostream* os) {
  *os << (p.pool == WorkerPool::kOpenMp ? "openmp" : "encore, spin ") << p.spin_us << " us";
}

// Sets OpenMP's thread count (which worker_threads() follows), the pool and
// the spin for one test, and puts them back.
class Threads {
 public:
  Threads(int threads, Pool p)
      : threads_(omp_get_max_threads()), pool_(worker_pool()), spin_(worker_spin()) {
    omp_set_num_threads(threads);
    set_worker_pool(p.pool);
    set_worker_spin(microseconds(p.spin_us));
  }
  ~Threads() {
    omp_set_num_threads(threads_);
    set_worker_pool(pool_);
    set_worker_spin(spin_);
  }

 private:
  int threads_;
  WorkerPool pool_;
  microseconds spin_;
};

class WorkersTest : public ::testing::TestWithParam<Pool> {
 protected:
  Pool spin() const { return GetParam(); }
};

TEST_P(WorkersTest, EveryTaskRunsOnceOnItsOwnThread) {
  Threads threads(4, spin());
  ASSERT_EQ(worker_threads(), 4);
  for (int round = 0; round < 2000; ++round) {
    const int tasks = 1 + round % 4;
    std::vector<std::atomic<int>> runs(4);
    std::vector<std::thread::id> ids(4);
    run_tasks(tasks, [&](int t) {
      runs[t].fetch_add(1);
      ids[t] = std::this_thread::get_id();
    });
    for (int t = 0; t < 4; ++t) ASSERT_EQ(runs[t].load(), t < tasks ? 1 : 0) << "round " << round << " task " << t;
    EXPECT_EQ(ids[0], std::this_thread::get_id());   // task 0 on the caller
    const std::set<std::thread::id> distinct(ids.begin(), ids.begin() + tasks);
    ASSERT_EQ(static_cast<int>(distinct.size()), tasks) << "round " << round;
  }
}

TEST_P(WorkersTest, ParallelForCoversTheRangeInThreadCountRanges) {
  Threads threads(3, spin());
  for (int64_t n : {1, 7, 100, 1000, 1001}) {
    std::vector<int> hits(static_cast<size_t>(n), 0);
    std::mutex mu;
    std::vector<std::pair<int64_t, int64_t>> ranges;
    parallel_for(n, 1, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) ++hits[static_cast<size_t>(i)];
      std::lock_guard<std::mutex> lock(mu);
      ranges.emplace_back(b, e);
    });
    for (int64_t i = 0; i < n; ++i) ASSERT_EQ(hits[static_cast<size_t>(i)], 1) << "n " << n << " i " << i;
    // ceil(n / 3)-sized ranges from 0: the split the bits depend on.
    const int64_t chunk = (n + 2) / 3;
    for (const auto& [b, e] : ranges) {
      EXPECT_EQ(b % chunk, 0) << "n " << n;
      EXPECT_EQ(e, std::min(n, b + chunk)) << "n " << n;
    }
  }
}

TEST_P(WorkersTest, NestedCallsRunInlineOnTheTasksThread) {
  Threads threads(2, spin());
  std::vector<std::thread::id> outer(2);
  std::vector<std::vector<std::thread::id>> inner(2, std::vector<std::thread::id>(2));
  run_tasks(2, [&](int t) {
    outer[t] = std::this_thread::get_id();
    run_tasks(2, [&](int u) { inner[t][u] = std::this_thread::get_id(); });
  });
  EXPECT_NE(outer[0], outer[1]);
  for (int t = 0; t < 2; ++t) {
    EXPECT_EQ(inner[t][0], outer[t]);
    EXPECT_EQ(inner[t][1], outer[t]);
  }
}

TEST_P(WorkersTest, ConcurrentCallersEachGetEveryTask) {
  Threads threads(2, spin());
  std::atomic<int> bad{0};
  auto caller = [&] {
    omp_set_num_threads(2);   // per-thread OpenMP setting
    for (int round = 0; round < 3000; ++round) {
      std::atomic<int> runs[2] = {0, 0};
      run_tasks(2, [&](int t) { runs[t].fetch_add(1); });
      if (runs[0].load() != 1 || runs[1].load() != 1) bad.fetch_add(1);
    }
  };
  std::thread a(caller), b(caller);
  a.join();
  b.join();
  EXPECT_EQ(bad.load(), 0);
}

// NOTE [ One word per launching thread ] (src/core/kernel_errors.h): a task
// on a worker reports into its caller's word, and two callers at once each
// take their own reports only. With one shared word, the second caller's
// take cleared (or took) the first's report.
TEST_P(WorkersTest, KernelErrorsGoToTheCallersWordFromEveryTask) {
  Threads threads(3, spin());
  (void)take_kernel_errors(kCPU);
  std::vector<std::thread::id> ids(3);
  run_tasks(3, [&](int t) {
    ids[t] = std::this_thread::get_id();
    if (t == 2) report_kernel_error(KernelError::kGatherIndex);
  });
  ASSERT_NE(ids[2], std::this_thread::get_id());   // the report came from another thread
  EXPECT_EQ(take_kernel_errors(kCPU), static_cast<uint32_t>(KernelError::kGatherIndex));
  EXPECT_EQ(take_kernel_errors(kCPU), 0u);

  // A second thread's report, made while this one waits, stays its own.
  std::atomic<bool> reported{false}, taken{false};
  uint32_t other_took = 0;
  std::thread other([&] {
    omp_set_num_threads(3);
    run_tasks(3, [&](int t) {
      if (t == 1) report_kernel_error(KernelError::kScatterIndex);
    });
    reported = true;
    while (!taken) std::this_thread::yield();
    other_took = take_kernel_errors(kCPU);
  });
  while (!reported) std::this_thread::yield();
  EXPECT_EQ(take_kernel_errors(kCPU), 0u);
  taken = true;
  other.join();
  EXPECT_EQ(other_took, static_cast<uint32_t>(KernelError::kScatterIndex));
}

TEST_P(WorkersTest, AnExceptionOnTheCallerWaitsForTheWorkers) {
  Threads threads(3, spin());
  std::atomic<int> finished{0};
  EXPECT_THROW(run_tasks(3,
                         [&](int t) {
                           if (t == 0) throw std::runtime_error("task 0");
                           std::this_thread::sleep_for(std::chrono::milliseconds(20));
                           finished.fetch_add(1);
                         }),
               std::runtime_error);
  EXPECT_EQ(finished.load(), 2);   // both workers were done before the throw left run_tasks
  std::atomic<int> runs{0};
  run_tasks(3, [&](int) { runs.fetch_add(1); });   // and the workers serve the next call
  EXPECT_EQ(runs.load(), 3);
}

TEST_P(WorkersTest, ParkedWorkersServeTheNextCall) {
  Threads threads(2, spin());
  for (int round = 0; round < 200; ++round) {
    park_workers();
    std::atomic<int> runs{0};
    run_tasks(2, [&](int) { runs.fetch_add(1); });
    ASSERT_EQ(runs.load(), 2) << "round " << round;
  }
}

// A worker spins after its own last task, not after every job: after a
// 3-task job, a stream of 2-task jobs less than the spin apart must let the
// third thread sleep (it spun forever when each job restarted its spin).
TEST_P(WorkersTest, AWorkerNotNeededGoesToSleep) {
  if (GetParam().pool != WorkerPool::kEncore) GTEST_SKIP() << "encore's workers only";
  Threads threads(3, spin());
  std::atomic<int> runs{0};
  run_tasks(3, [&](int) { runs.fetch_add(1); });
  ASSERT_EQ(runs.load(), 3);
  omp_set_num_threads(2);
  int asleep = 0, samples = 0;
  // Samples from 20 ms on, when the third worker's spin (at most 1 ms) is
  // long over, until there are 200 (at least 40 ms of them): a machine busy
  // with other tests takes longer, never fewer samples (a fixed 40 ms gave
  // 65 under load).
  using std::chrono::milliseconds;
  const auto start = std::chrono::steady_clock::now();
  for (;;) {
    run_tasks(2, [&](int) { runs.fetch_add(1); });
    const auto ran = std::chrono::steady_clock::now() - start;
    if (ran >= milliseconds(20)) {
      ++samples;
      asleep += sleeping_workers_for_testing() >= 1;
    }
    if ((ran >= milliseconds(60) && samples >= 200) || ran >= milliseconds(10000)) break;
  }
  ASSERT_GE(samples, 200);
  EXPECT_GT(asleep, samples / 10) << asleep << " of " << samples << " samples had a worker asleep";
}

TEST_P(WorkersTest, AChildOfForkGetsWorkersOfItsOwn) {
  if (GetParam().pool != WorkerPool::kEncore) GTEST_SKIP() << "OpenMP's own fork handling";
  Threads threads(2, spin());
  std::atomic<int> runs{0};
  run_tasks(2, [&](int) { runs.fetch_add(1); });   // the parent's workers exist
  ASSERT_EQ(runs.load(), 2);
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    alarm(20);   // a child waiting for its parent's workers would hang: SIGALRM ends it
    std::atomic<int> child_runs{0};
    std::thread::id ids[2];
    run_tasks(2, [&](int t) {
      child_runs.fetch_add(1);
      ids[t] = std::this_thread::get_id();
    });
    _exit(child_runs.load() == 2 && ids[0] != ids[1] ? 0 : 1);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status)) << "the child did not exit (signal " << WTERMSIG(status) << ")";
  EXPECT_EQ(WEXITSTATUS(status), 0);
}

// encore's workers with spin 0 (every wait sleeps at once) and 1000 us (the
// default: spinning between calls), and OpenMP's team.
INSTANTIATE_TEST_SUITE_P(Pools, WorkersTest,
                         ::testing::Values(Pool{WorkerPool::kEncore, 0}, Pool{WorkerPool::kEncore, 1000},
                                           Pool{WorkerPool::kOpenMp, 0}),
                         [](const ::testing::TestParamInfo<Pool>& p) {
                           return p.param.pool == WorkerPool::kOpenMp ? std::string("openmp")
                                                                      : "encore_spin" + std::to_string(p.param.spin_us);
                         });

// libgomp's workers sleep at once under GOMP_SPINCOUNT=0, or under
// OMP_WAIT_POLICY=passive unless GOMP_SPINCOUNT says otherwise.
TEST(WorkersEnvTest, ThePoolFollowsHowOpenMpsWorkersWait) {
  EXPECT_EQ(pool_for_environment(nullptr, nullptr, nullptr), WorkerPool::kOpenMp);
  EXPECT_EQ(pool_for_environment(nullptr, nullptr, "passive"), WorkerPool::kEncore);
  EXPECT_EQ(pool_for_environment(nullptr, nullptr, "PASSIVE"), WorkerPool::kEncore);
  EXPECT_EQ(pool_for_environment(nullptr, nullptr, "active"), WorkerPool::kOpenMp);
  EXPECT_EQ(pool_for_environment(nullptr, "0", nullptr), WorkerPool::kEncore);
  EXPECT_EQ(pool_for_environment(nullptr, "30000", "passive"), WorkerPool::kOpenMp);
  EXPECT_EQ(pool_for_environment(nullptr, "infinite", nullptr), WorkerPool::kOpenMp);
  EXPECT_EQ(pool_for_environment(nullptr, "", "passive"), WorkerPool::kEncore);
  EXPECT_EQ(pool_for_environment("openmp", "0", "passive"), WorkerPool::kOpenMp);
  EXPECT_EQ(pool_for_environment("Encore", "30000", nullptr), WorkerPool::kEncore);
  EXPECT_EQ(pool_for_environment("bogus", nullptr, "passive"), WorkerPool::kEncore);
}

// And the process took its pool from its environment (tests/meson.build sets
// ENCORE_CPU_WORKERS=encore, so the suite runs every kernel on encore's workers).
TEST(WorkersEnvTest, TheStartUpPoolIsTheEnvironments) {
  const WorkerPool expected = pool_for_environment(std::getenv("ENCORE_CPU_WORKERS"), std::getenv("GOMP_SPINCOUNT"),
                                                   std::getenv("OMP_WAIT_POLICY"));
  const char* workers = std::getenv("ENCORE_CPU_WORKERS");
  if (workers != nullptr && std::string(workers) == "encore") {
    EXPECT_EQ(expected, WorkerPool::kEncore);
  }
  EXPECT_EQ(worker_pool(), expected);
}

}  // namespace
}  // namespace encore::cpu
