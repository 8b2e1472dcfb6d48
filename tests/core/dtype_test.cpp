// DType metadata and the Half / BFloat16 storage conversions, checked against
// an independent rounding reference written in double arithmetic.
#include <gtest/gtest.h>

#include <cfenv>
#include <cmath>
#include <cstring>
#include <limits>

#include "encore/dtype.h"

namespace encore {
namespace {

float from_bits(uint32_t u) { float f; std::memcpy(&f, &u, 4); return f; }
uint32_t to_bits(float f) { uint32_t u; std::memcpy(&u, &f, 4); return u; }
Half half_bits(uint16_t b) { Half h; h.bits = b; return h; }
BFloat16 bf16_bits(uint16_t b) { BFloat16 h; h.bits = b; return h; }

// Rounds x to the nearest value with `mant_bits` stored mantissa bits and
// exponents down to min_exp (subnormals below), ties to even; values beyond
// `max_finite` after rounding become inf. Powers of two scale exactly in
// double, and nearbyint rounds ties to even in the default rounding mode.
double round_reference(double x, int mant_bits, int min_exp, double max_finite) {
  if (std::isnan(x)) return x;
  if (std::isinf(x)) return x;
  const double ax = std::fabs(x);
  int e = 0;
  std::frexp(ax, &e);                                   // ax = m * 2^e, m in [0.5, 1)
  const int lead = ax == 0 ? min_exp : std::max(e - 1, min_exp);
  const double ulp = std::ldexp(1.0, lead - mant_bits);
  double r = std::nearbyint(ax / ulp) * ulp;
  if (r > max_finite) r = std::numeric_limits<double>::infinity();
  return std::copysign(r, x);
}
double half_reference(double x) { return round_reference(x, 10, -14, 65504.0); }
double bf16_reference(double x) {
  return round_reference(x, 7, -126, std::ldexp(2.0 - std::ldexp(1.0, -7), 127));
}

TEST(DTypeTest, SizesNamesAndKinds) {
  struct Case { DType t; int64_t size; const char* name; bool floating; };
  const Case cases[] = {{kFloat32, 4, "f32", true}, {kFloat16, 2, "f16", true}, {kBFloat16, 2, "bf16", true},
                        {kInt32, 4, "i32", false},  {kInt64, 8, "i64", false},  {kBool, 1, "bool", false}};
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    EXPECT_EQ(dtype_size(c.t), c.size);
    EXPECT_EQ(dtype_name(c.t), c.name);
    EXPECT_EQ(is_floating(c.t), c.floating);
  }
  static_assert(dtype_size(kInt64) == 8, "dtype_size is constexpr");
  EXPECT_EQ(dtype_of<float>, kFloat32);
  EXPECT_EQ(dtype_of<Half>, kFloat16);
  EXPECT_EQ(dtype_of<BFloat16>, kBFloat16);
  EXPECT_EQ(dtype_of<int32_t>, kInt32);
  EXPECT_EQ(dtype_of<int64_t>, kInt64);
  EXPECT_EQ(dtype_of<bool>, kBool);
  EXPECT_EQ(sizeof(Half), 2u);
  EXPECT_EQ(sizeof(BFloat16), 2u);
}

TEST(DTypeTest, HalfDecodesEveryBitPatternAndRoundTripsIt) {
  for (uint32_t b = 0; b < 0x10000; ++b) {
    const uint16_t bits = static_cast<uint16_t>(b);
    const float f = half_bits(bits);
    const uint32_t exp = (b >> 10) & 0x1f, mant = b & 0x3ff;
    const double sign = (b & 0x8000) ? -1.0 : 1.0;
    if (exp == 0x1f && mant != 0) {
      ASSERT_TRUE(std::isnan(f)) << std::hex << b;
      ASSERT_TRUE(std::isnan(static_cast<float>(Half(f)))) << "NaN stays NaN: " << std::hex << b;
      continue;
    }
    double expected;
    if (exp == 0x1f) expected = sign * std::numeric_limits<double>::infinity();
    else if (exp == 0) expected = sign * std::ldexp(static_cast<double>(mant), -24);
    else expected = sign * std::ldexp(1.0 + mant / 1024.0, static_cast<int>(exp) - 15);
    ASSERT_EQ(static_cast<double>(f), expected) << std::hex << b;
    ASSERT_EQ(std::signbit(f), (b & 0x8000) != 0) << std::hex << b;
    ASSERT_EQ(Half(f).bits, bits) << "round trip of " << std::hex << b;
  }
}

TEST(DTypeTest, BFloat16DecodesEveryBitPatternAndRoundTripsIt) {
  for (uint32_t b = 0; b < 0x10000; ++b) {
    const uint16_t bits = static_cast<uint16_t>(b);
    const float f = bf16_bits(bits);
    ASSERT_EQ(to_bits(f), b << 16) << std::hex << b;   // bf16 is the top half of a float
    if (std::isnan(f)) {
      ASSERT_TRUE(std::isnan(static_cast<float>(BFloat16(f)))) << std::hex << b;
      continue;
    }
    ASSERT_EQ(BFloat16(f).bits, bits) << "round trip of " << std::hex << b;
  }
}

TEST(DTypeTest, HalfRoundsToNearestEvenAtTies) {
  // 1 + 2^-11 is halfway between 1 (mantissa 0, even) and 1 + 2^-10 (odd).
  EXPECT_EQ(Half(from_bits(0x3f801000u)).bits, 0x3c00);
  EXPECT_EQ(Half(from_bits(0x3f801001u)).bits, 0x3c01);   // just above the tie
  EXPECT_EQ(Half(from_bits(0x3f800fffu)).bits, 0x3c00);   // just below
  // 1 + 3 * 2^-11 is halfway between 1 + 2^-10 (odd) and 1 + 2^-9 (even).
  EXPECT_EQ(Half(from_bits(0x3f803000u)).bits, 0x3c02);
  EXPECT_EQ(Half(-from_bits(0x3f803000u)).bits, 0xbc02);
  // A tie whose rounding carries into the exponent: 2 - 2^-11 -> 2.
  EXPECT_EQ(Half(from_bits(0x3ffff000u)).bits, 0x4000);
  // 65520 is halfway between 65504 (max half, odd mantissa 0x3ff) and 65536
  // (even, out of range): the tie rounds to even, so it overflows to inf.
  EXPECT_EQ(Half(65512.0f).bits, 0x7bff);   // below the tie
  EXPECT_EQ(Half(65519.0f).bits, 0x7bff);
  EXPECT_EQ(Half(65520.0f).bits, 0x7c00);
}

TEST(DTypeTest, HalfOverflowInfinityAndNaN) {
  EXPECT_EQ(Half(65504.0f).bits, 0x7bff);
  EXPECT_EQ(Half(1e6f).bits, 0x7c00);
  EXPECT_EQ(Half(-1e6f).bits, 0xfc00);
  EXPECT_EQ(Half(std::numeric_limits<float>::max()).bits, 0x7c00);
  EXPECT_EQ(Half(std::numeric_limits<float>::infinity()).bits, 0x7c00);
  EXPECT_EQ(Half(-std::numeric_limits<float>::infinity()).bits, 0xfc00);
  EXPECT_TRUE(std::isinf(static_cast<float>(half_bits(0x7c00))));
  for (uint32_t nan : {0x7fc00000u, 0x7f800001u, 0xffc00000u, 0x7fffffffu, 0x7f802000u}) {
    SCOPED_TRACE(::testing::Message() << std::hex << nan);
    const Half h(from_bits(nan));
    EXPECT_EQ(h.bits & 0x7c00, 0x7c00);
    EXPECT_NE(h.bits & 0x03ff, 0) << "a NaN must not turn into inf";
    EXPECT_TRUE(std::isnan(static_cast<float>(h)));
  }
}

TEST(DTypeTest, HalfSubnormalsAndZeros) {
  const float min_sub = std::ldexp(1.0f, -24);
  EXPECT_EQ(Half(min_sub).bits, 0x0001);
  EXPECT_EQ(static_cast<float>(half_bits(0x0001)), min_sub);
  EXPECT_EQ(Half(-min_sub).bits, 0x8001);
  EXPECT_EQ(Half(std::ldexp(1.0f, -25)).bits, 0x0000);          // tie between 0 and 1 unit: 0 is even
  EXPECT_EQ(Half(std::ldexp(1.5f, -25)).bits, 0x0001);          // above the tie
  EXPECT_EQ(Half(std::ldexp(1.0f, -26)).bits, 0x0000);
  EXPECT_EQ(Half(-std::ldexp(1.0f, -25)).bits, 0x8000);         // rounds to -0
  EXPECT_EQ(Half(std::ldexp(3.0f, -25)).bits, 0x0002);          // 1.5 units: tie to 2 (even)
  EXPECT_EQ(Half(std::ldexp(5.0f, -25)).bits, 0x0002);          // 2.5 units: tie to 2 (even)
  EXPECT_EQ(Half(std::ldexp(1023.5f, -24)).bits, 0x0400);       // tie at the top carries into the smallest normal
  EXPECT_EQ(Half(std::ldexp(1023.25f, -24)).bits, 0x03ff);
  EXPECT_EQ(Half(std::ldexp(1.0f, -14)).bits, 0x0400);          // smallest normal
  EXPECT_EQ(static_cast<float>(half_bits(0x03ff)), std::ldexp(1023.0f, -24));
  EXPECT_EQ(Half(1e-30f).bits, 0x0000);
  EXPECT_EQ(Half(from_bits(0x00000001u)).bits, 0x0000);        // float subnormal
  EXPECT_EQ(Half(0.0f).bits, 0x0000);
  EXPECT_EQ(Half(-0.0f).bits, 0x8000);
  const float nz = half_bits(0x8000);
  EXPECT_EQ(nz, 0.0f);
  EXPECT_TRUE(std::signbit(nz));
}

TEST(DTypeTest, BFloat16RoundsToNearestEvenAtTies) {
  EXPECT_EQ(BFloat16(from_bits(0x3f808000u)).bits, 0x3f80);   // tie, 0x3f80 even
  EXPECT_EQ(BFloat16(from_bits(0x3f808001u)).bits, 0x3f81);
  EXPECT_EQ(BFloat16(from_bits(0x3f807fffu)).bits, 0x3f80);
  EXPECT_EQ(BFloat16(from_bits(0x3f818000u)).bits, 0x3f82);   // tie, 0x3f81 odd: up
  EXPECT_EQ(BFloat16(from_bits(0xbf818000u)).bits, 0xbf82);
  EXPECT_EQ(BFloat16(from_bits(0x3fff8000u)).bits, 0x4000);   // carries into the exponent
  EXPECT_EQ(BFloat16(1.5f).bits, 0x3fc0);
  EXPECT_EQ(static_cast<float>(BFloat16(1.5f)), 1.5f);
}

TEST(DTypeTest, BFloat16OverflowNaNSubnormalsAndZeros) {
  EXPECT_EQ(BFloat16(std::numeric_limits<float>::max()).bits, 0x7f80);   // rounds past the max bf16
  EXPECT_EQ(BFloat16(-std::numeric_limits<float>::max()).bits, 0xff80);
  EXPECT_EQ(BFloat16(from_bits(0x7f7f7fffu)).bits, 0x7f7f);            // below the tie: max bf16
  EXPECT_EQ(BFloat16(std::numeric_limits<float>::infinity()).bits, 0x7f80);
  for (uint32_t nan : {0x7fc00000u, 0x7f800001u, 0xff800001u, 0x7fffffffu, 0x7f80ffffu}) {
    SCOPED_TRACE(::testing::Message() << std::hex << nan);
    const BFloat16 h(from_bits(nan));
    EXPECT_TRUE(std::isnan(static_cast<float>(h))) << "bits " << std::hex << h.bits;
    EXPECT_EQ(h.bits & 0x8000, nan & 0x80000000u ? 0x8000 : 0) << "sign kept";
  }
  EXPECT_EQ(BFloat16(from_bits(0x00010000u)).bits, 0x0001);   // smallest bf16 subnormal
  EXPECT_EQ(BFloat16(from_bits(0x00008000u)).bits, 0x0000);   // tie to 0 (even)
  EXPECT_EQ(BFloat16(from_bits(0x00018000u)).bits, 0x0002);   // tie to 2 (even)
  EXPECT_EQ(BFloat16(from_bits(0x007f8000u)).bits, 0x0080);   // top subnormal tie -> smallest normal
  EXPECT_EQ(BFloat16(0.0f).bits, 0x0000);
  EXPECT_EQ(BFloat16(-0.0f).bits, 0x8000);
  EXPECT_TRUE(std::signbit(static_cast<float>(bf16_bits(0x8000))));
}

// Every ~8000th float (both signs, across all exponents) plus the four
// neighbours of each tie point, against the double-precision reference.
template <typename T>
void sweep_against_reference(double (*reference)(double), int dropped_bits) {
  ASSERT_EQ(std::fegetround(), FE_TONEAREST);
  int64_t checked = 0;
  auto check = [&](uint32_t u) {
    const float f = from_bits(u);
    if (std::isnan(f)) return;
    const double expected = reference(f);
    const float got = T(f);
    ASSERT_EQ(static_cast<double>(got), expected) << "input bits " << std::hex << u;
    ASSERT_EQ(std::signbit(got), std::signbit(expected)) << "input bits " << std::hex << u;
    ++checked;
  };
  const uint32_t half_unit = 1u << (dropped_bits - 1);
  for (uint32_t u = 0; u < 0x7f800000u; u += 7919) {
    for (uint32_t sign : {0u, 0x80000000u}) {
      check(sign | u);
      const uint32_t tie = (u & ~((half_unit << 1) - 1)) | half_unit;   // a tie in the dropped bits
      for (uint32_t v : {tie - 1, tie, tie + 1}) check(sign | v);
    }
  }
  EXPECT_GT(checked, 1000000);
}

TEST(DTypeTest, HalfMatchesRoundingReference) { sweep_against_reference<Half>(half_reference, 13); }
TEST(DTypeTest, BFloat16MatchesRoundingReference) { sweep_against_reference<BFloat16>(bf16_reference, 16); }

#if defined(__FLT16_MAX__)
// The compiler's own _Float16 conversion (IEEE round to nearest even) as a
// second reference, on the same sweep.
TEST(DTypeTest, HalfMatchesCompilerFloat16) {
  for (uint32_t u = 0; u < 0x80000000u; u += 3001) {
    const float f = from_bits(u);
    if (std::isnan(f)) continue;
    const _Float16 h = static_cast<_Float16>(f);
    uint16_t bits;
    std::memcpy(&bits, &h, 2);
    ASSERT_EQ(Half(f).bits, bits) << "input bits " << std::hex << u;
    ASSERT_EQ(Half(-f).bits, bits | 0x8000) << "input bits " << std::hex << u;
  }
}
#endif

}  // namespace
}  // namespace encore
