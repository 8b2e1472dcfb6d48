#include "encore/dtype.h"

namespace encore {

std::string_view dtype_name(DType t) {
  switch (t) {
    case DType::kFloat32: return "f32";
    case DType::kFloat16: return "f16";
    case DType::kBFloat16: return "bf16";
    case DType::kInt32: return "i32";
    case DType::kInt64: return "i64";
    case DType::kBool: return "bool";
  }
  return "?";
}

namespace detail {

float half_to_float(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t mant = h & 0x3ffu;
  if (exp == 0x1f) return bits_float(sign | 0x7f800000u | (mant << 13));  // inf / NaN
  if (exp != 0) return bits_float(sign | ((exp + 112) << 23) | (mant << 13));
  if (mant == 0) return bits_float(sign);                                  // +-0
  // Subnormal half: value = mant * 2^-24.
  float f = static_cast<float>(mant) * 5.9604644775390625e-8f;
  return sign ? -f : f;
}

uint16_t float_to_half(float f) {
  const uint32_t u = float_bits(f);
  const uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000u);
  const uint32_t abs = u & 0x7fffffffu;
  if (abs > 0x7f800000u) return sign | 0x7e00u;                 // NaN
  if (abs >= 0x477ff000u) return sign | 0x7c00u;                // rounds to >= 65520: inf
  if (abs < 0x38800000u) {                                      // below 2^-14: subnormal half
    // Scale so that the half's unit (2^-24) is 1, then round to nearest even.
    const float scaled = bits_float(abs) * 16777216.0f;         // exact: power-of-two scale
    const uint32_t m = static_cast<uint32_t>(scaled);
    const float rem = scaled - static_cast<float>(m);
    uint32_t r = m + ((rem > 0.5f || (rem == 0.5f && (m & 1u))) ? 1u : 0u);
    return sign | static_cast<uint16_t>(r);
  }
  // Normal: rebias the exponent, round the 13 dropped mantissa bits to nearest even.
  uint32_t v = abs - 0x38000000u;
  v += 0xfffu + ((v >> 13) & 1u);
  return sign | static_cast<uint16_t>(v >> 13);
}

}  // namespace detail
}  // namespace encore
