// make_layout and group_reduce_dims (src/backends/tensor_layout.h) on empty
// tensors whose strides do not fit in bytes: [0, 2^63 - 1] has a row stride
// of 2^63 - 1 elements, which overflowed when multiplied by the element size
// (UBSan, found by fuzz/ops_fuzz), and on empty views with huge strides. An
// empty tensor reads and writes nothing, so its layout is one dim of size 0,
// and every op on it gives an empty result. Under ./run sanitize an
// overflow left anywhere would also be reported.
#include <gtest/gtest.h>

#include <cstdint>
#include <limits>

#include "encore/encore.h"
#include "src/backends/kernel_table.h"
#include "src/backends/tensor_layout.h"

namespace encore {
namespace {

constexpr int64_t kMax64 = std::numeric_limits<int64_t>::max();
constexpr int64_t k30 = int64_t{1} << 30, k32 = int64_t{1} << 32, k61 = int64_t{1} << 61, k62 = int64_t{1} << 62;

TEST(TensorLayoutTest, AnEmptyOutputHasOneDimOfSizeZero) {
  const Tensor out = zeros({0, kMax64});
  ASSERT_EQ(out.strides(), Shape({kMax64, 1}));
  const Tensor in = zeros({1});
  const backend::Layout<2> l = backend::make_layout<2>(out, {&in});
  EXPECT_EQ(l.numel, 0);
  EXPECT_EQ(l.ndim, 1);
  EXPECT_EQ(l.shape[0], 0);
}

TEST(TensorLayoutTest, ReductionGroupsOfAnEmptyTensorDoNotOverflow) {
  // [0, 2, 2^30] with strides [2^62 + 2^30, 2^62, 1] (a slice with step
  // 2^32 of an empty tensor): merging dims 0 and 1 would compare stride
  // 2^62 + 2^30 with 2 * 2^62 = 2^63.
  const Tensor t = zeros({0, k32 + 1, k30}).slice(1, 0, k32 + 1, k32);
  ASSERT_EQ(t.strides(), Shape({k62 + k30, k62, 1}));
  backend::ReduceGeom g{};
  backend::group_reduce_dims("sum", t, backend::dim_bit(2), g);
  EXPECT_EQ(g.out_numel, 0);
  EXPECT_EQ(g.red_numel, k30);
  EXPECT_EQ(g.kept_ndim, 2);   // not merged
  EXPECT_EQ(sum(t, {2}).shape(), Shape({0, 2}));
}

// The same shapes through the ops: every result is empty and of the right shape.
TEST(TensorLayoutTest, OpsOnEmptyTensorsWithHugeDimsGiveEmptyResults) {
  Tensor wide = zeros({0, kMax64});
  wide.fill_(1.5);
  wide.copy_(ones({1}));
  wide.add_(ones({1}), 2.0);
  EXPECT_EQ(add(wide, ones({1})).shape(), Shape({0, kMax64}));
  EXPECT_EQ(mul(wide, 3.0).shape(), Shape({0, kMax64}));
  EXPECT_EQ(where(zeros({0, kMax64}, kBool), wide, wide).shape(), Shape({0, kMax64}));
  EXPECT_EQ(sum(wide, {1}).shape(), Shape({0}));
  EXPECT_EQ(exp(wide.t()).shape(), Shape({kMax64, 0}));
  const Tensor tall = zeros({k61, 0, 2});
  EXPECT_EQ(sum(tall, {0, 2}).shape(), Shape({0}));
  EXPECT_EQ(mean(tall, {0, 2}).shape(), Shape({0}));
  const Tensor p = zeros({0, k32 + 1, k30}).slice(1, 0, k32 + 1, k32);   // strides [2^62 + 2^30, 2^62, 1]
  EXPECT_EQ(sum(p, {2}).shape(), Shape({0, 2}));
  EXPECT_EQ(max(p, 2, false).first.shape(), Shape({0, 2}));
}

}  // namespace
}  // namespace encore
