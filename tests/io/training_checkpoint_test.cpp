// Model + optimizer checkpoints: a run saved and loaded into fresh objects
// continues bit for bit; mismatches are refused with the tensor named.
#include <gtest/gtest.h>

#include <cstring>

#include "encore/encore.h"
#include "tests/test_util.h"

namespace encore {
namespace {

struct TinyRun {
  explicit TinyRun(uint64_t seed) : model(seeded_widths(seed)), opt(model.parameters()) {}
  static std::vector<int64_t> seeded_widths(uint64_t seed) {
    manual_seed(seed);   // Mlp draws its init from the default generator
    return {6, 8, 3};
  }
  void step(const Tensor& x, const Tensor& y) {
    opt.zero_grad();
    cross_entropy(model.forward(x), y).backward();
    opt.step();
  }
  nn::Mlp model;
  optim::AdamW opt;
};

TEST(TrainingCheckpointTest, ALoadedRunContinuesBitForBit) {
  Tensor x = testing::random_tensor({4, 6}, 1);
  Tensor y = from_vector<int64_t>({0, 1, 2, 1});
  const std::string path = ::testing::TempDir() + "/run.safetensors";
  TinyRun a(1);
  for (int i = 0; i < 3; ++i) a.step(x, y);
  ASSERT_TRUE(save_checkpoint(path, a.model, &a.opt).ok());
  TinyRun b(2);                                          // different init, no optimizer state yet
  absl::Status st = load_checkpoint(path, b.model, &b.opt);
  ASSERT_TRUE(st.ok()) << st;
  a.step(x, y);
  b.step(x, y);
  std::vector<Tensor> pa = a.model.parameters(), pb = b.model.parameters();
  for (size_t i = 0; i < pa.size(); ++i) {
    std::vector<float> va = pa[i].to_vector<float>(), vb = pb[i].to_vector<float>();
    EXPECT_EQ(std::memcmp(va.data(), vb.data(), va.size() * sizeof(float)), 0) << "parameter " << i;
  }
}

TEST(TrainingCheckpointTest, MismatchesAreRefusedNamingTheTensor) {
  const std::string path = ::testing::TempDir() + "/model_only.safetensors";
  TinyRun a(1);
  ASSERT_TRUE(save_checkpoint(path, a.model).ok());
  TinyRun b(1);
  absl::Status st = load_checkpoint(path, b.model, &b.opt);   // the file has no optimizer state
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
