// include/encore/bucketing.h: bucket choice, padding, and that padded
// training keeps the loss: padded graphed training equals padded eager
// training bit for bit, and unpadded eager training to float tolerance.
#include "encore/bucketing.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <memory>
#include <vector>

#include "encore/encore.h"
#include "encore/nn.h"
#include "encore/optim.h"
#include "tests/test_util.h"

namespace encore::nn {
namespace {

TEST(BucketingTest, BucketsArePowersOfTwoOrTheUsersList) {
  EXPECT_EQ(bucket_for(1), 1);
  EXPECT_EQ(bucket_for(3), 4);
  EXPECT_EQ(bucket_for(4), 4);
  EXPECT_EQ(bucket_for(5), 8);
  EXPECT_EQ(bucket_for(5, {.buckets = {6, 10}}), 6);
  EXPECT_EQ(bucket_for(7, {.buckets = {6, 10}}), 10);
  EXPECT_THROW(bucket_for(11, {.buckets = {6, 10}}), Error);
  EXPECT_THROW(bucket_for(3, {.buckets = {10, 6}}), Error);
  EXPECT_THROW(bucket_for(0), Error);
}

// With a Gpt of block size 48 a batch of 40 went to bucket 64, which the
// model refused naming 64; max_length caps the powers of two instead.
TEST(BucketingTest, MaxLengthIsTheLastPowerOfTwoBucket) {
  EXPECT_EQ(bucket_for(40, {.max_length = 48}), 48);
  EXPECT_EQ(bucket_for(48, {.max_length = 48}), 48);
  EXPECT_EQ(bucket_for(20, {.max_length = 48}), 32);
  EXPECT_EQ(bucket_for(3, {.max_length = 48}), 4);
  EXPECT_EQ(bucket_for(3, {.max_length = 3}), 3);
  testing::expect_error([] { bucket_for(49, {.max_length = 48}); }, absl::StatusCode::kInvalidArgument,
                        {"length 49 is above max_length 48"});
  testing::expect_error([] { bucket_for(4, {.buckets = {8}, .max_length = 8}); }, absl::StatusCode::kInvalidArgument,
                        {"max_length 8 caps the powers of two"});
  testing::expect_error([] { bucket_for(4, {.max_length = -1}); }, absl::StatusCode::kInvalidArgument,
                        {"max_length -1"});
  const Padded p = pad_to_bucket(zeros({2, 40}, kInt64), zeros({2, 40}, kInt64), {.max_length = 48});
  EXPECT_EQ(p.bucket, 48);
  EXPECT_EQ(p.ids.shape(), (Shape{2, 48}));
}

TEST(BucketingTest, PadsIdsAndTargets) {
  const Tensor ids = from_vector<int64_t>({1, 2, 3, 4, 5, 6}, {2, 3});
  const Padded p = pad_to_bucket(ids, ids, {.pad_id = 9});
  EXPECT_EQ(p.length, 3);
  EXPECT_EQ(p.bucket, 4);
  EXPECT_EQ(p.ids.to_vector<int64_t>(), (std::vector<int64_t>{1, 2, 3, 9, 4, 5, 6, 9}));
  EXPECT_EQ(p.targets.to_vector<int64_t>(), (std::vector<int64_t>{1, 2, 3, -100, 4, 5, 6, -100}));
  EXPECT_THROW(pad_to_bucket(ids, ids.reshape({6})), Error);
}

// Bool ids and targets passed the "not floating" check and were padded with
// pad_id and ignore_index cast to bool. Only i32 and i64 are ids.
TEST(BucketingTest, RefusesIdsThatAreNotI32OrI64) {
  const Tensor ids = from_vector<int64_t>({1, 2, 3, 4, 5, 6}, {2, 3});
  const Tensor flags = zeros({2, 3}, kBool), floats = zeros({2, 3});
  for (auto [a, b] : {std::pair{flags, flags}, std::pair{ids, flags}, std::pair{floats, ids}}) {
    testing::expect_error([&] { (void)pad_to_bucket(a, b); }, absl::StatusCode::kInvalidArgument,
                          {"pad_to_bucket", std::string(dtype_name(a.dtype())), std::string(dtype_name(b.dtype())), "i32 or i64"});
  }
  EXPECT_EQ(pad_to_bucket(ids.to(kInt32), ids).bucket, 4);
}

TEST(BucketingTest, PadsSequencesOfVaryingLengthIntoANextTokenBatch) {
  const Padded p = pad_sequences({{5, 1, 7}, {2, 9, 9, 4, 3}}, {.pad_id = 0});
  EXPECT_EQ(p.length, 4);
  EXPECT_EQ(p.bucket, 4);
  EXPECT_EQ(p.ids.shape(), (Shape{2, 4}));
  EXPECT_EQ(p.ids.to_vector<int64_t>(), (std::vector<int64_t>{5, 1, 0, 0, 2, 9, 9, 4}));
  EXPECT_EQ(p.targets.to_vector<int64_t>(), (std::vector<int64_t>{1, 7, -100, -100, 9, 9, 4, 3}));
  const Padded q = pad_sequences({{1, 2, 3, 4, 5, 6}}, {.buckets = {3, 8}});
  EXPECT_EQ(q.bucket, 8);
  EXPECT_EQ(q.length, 5);
  EXPECT_THROW(pad_sequences({}), Error);
  EXPECT_THROW(pad_sequences({{1, 2}, {3}}), Error);
  EXPECT_THROW(pad_sequences({{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}}, {.buckets = {4, 8}}), Error);
}

struct GptRun {
  std::unique_ptr<Gpt> gpt;
  // SGD: Adam would turn the rounding noise of near-zero gradients into
  // whole learning-rate steps, so padded and unpadded runs could only be
  // compared bit for bit, which the GEMM sizes do not allow.
  std::unique_ptr<optim::SGD> opt;
  GptRun() {
    manual_seed(4);
    gpt = std::make_unique<Gpt>(GptConfig{.vocab_size = 11, .block_size = 8, .n_layer = 1, .n_head = 2,
                                          .n_embd = 16});
    opt = std::make_unique<optim::SGD>(gpt->parameters(), optim::SgdOptions{.lr = 0.1});
  }
  std::vector<Tensor> step(const std::vector<Tensor>& in) {
    opt->zero_grad();
    Tensor loss = gpt->loss(in[0], in[1]);
    loss.backward();
    opt->step();
    return {loss};
  }
};

// Batch i: 2 sequences of length 3, 5, 6 or 8.
std::pair<Tensor, Tensor> batch(int i) {
  const int64_t lengths[] = {3, 5, 6, 8};
  const int64_t T = lengths[(i * 7 + 1) % 4];
  std::vector<int64_t> ids(2 * T), next(2 * T);
  for (int64_t j = 0; j < 2 * T; ++j) {
    ids[j] = (i * 5 + j * 3) % 11;
    next[j] = (i * 5 + j * 3 + 1) % 11;
  }
  return {from_vector<int64_t>(ids, {2, T}), from_vector<int64_t>(next, {2, T})};
}

TEST(BucketingTest, PaddedGraphedTrainingEqualsPaddedEagerAndUnpaddedEagerTraining) {
  GptRun graphed, padded, unpadded;
  GraphedStep train([&](const std::vector<Tensor>& in) { return graphed.step(in); });
  for (int i = 0; i < 24; ++i) {
    const auto [ids, targets] = batch(i);
    const Padded p = pad_to_bucket(ids, targets);
    const float want = unpadded.step({ids, targets})[0].item<float>();
    const float eager = padded.step({p.ids, p.targets})[0].item<float>();
    const float got = train({p.ids, p.targets})[0].item<float>();
    EXPECT_EQ(std::memcmp(&got, &eager, sizeof got), 0) << "call " << i << ": " << got << " vs " << eager;
    EXPECT_NEAR(got, want, 1e-5 * std::abs(want)) << "call " << i;
  }
  EXPECT_EQ(train.stats().graphs, 2);   // lengths 3 -> 4, 5, 6, 8 -> 8
  const std::vector<Tensor> a = graphed.gpt->parameters(), b = padded.gpt->parameters(),
                            c = unpadded.gpt->parameters();
  for (size_t i = 0; i < a.size(); ++i) {
    const std::vector<float> va = a[i].to_vector<float>(), vb = b[i].to_vector<float>(), vc = c[i].to_vector<float>();
    ASSERT_EQ(std::memcmp(va.data(), vb.data(), va.size() * sizeof(float)), 0) << "parameter " << i;
    for (size_t j = 0; j < va.size(); ++j) ASSERT_NEAR(va[j], vc[j], 1e-5) << "parameter " << i << " [" << j << "]";
  }
}

}  // namespace
}  // namespace encore::nn
