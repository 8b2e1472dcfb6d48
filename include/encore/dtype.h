// Element types of encore tensors, and the two 16-bit float storage types.
//
// encore stores f32, f16, bf16, i32, i64 and bool. f16/bf16 are storage
// formats: CPU kernels load them into float, compute, and round back to the
// nearest even on store.
//
//   encore::DType t = encore::kBFloat16;
//   encore::dtype_size(t);            // 2 (bytes per element)
//   encore::dtype_name(t);            // "bf16"
//   encore::BFloat16 h(1.5f); float f = h;   // exact round trip for 1.5
#pragma once

#include <cstdint>
#include <cstring>
#include <string_view>

namespace encore {

enum class DType : uint8_t { kFloat32, kFloat16, kBFloat16, kInt32, kInt64, kBool };

inline constexpr DType kFloat32 = DType::kFloat32;
inline constexpr DType kFloat16 = DType::kFloat16;
inline constexpr DType kBFloat16 = DType::kBFloat16;
inline constexpr DType kInt32 = DType::kInt32;
inline constexpr DType kInt64 = DType::kInt64;
inline constexpr DType kBool = DType::kBool;

// Bytes per element.
constexpr int64_t dtype_size(DType t) {
  switch (t) {
    case DType::kFloat32: return 4;
    case DType::kFloat16: return 2;
    case DType::kBFloat16: return 2;
    case DType::kInt32: return 4;
    case DType::kInt64: return 8;
    case DType::kBool: return 1;
  }
  return 0;
}

constexpr bool is_floating(DType t) {
  return t == DType::kFloat32 || t == DType::kFloat16 || t == DType::kBFloat16;
}

// Short names used in every error message: "f32", "f16", "bf16", "i32", "i64", "bool".
std::string_view dtype_name(DType t);

namespace detail {
inline uint32_t float_bits(float f) { uint32_t u; std::memcpy(&u, &f, 4); return u; }
inline float bits_float(uint32_t u) { float f; std::memcpy(&f, &u, 4); return f; }
float half_to_float(uint16_t h);
uint16_t float_to_half(float f);  // round to nearest even; overflow gives inf
}  // namespace detail

// IEEE 754 binary16 storage. Arithmetic happens in float.
struct Half {
  uint16_t bits = 0;
  Half() = default;
  Half(float f) : bits(detail::float_to_half(f)) {}  // NOLINT: implicit like float
  operator float() const { return detail::half_to_float(bits); }  // NOLINT
};

// bfloat16 storage: the top 16 bits of a float, rounded to nearest even.
struct BFloat16 {
  uint16_t bits = 0;
  BFloat16() = default;
  BFloat16(float f) {  // NOLINT: implicit like float
    uint32_t u = detail::float_bits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) { bits = static_cast<uint16_t>((u >> 16) | 0x40); return; }  // quiet NaN
    u += 0x7fffu + ((u >> 16) & 1u);
    bits = static_cast<uint16_t>(u >> 16);
  }
  operator float() const { return detail::bits_float(static_cast<uint32_t>(bits) << 16); }  // NOLINT
};

// Maps a C++ element type to its DType: dtype_of<float> == kFloat32.
template <typename T> struct DTypeOf;
template <> struct DTypeOf<float> { static constexpr DType value = kFloat32; };
template <> struct DTypeOf<Half> { static constexpr DType value = kFloat16; };
template <> struct DTypeOf<BFloat16> { static constexpr DType value = kBFloat16; };
template <> struct DTypeOf<int32_t> { static constexpr DType value = kInt32; };
template <> struct DTypeOf<int64_t> { static constexpr DType value = kInt64; };
template <> struct DTypeOf<bool> { static constexpr DType value = kBool; };
template <typename T> inline constexpr DType dtype_of = DTypeOf<T>::value;

}  // namespace encore
