// Data parallelism in one process: the launcher's environment, a world of
// one (collectives are the identity but still kernels of the launch path,
// so a captured step holds them), DistributedDataParallel's bookkeeping and
// its refusals. The multi-process cases are dist_mpi_test.cpp.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <map>
#include <string>

#include "absl/strings/str_cat.h"
#include "capture/graph_impl.h"
#include "encore/capture.h"
#include "encore/dist.h"
#include "encore/encore.h"
#include "tests/dist/dist_test_util.h"
#include "tests/test_util.h"

namespace encore {
namespace {

using testing::expect_error;

absl::StatusOr<dist::Environment> env_of(const std::map<std::string, std::string>& vars) {
  return dist::environment_from([&](const char* name) -> const char* {
    auto it = vars.find(name);
    return it == vars.end() ? nullptr : it->second.c_str();
  });
}

TEST(DistEnvironmentTest, ReadsEachLauncher) {
  absl::StatusOr<dist::Environment> e = env_of({});
  ASSERT_TRUE(e.ok());
  EXPECT_EQ(e->launcher, "none");
  EXPECT_EQ(e->world_size, 1);
  e = env_of({{"OMPI_COMM_WORLD_RANK", "3"}, {"OMPI_COMM_WORLD_SIZE", "8"}, {"OMPI_COMM_WORLD_LOCAL_RANK", "1"},
              {"RANK", "5"}, {"WORLD_SIZE", "6"}});   // mpirun's win over torchrun's
  ASSERT_TRUE(e.ok()) << e.status();
  EXPECT_EQ(e->launcher, "mpirun");
  EXPECT_EQ(e->rank, 3);
  EXPECT_EQ(e->world_size, 8);
  EXPECT_EQ(e->local_rank, 1);
  e = env_of({{"SLURM_PROCID", "2"}, {"SLURM_NTASKS", "4"}, {"SLURM_LOCALID", "0"}});
  ASSERT_TRUE(e.ok()) << e.status();
  EXPECT_EQ(e->launcher, "slurm");
  EXPECT_EQ(e->rank, 2);
  EXPECT_EQ(e->world_size, 4);
  EXPECT_EQ(e->local_rank, 0);
  e = env_of({{"RANK", "1"}, {"WORLD_SIZE", "2"}, {"LOCAL_RANK", "1"}, {"MASTER_ADDR", "10.0.0.1"},
              {"MASTER_PORT", "29500"}});
  ASSERT_TRUE(e.ok()) << e.status();
  EXPECT_EQ(e->launcher, "torchrun");
  EXPECT_EQ(e->rank, 1);
  EXPECT_EQ(e->local_rank, 1);
  EXPECT_EQ(e->master_addr, "10.0.0.1");
  EXPECT_EQ(e->master_port, 29500);
}

TEST(DistEnvironmentTest, RefusesMalformedValues) {
  absl::StatusOr<dist::Environment> e = env_of({{"RANK", "2"}, {"WORLD_SIZE", "2"}});
  ASSERT_FALSE(e.ok());
  EXPECT_NE(e.status().message().find("RANK=2 is not a rank of WORLD_SIZE=2"), std::string::npos) << e.status();
  e = env_of({{"OMPI_COMM_WORLD_RANK", "x"}, {"OMPI_COMM_WORLD_SIZE", "2"}});
  ASSERT_FALSE(e.ok());
  EXPECT_NE(e.status().message().find("OMPI_COMM_WORLD_RANK=\"x\" is not a non-negative integer"), std::string::npos);
  e = env_of({{"SLURM_PROCID", "0"}});
  ASSERT_FALSE(e.ok());
  EXPECT_NE(e.status().message().find("SLURM_PROCID is set but SLURM_NTASKS is not"), std::string::npos);
  absl::StatusOr<std::shared_ptr<dist::ProcessGroup>> g = dist::ProcessGroup::create({.timeout_s = 0});
  ASSERT_FALSE(g.ok());
  EXPECT_EQ(g.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(g.status().message().find("timeout_s is 0"), std::string::npos) << g.status();
  setenv("ENCORE_DIST_TIMEOUT", "soon", 1);
  g = dist::ProcessGroup::create();
  unsetenv("ENCORE_DIST_TIMEOUT");
  ASSERT_FALSE(g.ok());
  EXPECT_NE(g.status().message().find("ENCORE_DIST_TIMEOUT=\"soon\" is not a positive number"), std::string::npos)
      << g.status();
  setenv("ENCORE_DIST_TIMEOUT", "2.5", 1);
  g = dist::ProcessGroup::create();
  unsetenv("ENCORE_DIST_TIMEOUT");
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_EQ((*g)->timeout_s(), 2.5);
  expect_error([&] { (*g)->set_timeout(-1); }, absl::StatusCode::kInvalidArgument, {"set_timeout", "positive"});
}

// A local rank outside the world or the machine, and torchrun's variables
// inside a Slurm allocation that say another world, are refused. Before,
// LOCAL_RANK=7 of WORLD_SIZE=2 was taken (device() then named cuda:7), and
// torchrun's workers under sbatch (SLURM_PROCID=0, SLURM_NTASKS=1 inherited)
// each became rank 0 of a world of one: four processes trained apart with
// no error.
TEST(DistEnvironmentTest, RefusesLocalRanksOutsideTheWorldAndMixedLaunchers) {
  absl::StatusOr<dist::Environment> e = env_of({{"RANK", "1"}, {"WORLD_SIZE", "2"}, {"LOCAL_RANK", "7"}});
  ASSERT_FALSE(e.ok());
  EXPECT_EQ(e.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(e.status().message().find("LOCAL_RANK=7 is not a local rank of WORLD_SIZE=2"), std::string::npos)
      << e.status();
  e = env_of({{"OMPI_COMM_WORLD_RANK", "3"}, {"OMPI_COMM_WORLD_SIZE", "8"}, {"OMPI_COMM_WORLD_LOCAL_RANK", "4"},
              {"OMPI_COMM_WORLD_LOCAL_SIZE", "4"}});
  ASSERT_FALSE(e.ok());
  EXPECT_NE(e.status().message().find("OMPI_COMM_WORLD_LOCAL_RANK=4 is not a local rank of "
                                      "OMPI_COMM_WORLD_LOCAL_SIZE=4"),
            std::string::npos)
      << e.status();
  e = env_of({{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "1"}, {"SLURM_LOCALID", "0"}, {"RANK", "2"},
              {"WORLD_SIZE", "4"}, {"LOCAL_RANK", "2"}});
  ASSERT_FALSE(e.ok());
  EXPECT_EQ(e.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(e.status().message().find("SLURM_PROCID=0 of SLURM_NTASKS=1 but RANK=2 of WORLD_SIZE=4"),
            std::string::npos)
      << e.status();
  // Where they agree (srun started the ranks and exported torchrun's names too), Slurm's are taken.
  e = env_of({{"SLURM_PROCID", "1"}, {"SLURM_NTASKS", "2"}, {"RANK", "1"}, {"WORLD_SIZE", "2"}});
  ASSERT_TRUE(e.ok()) << e.status();
  EXPECT_EQ(e->launcher, "slurm");
  e = env_of({{"OMPI_COMM_WORLD_RANK", "1"}, {"OMPI_COMM_WORLD_SIZE", "2"}, {"OMPI_COMM_WORLD_LOCAL_RANK", "1"},
              {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"}});
  ASSERT_TRUE(e.ok()) << e.status();
  EXPECT_EQ(e->local_rank, 1);
}

// "Never hang": an infinite or absurd timeout would overflow the deadline's
// clock arithmetic (a deadline in the past, a rank spinning forever), so the
// three ways of setting one refuse it.
TEST(DistEnvironmentTest, RefusesInfiniteAndHugeTimeouts) {
  for (double bad : std::vector<double>{INFINITY, -INFINITY, NAN, 1e300, 2e7}) {
    absl::StatusOr<std::shared_ptr<dist::ProcessGroup>> g = dist::ProcessGroup::create({.timeout_s = bad});
    ASSERT_FALSE(g.ok()) << bad;
    EXPECT_EQ(g.status().code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_NE(g.status().message().find("timeout_s is"), std::string::npos) << g.status();
    EXPECT_NE(g.status().message().find("at most 1e+07"), std::string::npos) << g.status();
  }
  for (const char* bad : {"inf", "infinity", "nan", "1e300", "2e7"}) {
    setenv("ENCORE_DIST_TIMEOUT", bad, 1);
    absl::StatusOr<std::shared_ptr<dist::ProcessGroup>> g = dist::ProcessGroup::create();
    unsetenv("ENCORE_DIST_TIMEOUT");
    ASSERT_FALSE(g.ok()) << bad;
    EXPECT_EQ(g.status().code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_NE(g.status().message().find(absl::StrCat("ENCORE_DIST_TIMEOUT=\"", bad, "\"")), std::string::npos)
        << g.status();
  }
  absl::StatusOr<std::shared_ptr<dist::ProcessGroup>> g = dist::ProcessGroup::create({.timeout_s = 1e7});
  ASSERT_TRUE(g.ok()) << g.status();   // the largest accepted
  for (double bad : std::vector<double>{INFINITY, NAN, 1e300, 2e7}) {
    expect_error([&] { (*g)->set_timeout(bad); }, absl::StatusCode::kInvalidArgument,
                 {"set_timeout", "at most 1e+07"});
  }
  EXPECT_EQ((*g)->timeout_s(), 1e7);   // unchanged by the refused calls
  (*g)->barrier();                     // and still bounded: returns at once in a world of one
}

std::shared_ptr<dist::ProcessGroup> one() {
  absl::StatusOr<std::shared_ptr<dist::ProcessGroup>> g = dist::ProcessGroup::create();
  if (!g.ok()) throw Error(g.status());
  return *g;
}

TEST(DistOneProcessTest, CollectivesOfAWorldOfOneAreTheIdentity) {
  std::shared_ptr<dist::ProcessGroup> g = one();
  ASSERT_EQ(g->world_size(), 1);
  EXPECT_EQ(g->rank(), 0);
  Tensor t = from_vector<float>({1.5f, -2.0f, 3.25f});
  g->all_reduce(t, dist::ReduceOp::kSum);
  g->all_reduce(t, dist::ReduceOp::kAverage);
  g->broadcast(t, 0);
  g->barrier();
  EXPECT_EQ(t.to_vector<float>(), (std::vector<float>{1.5f, -2.0f, 3.25f}));
  EXPECT_EQ(g->all_gather(42), std::vector<uint64_t>{42});
  expect_error([&] { g->broadcast(t, 1); }, absl::StatusCode::kInvalidArgument,
               {"dist::broadcast on rank 0 of 1", "root 1 is not a rank of a world of 1"});
  expect_error([&] { g->all_reduce(zeros({2}, kFloat16)); }, absl::StatusCode::kInvalidArgument,
               {"dist::all_reduce on rank 0 of 1", "dtype f16", "MPI reduces float32"});
}

// Collectives are nodes of a captured step, with their operands declared.
TEST(DistOneProcessTest, CollectivesAreNodesOfTheCapturedStep) {
  std::shared_ptr<dist::ProcessGroup> g = one();
  Tensor x = from_vector<float>({1, 2, 3, 4});
  Tensor acc = zeros({4});
  auto step = [&] {
    Tensor y = x * 2.0;
    g->all_reduce(y, dist::ReduceOp::kAverage);
    acc.add_(y);
    return std::vector<Tensor>{y};
  };
  absl::StatusOr<Graph> graph = capture(step);
  ASSERT_TRUE(graph.ok()) << graph.status();
  const Graph::Impl& impl = graph->internals();
  int found = -1;
  for (int64_t i = 0; i < impl.stats.kernels; ++i) {
    if (std::string(impl.node_op(i)) == "dist.all_reduce") found = static_cast<int>(i);
  }
  ASSERT_GE(found, 0) << "no all-reduce node";
  EXPECT_EQ(impl.node_read_bytes(found), std::vector<int64_t>{16});    // y: a temporary of 4 floats
  EXPECT_EQ(impl.node_write_bytes(found), std::vector<int64_t>{16});
  EXPECT_EQ(impl.node_temporaries(found).size(), 1u);
  const std::vector<float> before = acc.to_vector<float>();   // warm-ups and the recorded run
  ASSERT_TRUE(graph->replay().ok());
  std::vector<float> after = acc.to_vector<float>();
  for (size_t i = 0; i < after.size(); ++i) EXPECT_EQ(after[i], before[i] + 2.0f * (i + 1));
}

// With one process the wrapper changes nothing: the same bits as plain training.
TEST(DistOneProcessTest, DdpOfOneProcessEqualsPlainTrainingBitForBit) {
  auto ddp = testing::DdpRig::make(one(), 8, 1, 0, 4, {.bucket_cap_bytes = 500});
  auto plain = testing::DdpRig::make(nullptr, 8, 1, 0, 4);
  EXPECT_GT(ddp->ddp->bucket_parameters().size(), 1u);
  for (int i = 0; i < 10; ++i) {
    ddp->fill(i);
    plain->fill(i);
    ddp->step();
    plain->step();
  }
  EXPECT_EQ(ddp->state_hash(), plain->state_hash());
  // Buckets hold every parameter once; a parameter over the cap gets one of its own.
  std::vector<int> seen(ddp->model->parameters().size(), 0);
  for (const auto& b : ddp->ddp->bucket_parameters()) {
    int64_t bytes = 0;
    for (int64_t i : b) {
      ++seen[i];
      bytes += ddp->model->parameters()[i].numel() * 4;
    }
    EXPECT_TRUE(bytes <= 500 || b.size() == 1) << "a bucket of " << bytes << " bytes";
  }
  for (int s : seen) EXPECT_EQ(s, 1);
}

// Buffers are broadcast after each synchronized backward, as kernels of
// the step (one per dtype and device, after the all-reduces), and not under
// no_sync(); in a world of one they change nothing, eagerly or replayed.
TEST(DistOneProcessTest, DdpBroadcastsBuffersAfterEachSynchronizedBackward) {
  auto ddp = testing::DdpRig::make(one(), 8, 1, 0, 6, {}, /*batch_norm=*/true);
  auto plain = testing::DdpRig::make(nullptr, 8, 1, 0, 6, {}, /*batch_norm=*/true);
  EXPECT_EQ(ddp->ddp->counters().buffer_broadcasts, 1);   // construction
  for (int i = 0; i < 3; ++i) {
    ddp->fill(i);
    plain->fill(i);
    ddp->step();
    plain->step();
  }
  EXPECT_EQ(ddp->ddp->counters().buffer_broadcasts, 4);
  {
    auto scope = ddp->ddp->no_sync();
    ddp->loss().backward();
  }
  EXPECT_EQ(ddp->ddp->counters().buffer_broadcasts, 4) << "no_sync() broadcast the buffers";
  ddp->opt->zero_grad();
  plain->loss().backward();   // the same micro-step, to stay equal
  plain->opt->zero_grad();
  ddp->fill(3);
  absl::StatusOr<Graph> g = capture([&] { return ddp->step(); }, {.warmup = 1});
  ASSERT_TRUE(g.ok()) << g.status();
  std::vector<std::string> ops = testing::node_ops(*g);
  std::erase_if(ops, [](const std::string& op) { return !op.starts_with("dist."); });
  EXPECT_EQ(ops, (std::vector<std::string>{"dist.start", "dist.wait", "dist.broadcast", "dist.broadcast"}));
  plain->fill(3);
  plain->step();
  for (int i = 4; i < 8; ++i) {
    ASSERT_TRUE(testing::replay_beside_eager(*g, *ddp, *plain, i).ok());
  }
  EXPECT_EQ(ddp->state_hash(), plain->state_hash());
  EXPECT_EQ(ddp->buffers_hash(), plain->buffers_hash());
}

// A captured step holds its all-reduces or not as its recorded run had
// them, so it replays only in the same no_sync() setting. Before, a
// micro-step captured inside no_sync() replayed outside it without any
// all-reduce (each rank stepped with its own gradients), and a step
// captured outside replayed inside still communicated, both without error.
TEST(DistOneProcessTest, CapturedStepReplaysOnlyInItsNoSyncSetting) {
  auto rig = testing::DdpRig::make(one(), 4, 1, 0, 5);
  rig->fill(0);
  auto micro = [&] {
    rig->loss().backward();
    return std::vector<Tensor>{};
  };
  absl::StatusOr<Graph> accumulate = [&] {
    auto scope = rig->ddp->no_sync();
    return capture(micro);
  }();
  ASSERT_TRUE(accumulate.ok()) << accumulate.status();
  const int64_t launched = rig->ddp->counters().launched;
  absl::Status s = accumulate->replay();   // outside no_sync(): it would not all-reduce
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
  EXPECT_NE(s.message().find("gradient synchronization of a DistributedDataParallel as no_sync()"),
            std::string::npos)
      << s;
  {
    auto scope = rig->ddp->no_sync();
    EXPECT_TRUE(accumulate->replay().ok());
  }
  absl::StatusOr<Graph> synced = capture(micro);
  ASSERT_TRUE(synced.ok()) << synced.status();
  EXPECT_GT(rig->ddp->counters().launched, launched);   // the recorded run all-reduced
  {
    auto scope = rig->ddp->no_sync();
    s = synced->replay();   // inside no_sync(): it would all-reduce
    EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
    EXPECT_NE(s.message().find("as synchronized (outside no_sync())"), std::string::npos) << s;
  }
  EXPECT_TRUE(synced->replay().ok());
}

struct TwoParams : nn::Module {
  TwoParams() {
    a = register_parameter("a", ones({3}));
    b = register_parameter("b", ones({3}));
  }
  Tensor a, b;
};

// A backward that leaves a parameter without gradient is refused at its
// end, naming the parameter, so that no optimizer step uses gradients that
// were never averaged (whether or not the loop calls finish()).
TEST(DistOneProcessTest, BackwardNamesAParameterWithoutGradient) {
  TwoParams m;
  dist::DistributedDataParallel ddp(m, one(), {.bucket_cap_bytes = 12});   // one bucket each
  expect_error([&] { (m.a * 2.0).sum().backward(); }, absl::StatusCode::kFailedPrecondition,   // b takes no part
               {"DistributedDataParallel on rank 0", "1 of the 2", "'b' got none"});
  ddp.finish();   // the failed backward was cleared: nothing in flight
  ((m.a + m.b) * 2.0).sum().backward();   // a full backward works again
  ddp.finish();
  EXPECT_EQ(m.b.grad().to_vector<float>(), (std::vector<float>{2, 2, 2}));
}

// A synchronized backward that throws midway leaves its buckets half
// counted; the next backward starts afresh (launching each bucket when its
// last gradient arrives, as in a clean run), and finish() after it is a
// no-op. finish() called right after the failed one says it failed.
TEST(DistOneProcessTest, DdpStartsAfreshAfterABackwardThatThrew) {
  nn::Sequential net(std::make_unique<nn::Linear>(4, 3), std::make_unique<nn::Linear>(3, 2));
  dist::DistributedDataParallel ddp(net, one(), {.bucket_cap_bytes = 16});   // a bucket per parameter
  ASSERT_EQ(ddp.bucket_parameters().size(), 4u);
  auto good = [&] { sum(net.forward(full({2, 4}, 1.0))).backward(); };
  auto failing = [&] {
    Tensor x = full({2, 4}, 1.0);
    Tensor loss = sum(net.forward(x));
    {
      NoGradGuard no_grad;
      x.add_(ones({2, 4}));   // the first layer's saved input changed: its backward throws
    }
    EXPECT_FALSE(status_of([&] { loss.backward(); }).ok());
  };
  good();
  const std::vector<int64_t> clean = ddp.counters().remaining_at_launch;
  ASSERT_EQ(clean.size(), 4u);
  failing();   // the second layer's two gradients came, the first layer's did not
  expect_error([&] { ddp.finish(); }, absl::StatusCode::kFailedPrecondition,
               {"DistributedDataParallel::finish on rank 0", "the last synchronized backward threw",
                "after 2 of the 4 parameter gradients"});
  ddp.finish();   // cleared: a no-op
  for (int i = 0; i < 3; ++i) {
    failing();    // this time nobody calls finish(): the next backward cleans up
    const int64_t launched = ddp.counters().launched;
    good();
    EXPECT_EQ(ddp.counters().launched - launched, 4) << "a launch per bucket";
    EXPECT_EQ(ddp.counters().remaining_at_launch, clean) << "buckets launched out of step";
    ddp.finish();   // a no-op after a backward that completed
  }
  EXPECT_EQ(ddp.counters().aborted_backwards, 4);
}

// MPI reduces float32 only on the CPU: a half-precision parameter that
// requires grad is refused when the wrapper is made, naming it, rather than
// inside the first backward (even with one process, so that a program tried
// alone does not fail only once it runs on several).
TEST(DistOneProcessTest, DdpRefusesHalfPrecisionCpuParameters) {
  for (DType dtype : {kBFloat16, kFloat16}) {
    nn::Sequential net(std::make_unique<nn::Linear>(4, 3), std::make_unique<nn::Linear>(3, 2));
    net.to(dtype);
    expect_error([&] { dist::DistributedDataParallel ddp(net, one()); }, absl::StatusCode::kInvalidArgument,
                 {"DistributedDataParallel on rank 0", "parameter '0.weight'", std::string(dtype_name(dtype)),
                  "float32"});
  }
  // A frozen half-precision parameter takes no part in the all-reduce: accepted.
  struct WithFrozenHalf : nn::Module {
    WithFrozenHalf() {
      w = register_parameter("w", ones({3}));
      frozen = register_parameter("frozen", ones({3}).to(kBFloat16));
      frozen.requires_grad_(false);
    }
    Tensor w, frozen;
  } m;
  dist::DistributedDataParallel ddp(m, one());
  EXPECT_EQ(ddp.bucket_parameters(), (std::vector<std::vector<int64_t>>{{0}}));
}

// As PyTorch: a module with nothing to average is refused, since no
// backward would ever synchronize it (nor broadcast its buffers).
TEST(DistOneProcessTest, DdpRefusesAModuleWithoutTrainableParameters) {
  nn::BatchNorm1d norm(3);   // buffers only once its two parameters are frozen
  for (Tensor p : norm.parameters()) p.requires_grad_(false);
  expect_error([&] { dist::DistributedDataParallel ddp(norm, one()); }, absl::StatusCode::kInvalidArgument,
               {"DistributedDataParallel on rank 0", "no parameter that requires grad", "2 parameters"});
  struct Empty : nn::Module {
  } empty;
  expect_error([&] { dist::DistributedDataParallel ddp(empty, one()); }, absl::StatusCode::kInvalidArgument,
               {"no parameter that requires grad", "0 parameters"});
}

// A gradient that reaches a parameter twice in one synchronized backward (a
// backward started from a hook inside another) is the user's error, named.
TEST(DistOneProcessTest, DdpNamesAParameterThatGetsTwoGradientsInOneBackward) {
  TwoParams m;
  bool nested = false;
  autograd::register_post_accumulate_hook(m.a, [&](const Tensor& a) {   // runs before the wrapper's hook
    if (nested) return;
    nested = true;
    GradMode::set_enabled(true);   // hooks run with grad mode off
    Tensor again = (a * 3.0).sum();
    GradMode::set_enabled(false);
    again.backward();   // a second backward from inside the first one
  });
  dist::DistributedDataParallel ddp(m, one());
  expect_error([&] { (m.a * 2.0).sum().backward(); }, absl::StatusCode::kFailedPrecondition,
               {"DistributedDataParallel on rank 0", "'a' received a second gradient in one synchronized backward"});
}

}  // namespace
}  // namespace encore
