#include "src/core/kernel_args.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "encore/error.h"

namespace encore {
namespace {

uint64_t raw_bits(const ArgField& f, const void* args) {
  uint64_t u = 0;
  std::memcpy(&u, static_cast<const char*>(args) + f.offset, f.size);   // little-endian: the low bytes
  return u;
}

int64_t sign_extend(uint64_t u, int bytes) {
  const int shift = 64 - 8 * bytes;
  return static_cast<int64_t>(u << shift) >> shift;
}

std::string float_string(double x) { return absl::StrFormat("%.9g", x); }

}  // namespace

std::string arg_value_string(const ArgField& f, const void* args) {
  const uint64_t u = raw_bits(f, args);
  switch (f.kind) {
    case ArgKind::kPointer:
      return u == 0 ? "null" : "pointer";
    case ArgKind::kBool:
      return u != 0 ? "true" : "false";
    case ArgKind::kFloat:
      if (f.size == 4) return float_string(detail::bits_float(static_cast<uint32_t>(u)));
      double d;
      std::memcpy(&d, &u, sizeof d);
      return float_string(d);
    case ArgKind::kBits: {
      const std::string dtype(dtype_name(f.bits_dtype));
      switch (f.bits_dtype) {
        case kFloat32: return absl::StrCat(dtype, " ", float_string(detail::bits_float(static_cast<uint32_t>(u))));
        case kFloat16: return absl::StrCat(dtype, " ", float_string(detail::half_to_float(static_cast<uint16_t>(u))));
        case kBFloat16:
          return absl::StrCat(dtype, " ", float_string(detail::bits_float(static_cast<uint32_t>(u & 0xffff) << 16)));
        case kInt32: return absl::StrCat(dtype, " ", sign_extend(u, 4));
        case kInt64: return absl::StrCat(dtype, " ", static_cast<int64_t>(u));
        case kBool: return absl::StrCat(dtype, " ", (u & 0xff) != 0 ? "true" : "false");
      }
      return absl::StrCat(dtype, " bits 0x", absl::Hex(u));
    }
    case ArgKind::kInteger:
    case ArgKind::kEnum:
      return f.is_signed ? absl::StrCat(sign_extend(u, f.size)) : absl::StrCat(u);
  }
  return "?";
}

namespace kernel_args_internal {
void incomplete_fields(const char* type, const std::string& why) {
  throw_error(absl::StatusCode::kInternal,
              absl::StrCat("kernel arguments ", type, ": fields() is incomplete (", why,
                           "); NOTE [ Complete argument fields ] in src/core/kernel_args.h"));
}
}  // namespace kernel_args_internal

}  // namespace encore
