// The pooling windows both backends walk (src/backends/cnn_formulas.h), on
// the host: a huge kernel, which pool_geom accepts when at most half of it
// is padding, must cost the taps inside the input, not the kernel's size,
// and its count_include_pad divisor must not wrap.
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "src/backends/cnn_formulas.h"

namespace encore::backend {
namespace {

constexpr int64_t kHuge = int64_t{1} << 40;   // a kernel of 2^80 taps, half of each axis padding

// One [3, 3] plane pooled by a kHuge x kHuge window (stride kHuge, padding
// kHuge / 2): a single output whose window covers the whole plane.
PoolGeom huge_window() {
  PoolGeom g{};
  g.planes = 1, g.h = 3, g.w = 3, g.oh = 1, g.ow = 1;
  g.kh = g.kw = g.stride_h = g.stride_w = kHuge;
  g.pad_h = g.pad_w = kHuge / 2;
  g.dil_h = g.dil_w = 1;
  return g;
}

TEST(TapsInside, ClipsTheWindowToTheInput) {
  EXPECT_EQ(taps_inside(0, 3, 1, 5).r0, 0);
  EXPECT_EQ(taps_inside(0, 3, 1, 5).r1, 3);
  EXPECT_EQ(taps_inside(-2, 3, 1, 5).r0, 2);    // taps at -2, -1 are padding
  EXPECT_EQ(taps_inside(3, 4, 1, 5).r1, 2);     // taps at 5, 6 are past the end
  EXPECT_EQ(taps_inside(-3, 4, 2, 5).r0, 2);    // taps at -3, -1, 1, 3: from the third
  EXPECT_EQ(taps_inside(-3, 4, 2, 5).r1, 4);
  const TapRange none = taps_inside(-10, 3, 2, 5);   // -10, -8, -6: all padding
  EXPECT_EQ(none.r0, none.r1);
  const TapRange huge = taps_inside(-kHuge / 2, kHuge, 1, 3);
  EXPECT_EQ(huge.r0, kHuge / 2);
  EXPECT_EQ(huge.r1, kHuge / 2 + 3);
}

// Before, the window walked 2^40 rows of taps (skipping those outside): a hang.
TEST(MaxPoolWindow, AHugeKernelWalksOnlyTheTapsInside) {
  const std::vector<float> plane = {1, 5, 2, 7, 3, 7, 0, 4, 6};
  int64_t reads = 0;
  const MaxTap m = max_pool_window(huge_window(), 0, 0, [&](int64_t flat) {
    ++reads;
    return plane[flat];
  });
  EXPECT_EQ(m.value, 7.f);
  EXPECT_EQ(m.flat, 3);   // the first of the two 7s
  EXPECT_EQ(reads, 9);
}

// Before, the padded window's 2^80 elements wrapped to a divisor of 0.
TEST(AvgPoolWindow, AHugeKernelsDivisorDoesNotWrap) {
  const PoolWindow win = avg_pool_window(huge_window(), AvgPoolMode::kIncludePad, 0, 0);
  EXPECT_EQ(win.h0, 0);
  EXPECT_EQ(win.h1, 3);
  EXPECT_EQ(win.w0, 0);
  EXPECT_EQ(win.w1, 3);
  EXPECT_EQ(win.divisor, 0x1p80f);
  EXPECT_EQ(avg_pool_window(huge_window(), AvgPoolMode::kExcludePad, 0, 0).divisor, 9.f);
}

}  // namespace
}  // namespace encore::backend
