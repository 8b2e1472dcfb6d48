// The step observer (src/core/step_observer.h): one scope installs it for
// launches, host reads, allocations and frees; scopes nest and restore what
// was installed before them, observing thread included (NOTE [ Observers
// belong to a thread ] in src/core/stream.h).
#include <gtest/gtest.h>

#include <string>
#include <thread>
#include <vector>

#include "encore/encore.h"
#include "src/core/step_observer.h"
#include "src/core/stream.h"

namespace encore {
namespace {

// Logs what it sees, and runs every launch.
class Log final : public StepObserver {
 public:
  bool on_launch(const LaunchRecord& launch) override {
    ops.emplace_back(launch.op);
    return true;
  }
  void on_host_access(const char* op) override { host.emplace_back(op); }
  void on_allocate(const Storage& s) override {
    allocated.push_back(s.data());
    bytes.push_back(s.nbytes());
    devices.push_back(s.device());
  }
  void on_free(const Storage& s) override { freed.push_back(s.data()); }

  std::vector<std::string> ops, host;
  std::vector<void*> allocated, freed;
  std::vector<int64_t> bytes;
  std::vector<Device> devices;
};

TEST(StepObserverTest, OneScopeSeesLaunchesHostReadsAllocationsAndFrees) {
  Log log;
  void* data = nullptr;
  {
    StepObserverScope observe(&log);
    EXPECT_EQ(current_stream(kCPU).observer(), &log);
    EXPECT_TRUE(current_stream(kCPU).observed_here());
    Tensor t = full({8}, 2.0);                 // one allocation (32 bytes), one fill
    data = t.data_ptr();
    EXPECT_EQ(t.sum().item<float>(), 16.0f);   // a sum, a host read; the sum's output freed
  }
  EXPECT_EQ(current_stream(kCPU).observer(), nullptr);
  EXPECT_FALSE(current_stream(kCPU).observed_here());
  ASSERT_GE(log.ops.size(), 2u);
  ASSERT_FALSE(log.host.empty());
  EXPECT_EQ(log.host[0], "item");
  ASSERT_EQ(log.allocated.size(), 2u);   // t, and the sum
  EXPECT_EQ(log.allocated[0], data);
  EXPECT_EQ(log.bytes[0], 32);
  EXPECT_EQ(log.devices[0], kCPU);
  // Both freed inside the scope, each once.
  EXPECT_EQ(log.freed.size(), 2u);
  EXPECT_NE(std::find(log.freed.begin(), log.freed.end(), data), log.freed.end());
}

TEST(StepObserverTest, ScopesNestAndRestoreTheOuterObserver) {
  Log outer, inner;
  {
    StepObserverScope a(&outer);
    Tensor x = full({4}, 1.0);
    {
      StepObserverScope b(&inner);
      EXPECT_EQ(current_stream(kCPU).observer(), &inner);
      Tensor y = x * 3.0;
      (void)y.to_vector<float>();
    }
    EXPECT_EQ(current_stream(kCPU).observer(), &outer);
    Tensor z = x + 1.0;                        // the outer observer again
    (void)z.to_vector<float>();
    {
      StepObserverScope nobody(nullptr);       // "nobody watches" for a scope
      Tensor w = x - 1.0;
      EXPECT_EQ(current_stream(kCPU).observer(), nullptr);
    }
    EXPECT_EQ(current_stream(kCPU).observer(), &outer);
  }
  EXPECT_EQ(current_stream(kCPU).observer(), nullptr);
  EXPECT_EQ(inner.host, std::vector<std::string>{"to_vector"});
  EXPECT_EQ(outer.host, std::vector<std::string>{"to_vector"});
  EXPECT_EQ(inner.allocated.size(), 1u);   // y
  EXPECT_EQ(outer.allocated.size(), 2u);   // x and z, not y or w
  const size_t inner_ops = inner.ops.size();
  EXPECT_GE(inner_ops, 1u);
  EXPECT_GE(outer.ops.size(), 2u);         // x's fill and z's add, not y's or w's
  for (const std::string& op : outer.ops) EXPECT_NE(op, "mul") << "the inner scope's launch";
}

// The scope restores the observing thread too: a scope on another thread
// that ends leaves the stream watched for the thread that installed the outer
// observer, not for itself.
TEST(StepObserverTest, AScopeOnAnotherThreadRestoresTheOuterObserversThread) {
  Log outer, other;
  StepObserverScope a(&outer);
  std::thread t([&] {
    StepObserverScope b(&other);
    EXPECT_TRUE(current_stream(kCPU).observed_here());
  });
  t.join();
  EXPECT_EQ(current_stream(kCPU).observer(), &outer);
  EXPECT_TRUE(current_stream(kCPU).observed_here());
  Tensor x = full({4}, 1.0);
  EXPECT_EQ(outer.allocated.size(), 1u);
  EXPECT_FALSE(outer.ops.empty());
}

// Allocations are observed per thread: another thread's do not reach this
// thread's observer.
TEST(StepObserverTest, AnotherThreadsAllocationsAreNotObserved) {
  Log log;
  StepObserverScope observe(&log);
  std::thread t([] { Tensor x = zeros({16}); });
  t.join();
  EXPECT_TRUE(log.allocated.empty());
  EXPECT_TRUE(log.freed.empty());
}

}  // namespace
}  // namespace encore
