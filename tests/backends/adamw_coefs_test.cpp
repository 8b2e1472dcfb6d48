// AdamW's per-step constants (src/backends/adamw_coefs.h), which the CPU and
// CUDA backends both derive from this one source: the square-and-multiply
// power against libm, and the constants against the formula in double.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>

#include "src/backends/adamw_coefs.h"

namespace encore::backend {
namespace {

TEST(AdamWCoefsTest, IntegerPowerIsExactWhereExactAndWithinAFewUlpsOfLibm) {
  EXPECT_EQ(integer_power(0.5, 0), 1.0);
  EXPECT_EQ(integer_power(0.5, 1), 0.5);
  EXPECT_EQ(integer_power(0.5, 60), std::ldexp(1.0, -60));   // powers of two are exact
  EXPECT_EQ(integer_power(3.0, 20), 3486784401.0);            // exact integers stay exact
  for (double base : {0.9, 0.95, 0.999, 0.9999}) {
    for (int64_t n : {int64_t{2}, int64_t{7}, int64_t{100}, int64_t{12345}, int64_t{1000000}}) {
      SCOPED_TRACE(::testing::Message() << base << "^" << n);
      const double want = std::pow(base, static_cast<double>(n));
      EXPECT_NEAR(integer_power(base, n), want, want * static_cast<double>(n + 1) * 0x1p-53);   // about n ulps
    }
  }
}

TEST(AdamWCoefsTest, ConstantsFollowTheFormula) {
  const double lr = 3e-3;
  const float beta1 = 0.9f, beta2 = 0.999f, eps = 1e-8f, wd = 0.1f;
  for (int64_t t : {int64_t{1}, int64_t{2}, int64_t{10}, int64_t{1000}, int64_t{100000}}) {
    SCOPED_TRACE(t);
    const AdamWCoefs c = adamw_coefs(lr, t, beta1, beta2, eps, wd);
    const double bias1 = 1.0 - std::pow(static_cast<double>(beta1), static_cast<double>(t));
    const double bias2 = 1.0 - std::pow(static_cast<double>(beta2), static_cast<double>(t));
    EXPECT_FLOAT_EQ(c.decay, static_cast<float>(1.0 - lr * wd));
    EXPECT_FLOAT_EQ(c.step_size, static_cast<float>(lr / bias1));
    EXPECT_FLOAT_EQ(c.inv_sqrt_bias2, static_cast<float>(1.0 / std::sqrt(bias2)));
    EXPECT_EQ(c.b1, beta1);
    EXPECT_EQ(c.c1, 1.0f - beta1);
    EXPECT_EQ(c.b2, beta2);
    EXPECT_EQ(c.c2, 1.0f - beta2);
    EXPECT_EQ(c.eps, eps);
  }
  // The first step's correction undoes the zero start exactly: lr / (1 - beta1).
  EXPECT_EQ(adamw_coefs(lr, 1, 0.5f, 0.5f, eps, 0.f).step_size, static_cast<float>(lr / 0.5));
}

}  // namespace
}  // namespace encore::backend
