// Data parallelism on CUDA over NCCL. One process: a world of one whose
// collectives are real NCCL calls on the device's stream, captured into the
// step's CUDA Graph (stream capture of NCCL), replayed equal to eager bit
// for bit. Several processes (meson's dist_cuda_mpi runs this binary under
// mpirun -np 2): one GPU each, ranks bit-identical after replayed steps;
// skipped without a GPU per process. ENCORE_REQUIRE_GPU=1 turns "no GPU"
// into a failure (tests/gpu_required.h).
#include <gtest/gtest.h>

#include <algorithm>

#include "capture/graph_impl.h"
#include "encore/capture.h"
#include "encore/dist.h"
#include "encore/encore.h"
#include "tests/dist/dist_test_util.h"
#include "tests/gpu_required.h"
#include "tests/test_util.h"

namespace encore {
namespace {

using testing::world;

// Whether every rank has a GPU of its own (all ranks decide alike, so that
// none waits in a collective the others skipped).
bool every_rank_has_a_gpu() {
  const bool mine = cuda_available() && status_of([] { (void)world()->device(); }).ok();
  for (uint64_t v : world()->all_gather(mine ? 1 : 0)) {
    if (v == 0) return false;
  }
  return true;
}

#define NEED_GPU()                                                                          \
  if (!every_rank_has_a_gpu()) {                                                            \
    if (testing::gpu_required() && !cuda_available()) FAIL() << "ENCORE_REQUIRE_GPU=1 but no GPU"; \
    GTEST_SKIP() << "no usable GPU for every process";                                     \
  }                                                                                         \
  static_assert(true)

// The rig of tests/dist/dist_test_util.h, moved to the rank's GPU.
std::unique_ptr<testing::DdpRig> cuda_rig(std::shared_ptr<dist::ProcessGroup> pg, uint64_t seed) {
  const Device dev = pg->device();
  manual_seed(seed);
  auto r = std::make_unique<testing::DdpRig>();
  r->model = std::make_unique<nn::Mlp>(std::vector<int64_t>{testing::kIn, testing::kHidden, testing::kClasses});
  r->model->to(dev);
  r->ddp = std::make_unique<dist::DistributedDataParallel>(*r->model, pg, dist::DdpOptions{.bucket_cap_bytes = 600});
  r->opt = std::make_unique<optim::AdamW>(r->model->parameters(), optim::AdamWOptions{.lr = 1e-2});
  r->world = pg->world_size();
  r->rank = pg->rank();
  r->x = zeros({r->local_batch, testing::kIn}, dev);
  r->y = zeros({r->local_batch}, kInt64, dev);
  return r;
}

TEST(DistCudaTest, CollectivesOnTheDevice) {
  NEED_GPU();
  const Device dev = world()->device();
  const int n = world()->world_size(), r = world()->rank();
  Tensor t = full({1000}, 1.0 + r, kFloat32, dev);
  world()->all_reduce(t, dist::ReduceOp::kSum);
  const float sum = n * (n + 1) / 2.0f;
  for (float v : t.to_vector<float>()) ASSERT_EQ(v, sum);
  world()->all_reduce(t, dist::ReduceOp::kAverage);
  for (float v : t.to_vector<float>()) ASSERT_EQ(v, sum);
  Tensor b = full({7}, 3.0 + r, kBFloat16, dev);
  world()->broadcast(b, 0);
  for (float v : b.to(kFloat32).to_vector<float>()) ASSERT_EQ(v, 3.0f);
}

// The NCCL all-reduces are nodes of the CUDA Graph; replays equal an eager
// twin bit for bit; every rank ends with the same bits.
TEST(DistCudaTest, CapturedNcclStepReplaysEagerBitForBit) {
  NEED_GPU();
  auto eager = cuda_rig(world(), 9);
  auto graphed = cuda_rig(world(), 9);
  absl::StatusOr<Graph> g = testing::capture_twin(*eager, *graphed);
  ASSERT_TRUE(g.ok()) << g.status();
  const std::vector<std::string> ops = testing::node_ops(*g);
  EXPECT_EQ(std::count(ops.begin(), ops.end(), "dist.start"),
            static_cast<int64_t>(graphed->ddp->bucket_parameters().size()));
  for (int i = 2; i < 30; ++i) {
    ASSERT_TRUE(testing::replay_beside_eager(*g, *graphed, *eager, i).ok());
  }
  ASSERT_EQ(graphed->state_hash(), eager->state_hash());
  std::vector<uint64_t> all = world()->all_gather(graphed->state_hash());
  for (size_t k = 1; k < all.size(); ++k) EXPECT_EQ(all[k], all[0]) << "rank " << k << " differs";
}

// Several processes, one GPU each (mpirun -np 2 on a machine with 2 GPUs).
TEST(DistCudaTest, SeveralGpusStayBitIdentical) {
  if (world()->world_size() < 2) GTEST_SKIP() << "one process: run under mpirun -np 2 with a GPU per process";
  NEED_GPU();
  auto rig = cuda_rig(world(), 4);
  for (int i = 0; i < 20; ++i) {
    rig->fill(i);
    rig->step();
  }
  std::vector<uint64_t> all = world()->all_gather(rig->state_hash());
  for (size_t k = 1; k < all.size(); ++k) EXPECT_EQ(all[k], all[0]) << "rank " << k << " differs";
}

}  // namespace
}  // namespace encore
