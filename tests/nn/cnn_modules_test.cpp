// Conv2d, BatchNorm1d, BatchNorm2d, MaxPool2d, AvgPool2d, AdaptiveAvgPool2d and Flatten:
// shapes, initialisation bounds, forward equal to the ops they wrap,
// train()/eval() switching batch norm's statistics, buffers named and saved
// in checkpoints, dtype and device moves, and the error paths.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>

#include "encore/encore.h"
#include "encore/nn.h"
#include "encore/training_checkpoint.h"
#include "tests/test_util.h"

namespace encore {
namespace {

using testing::expect_error;
using testing::random_tensor;
using testing::values;

TEST(Conv2dModule, ShapesInitAndForward) {
  manual_seed(1);
  nn::Conv2d conv(4, 6, {3, 2}, 1, {1, 0}, 1, 2);
  EXPECT_EQ(conv.weight.shape(), (Shape{6, 2, 3, 2}));
  EXPECT_EQ(conv.bias.shape(), (Shape{6}));
  const double bound = 1.0 / std::sqrt(2.0 * 3 * 2);
  for (double v : values(conv.weight)) EXPECT_LE(std::abs(v), bound);
  EXPECT_EQ(conv.named_parameters().size(), 2u);
  Tensor x = random_tensor({2, 4, 5, 5}, 2);
  Tensor y = conv.forward(x);
  EXPECT_EQ(y.shape(), (Shape{2, 6, 5, 4}));
  EXPECT_EQ(values(y), values(conv2d(x, conv.weight, conv.bias, 1, {1, 0}, 1, 2)));
  nn::Conv2d no_bias(3, 3, 1, 1, 0, 1, 1, false);
  EXPECT_FALSE(no_bias.bias.defined());
  EXPECT_EQ(no_bias.parameters().size(), 1u);
  expect_error([] { nn::Conv2d(3, 4, 3, 1, 0, 1, 2); }, absl::StatusCode::kInvalidArgument,
               {"Conv2d", "in_channels=3", "groups=2"});
}

// The fan-in in / groups * kh * kw was an int64 product that could overflow
// (undefined behaviour) before any size check; the weight's element count
// is now checked first, naming the layer and the shape.
TEST(Conv2dModule, RefusesAWeightOfMoreThan2To63Elements) {
  const int64_t big = int64_t{1} << 31;
  expect_error([&] { nn::Conv2d(big, 1, {big, big}); }, absl::StatusCode::kInvalidArgument,
               {"Conv2d", "[1, 2147483648, 2147483648, 2147483648]", "2^63"});
  expect_error([&] { nn::Conv2d(big, big, {big, 1}); }, absl::StatusCode::kInvalidArgument,
               {"Conv2d", "[2147483648, 2147483648, 2147483648, 1]"});
}

TEST(BatchNorm2dModule, TrainUpdatesRunningStatsEvalUsesThem) {
  nn::BatchNorm2d bn(3, 1e-5, 0.25);
  NamedTensors buffers = bn.named_buffers();
  ASSERT_EQ(buffers.size(), 3u);
  EXPECT_EQ(buffers[0].first, "running_mean");
  EXPECT_EQ(buffers[1].first, "running_var");
  EXPECT_EQ(buffers[2].first, "num_batches_tracked");
  EXPECT_EQ(bn.named_persistent_buffers().size(), 3u);
  Tensor rm = zeros({3}), rv = ones({3});
  for (int i = 0; i < 3; ++i) {
    Tensor x = random_tensor({4, 3, 2, 2}, 10 + i);
    EXPECT_EQ(values(bn.forward(x)), values(batch_norm(x, rm, rv, bn.weight, bn.bias, true, 0.25, 1e-5)));
  }
  EXPECT_EQ(values(bn.running_mean), values(rm));
  EXPECT_EQ(values(bn.running_var), values(rv));
  EXPECT_EQ(bn.num_batches_tracked.item<int64_t>(), 3);
  bn.eval();
  Tensor x = random_tensor({2, 3, 2, 2}, 20);
  EXPECT_EQ(values(bn.forward(x)), values(batch_norm(x, rm, rv, bn.weight, bn.bias, false, 0.25, 1e-5)));
  EXPECT_EQ(values(bn.running_mean), values(rm));   // unchanged in eval
  EXPECT_EQ(bn.num_batches_tracked.item<int64_t>(), 3);
  // Without running statistics: batch statistics in both modes, no buffers.
  nn::BatchNorm2d plain(3, 1e-5, 0.1, false, false);
  plain.eval();
  EXPECT_TRUE(plain.named_buffers().empty());
  EXPECT_TRUE(plain.parameters().empty());
  EXPECT_EQ(values(plain.forward(x)), values(batch_norm(x, Tensor(), Tensor(), Tensor(), Tensor(), true)));
  expect_error([&] { bn.forward(x.view({2, 3, 4})); }, absl::StatusCode::kInvalidArgument, {"BatchNorm2d", "4-D"});
}

// BatchNorm1d: the same layer over [N, C] (after a Linear) and [N, C, L].
TEST(BatchNorm1dModule, NormalizesTwoAndThreeDimInputsLikeTheOp) {
  nn::BatchNorm1d bn(3, 1e-5, 0.2);
  EXPECT_EQ(bn.named_persistent_buffers().size(), 3u);
  Tensor rm = zeros({3}), rv = ones({3});
  for (const Shape& shape : {Shape{5, 3}, Shape{4, 3, 6}}) {
    Tensor x = random_tensor(shape, 30 + shape.size());
    EXPECT_EQ(values(bn.forward(x)), values(batch_norm(x, rm, rv, bn.weight, bn.bias, true, 0.2, 1e-5)));
  }
  EXPECT_EQ(values(bn.running_mean), values(rm));
  EXPECT_EQ(values(bn.running_var), values(rv));
  EXPECT_EQ(bn.num_batches_tracked.item<int64_t>(), 2);
  bn.eval();
  Tensor x = random_tensor({2, 3}, 40);
  EXPECT_EQ(values(bn.forward(x)), values(batch_norm(x, rm, rv, bn.weight, bn.bias, false, 0.2, 1e-5)));
  expect_error([&] { bn.forward(random_tensor({2, 3, 2, 2}, 1)); }, absl::StatusCode::kInvalidArgument,
               {"BatchNorm1d", "2-D or 3-D", "[2, 3, 2, 2]"});
  expect_error([&] { bn.forward(random_tensor({3}, 1)); }, absl::StatusCode::kInvalidArgument, {"BatchNorm1d"});
}

TEST(BatchNormModules, RefuseAChannelCountOtherThanNumFeatures) {
  nn::BatchNorm1d bn1(4, 1e-5, 0.1, false, false);   // no parameters or buffers that the op would check
  nn::BatchNorm2d bn2(4);
  expect_error([&] { bn1.forward(random_tensor({2, 3}, 1)); }, absl::StatusCode::kInvalidArgument,
               {"BatchNorm1d", "expected 4 channels", "[2, 3]"});
  expect_error([&] { bn2.forward(random_tensor({2, 3, 2, 2}, 1)); }, absl::StatusCode::kInvalidArgument,
               {"BatchNorm2d", "expected 4 channels"});
  expect_error([&] { nn::BatchNorm1d bad(0); }, absl::StatusCode::kInvalidArgument, {"BatchNorm1d", "num_features"});
}

// eps and momentum were taken as given: momentum 5 made running statistics
// diverge (running = -4 running + 5 batch) with no error, and a negative or
// NaN eps failed only at the first forward (LayerNorm's: never). Refused
// when built, naming the layer and the value.
TEST(NormModules, RefuseABadEpsOrMomentumWhenBuilt) {
  const double nan = std::nan("");
  for (double eps : {-1e-5, nan, HUGE_VAL}) {
    expect_error([&] { nn::BatchNorm2d bn(4, eps); }, absl::StatusCode::kInvalidArgument, {"BatchNorm2d", "eps"});
    expect_error([&] { nn::LayerNorm ln(4, eps); }, absl::StatusCode::kInvalidArgument, {"LayerNorm", "eps"});
  }
  for (double momentum : {-0.1, 1.5, 5.0, nan}) {
    expect_error([&] { nn::BatchNorm1d bn(4, 1e-5, momentum); }, absl::StatusCode::kInvalidArgument,
                 {"BatchNorm1d", "momentum", "[0, 1]"});
  }
  EXPECT_NO_THROW(nn::BatchNorm1d(4, 0.0, 1.0));   // the ends are allowed
  EXPECT_NO_THROW(nn::BatchNorm1d(4, 1e-5, 0.0));
  EXPECT_NO_THROW(nn::LayerNorm(4, 0.0));
}

// momentum = nullopt, PyTorch's cumulative moving average: after k training
// batches the running mean is the mean of the k batch means (a plain loop of
// PyTorch's update, factor 1 / num_batches_tracked, in double); eval updates
// nothing; the default stays 0.1.
TEST(BatchNorm2dModule, MomentumNulloptIsTheCumulativeAverage) {
  nn::BatchNorm2d bn(2, 1e-5, std::nullopt), ema(2);
  const int64_t c = 2, per_channel = 3 * 2 * 2;   // n h w
  std::vector<double> rm_ref(c, 0.0), rv_ref(c, 1.0), mean_sum(c, 0.0);
  for (int k = 1; k <= 6; ++k) {
    Tensor x = add(mul(random_tensor({3, c, 2, 2}, 60 + k), 0.5 * k), static_cast<double>(k));
    bn.forward(x);
    ema.forward(x);
    const std::vector<double> v = values(x);
    for (int64_t ch = 0; ch < c; ++ch) {
      double s = 0, ss = 0;
      for (int64_t i = 0; i < 3; ++i) {
        for (int64_t q = 0; q < 4; ++q) s += v[(i * c + ch) * 4 + q];
      }
      const double mean = s / per_channel;
      for (int64_t i = 0; i < 3; ++i) {
        for (int64_t q = 0; q < 4; ++q) ss += (v[(i * c + ch) * 4 + q] - mean) * (v[(i * c + ch) * 4 + q] - mean);
      }
      const double f = 1.0 / k;
      rm_ref[ch] = (1 - f) * rm_ref[ch] + f * mean;
      rv_ref[ch] = (1 - f) * rv_ref[ch] + f * ss / (per_channel - 1);
      mean_sum[ch] += mean;
    }
    EXPECT_EQ(bn.num_batches_tracked.item<int64_t>(), k);
    testing::expect_near(bn.running_mean, rm_ref, 1e-5, 1e-5);
    testing::expect_near(bn.running_var, rv_ref, 1e-5, 1e-5);
    testing::expect_near(bn.running_mean, std::vector<double>{mean_sum[0] / k, mean_sum[1] / k}, 1e-5, 1e-5);
  }
  EXPECT_NE(values(ema.running_mean), values(bn.running_mean));   // the default is still momentum 0.1
  bn.eval();
  const auto rm_before = values(bn.running_mean);
  bn.forward(random_tensor({3, c, 2, 2}, 70));
  EXPECT_EQ(values(bn.running_mean), rm_before);
  EXPECT_EQ(bn.num_batches_tracked.item<int64_t>(), 6);
}

TEST(BatchNorm2dModule, RunningStatsAreSavedAndLoadedWithCheckpoints) {
  const std::string path = (std::filesystem::temp_directory_path() / "encore_bn_checkpoint.safetensors").string();
  nn::BatchNorm2d bn(2);
  bn.forward(random_tensor({4, 2, 3, 3}, 1));
  ASSERT_TRUE(save_checkpoint(path, bn).ok());
  nn::BatchNorm2d fresh(2);
  ASSERT_TRUE(load_checkpoint(path, fresh).ok());
  EXPECT_EQ(values(fresh.running_mean), values(bn.running_mean));
  EXPECT_EQ(values(fresh.running_var), values(bn.running_var));
  EXPECT_EQ(fresh.num_batches_tracked.item<int64_t>(), 1);
  std::filesystem::remove(path);
}

TEST(BatchNorm2dModule, ToDtypeConvertsRunningStats) {
  nn::BatchNorm2d bn(2);
  bn.to(kBFloat16);
  EXPECT_EQ(bn.weight.dtype(), kBFloat16);
  EXPECT_EQ(bn.running_mean.dtype(), kBFloat16);
  EXPECT_EQ(bn.num_batches_tracked.dtype(), kInt64);
  Tensor y = bn.forward(random_tensor({3, 2, 2, 2}, 1).to(kBFloat16));
  EXPECT_EQ(y.dtype(), kBFloat16);
}

TEST(PoolingModules, ForwardEqualsTheOps) {
  Tensor x = random_tensor({2, 3, 7, 6}, 1);
  EXPECT_EQ(values(nn::MaxPool2d(3, Size2(2), 1).forward(x)), values(max_pool2d(x, 3, Size2(2), 1)));
  EXPECT_EQ(values(nn::MaxPool2d(2, std::nullopt, 0, 1, true).forward(x)),
            values(max_pool2d(x, 2, std::nullopt, 0, 1, true)));
  EXPECT_EQ(values(nn::AvgPool2d(2, Size2(1), 1, false, false).forward(x)),
            values(avg_pool2d(x, 2, Size2(1), 1, false, false)));
  EXPECT_EQ(values(nn::AdaptiveAvgPool2d({2, 3}).forward(x)), values(adaptive_avg_pool2d(x, {2, 3})));
  EXPECT_EQ(nn::Flatten().forward(x).shape(), (Shape{2, 126}));
  EXPECT_EQ(nn::Flatten(0, 1).forward(x).shape(), (Shape{6, 7, 6}));
  EXPECT_EQ(nn::MaxPool2d(2).forward(x).shape(), (Shape{2, 3, 3, 3}));
}

}  // namespace
}  // namespace encore
