// Model + optimizer checkpoints: a run saved and loaded into fresh objects
// continues bit for bit; mismatches are refused with the tensor named.
#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <string>

#include "encore/encore.h"
#include "tests/backends/cuda_test_util.h"
#include "tests/test_util.h"

namespace encore {
namespace {

struct TinyRun {
  explicit TinyRun(uint64_t seed, Device device = kCPU) : model(seeded_widths(seed)) {
    model.to(device);   // before the optimizer takes the parameters
    opt = std::make_unique<optim::AdamW>(model.parameters());
  }
  static std::vector<int64_t> seeded_widths(uint64_t seed) {
    manual_seed(seed);   // Mlp draws its init from the default generator
    return {6, 8, 3};
  }
  void step(const Tensor& x, const Tensor& y) {
    opt->zero_grad();
    cross_entropy(model.forward(x), y).backward();
    opt->step();
  }
  nn::Mlp model;
  std::unique_ptr<optim::AdamW> opt;
};

void expect_same_parameters(const TinyRun& a, const TinyRun& b) {
  std::vector<Tensor> pa = a.model.parameters(), pb = b.model.parameters();
  ASSERT_EQ(pa.size(), pb.size());
  for (size_t i = 0; i < pa.size(); ++i) {
    std::vector<float> va = pa[i].to_vector<float>(), vb = pb[i].to_vector<float>();
    EXPECT_EQ(std::memcmp(va.data(), vb.data(), va.size() * sizeof(float)), 0) << "parameter " << i;
  }
}

// Three steps, save, load into a fresh run (other init, no optimizer state),
// then one more step on each: the same bits.
void expect_a_loaded_run_continues_bit_for_bit(Device device) {
  Tensor x = testing::random_tensor({4, 6}, 1).to(device);
  Tensor y = from_vector<int64_t>({0, 1, 2, 1}).to(device);
  const std::string path = ::testing::TempDir() + "/run_" + device.str() + ".safetensors";
  TinyRun a(1, device);
  for (int i = 0; i < 3; ++i) a.step(x, y);
  ASSERT_TRUE(save_checkpoint(path, a.model, a.opt.get()).ok());
  TinyRun b(2, device);
  absl::Status st = load_checkpoint(path, b.model, b.opt.get());
  ASSERT_TRUE(st.ok()) << st;
  for (const Tensor& p : b.model.parameters()) EXPECT_EQ(p.device(), device);
  a.step(x, y);
  b.step(x, y);
  expect_same_parameters(a, b);
}

TEST(TrainingCheckpointTest, ALoadedRunContinuesBitForBit) { expect_a_loaded_run_continues_bit_for_bit(kCPU); }

TEST(CudaTrainingCheckpointTest, ALoadedRunContinuesBitForBit) {
  ENCORE_SKIP_WITHOUT_GPU();
  expect_a_loaded_run_continues_bit_for_bit(Device::cuda(0));
}

// A checkpoint written from the GPU loads into a CPU run (and back) with
// every value and the optimizer's step count intact.
TEST(CudaTrainingCheckpointTest, CheckpointsMoveBetweenDevicesExactly) {
  ENCORE_SKIP_WITHOUT_GPU();
  Tensor x = testing::random_tensor({4, 6}, 1);
  Tensor y = from_vector<int64_t>({0, 1, 2, 1});
  const std::string path = ::testing::TempDir() + "/gpu_run.safetensors";
  TinyRun gpu(1, Device::cuda(0));
  for (int i = 0; i < 3; ++i) gpu.step(x.to(Device::cuda(0)), y.to(Device::cuda(0)));
  ASSERT_TRUE(save_checkpoint(path, gpu.model, gpu.opt.get()).ok());
  TinyRun cpu(2);
  absl::Status st = load_checkpoint(path, cpu.model, cpu.opt.get());
  ASSERT_TRUE(st.ok()) << st;
  expect_same_parameters(gpu, cpu);
  const std::string back = ::testing::TempDir() + "/cpu_run.safetensors";
  ASSERT_TRUE(save_checkpoint(back, cpu.model, cpu.opt.get()).ok());
  TinyRun gpu2(3, Device::cuda(0));
  st = load_checkpoint(back, gpu2.model, gpu2.opt.get());
  ASSERT_TRUE(st.ok()) << st;
  gpu.step(x.to(Device::cuda(0)), y.to(Device::cuda(0)));
  gpu2.step(x.to(Device::cuda(0)), y.to(Device::cuda(0)));
  expect_same_parameters(gpu, gpu2);   // same device, same state: the same next step
}

// Write failures reach the caller (issue #17): a missing directory, a
// device that is not a regular file.
TEST(TrainingCheckpointTest, SavesThatCannotBeWrittenReturnTheError) {
  TinyRun run(3);
  const absl::Status missing = save_checkpoint(::testing::TempDir() + "/no_such_dir/run.safetensors", run.model,
                                               run.opt.get());
  EXPECT_EQ(missing.code(), absl::StatusCode::kNotFound) << missing;
  EXPECT_NE(missing.message().find("no_such_dir/run.safetensors"), absl::string_view::npos) << missing;
  const absl::Status full = save_checkpoint("/dev/full", run.model, run.opt.get());
  EXPECT_EQ(full.code(), absl::StatusCode::kFailedPrecondition) << full;
  EXPECT_NE(full.message().find("/dev/full"), absl::string_view::npos) << full;
}

TEST(TrainingCheckpointTest, MismatchesAreRefusedNamingTheTensor) {
  const std::string path = ::testing::TempDir() + "/model_only.safetensors";
  TinyRun a(1);
  ASSERT_TRUE(save_checkpoint(path, a.model).ok());
  TinyRun b(1);
  absl::Status st = load_checkpoint(path, b.model, b.opt.get());   // the file has no optimizer state
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find("optim."), absl::string_view::npos) << st;
  nn::Mlp other(std::vector<int64_t>{6, 9, 3});
  st = load_checkpoint(path, other);
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find("model.layers.0.weight"), absl::string_view::npos) << st;
  EXPECT_TRUE(load_checkpoint(path, b.model).ok());
}

}  // namespace
}  // namespace encore
