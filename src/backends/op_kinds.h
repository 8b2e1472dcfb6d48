// The kinds of op the backends share: enums and small helpers that the CPU and
// CUDA kernels of one family both switch on. No Abseil, no tensor types: .cu
// files include it.
//
//   cpu::binary(BinaryOp::kAdd, out, a, b);   // same enum for cuda::binary
#pragma once

#include <cstdint>

namespace encore::backend {

enum class BinaryOp { kAdd, kSub, kMul, kDiv };

enum class ScalarOp { kAdd, kMul, kRsub, kRdiv, kDiv };   // kRdiv: s / a; kDiv: a / s

// Elementwise comparisons (a op b), returning bool.
enum class CompareOp { kEq, kNe, kLt, kLe, kGt, kGe };
inline constexpr const char* kCompareNames[] = {"eq", "ne", "lt", "le", "gt", "ge"};
inline constexpr const char* kCompareScalarNames[] = {"eq_scalar", "ne_scalar", "lt_scalar",
                                                      "le_scalar", "gt_scalar", "ge_scalar"};

// What the binary_cross_entropy_with_logits kernel writes (loss_math.h).
enum class BceMode : int32_t { kLoss, kGradInput, kGradTarget };

// Float ops unless noted. p0/p1 are the op's scalars where it has any.
enum class UnaryOp {
  kExp,       // backward reads y:  g * y
  kLog,       // backward reads x:  g / x
  kSqrt,      // backward reads y:  g * 0.5 / y
  kRsqrt,     // backward reads y:  g * -0.5 * y^3
  kPow,       // x^p0; backward reads x: g * p0 * x^(p0-1) (0 when p0 == 0)
  kAbs,       // also i32/i64 (wraps at the minimum, like two's complement); backward reads x: g * sign(x)
  kTanh,      // backward reads y:  g * (1 - y^2)
  kSigmoid,   // backward reads y:  g * y * (1 - y)
  kRelu,      // also i32/i64; backward reads y: g * (y > 0)
  kGeluTanh,  // 0.5x(1 + tanh(sqrt(2/pi)(x + 0.044715x^3))); backward reads x
  kGeluErf,   // 0.5x(1 + erf(x/sqrt(2))); backward reads x
  kSilu,      // x * sigmoid(x); backward reads x
  kClamp,     // min(max(x, p0), p1), also i32/i64; backward reads x: g * (p0 <= x <= p1)
};

// True when the backward of op reads the forward output (else the input).
constexpr bool unary_saves_output(UnaryOp op) {
  return op == UnaryOp::kExp || op == UnaryOp::kSqrt || op == UnaryOp::kRsqrt || op == UnaryOp::kTanh ||
         op == UnaryOp::kSigmoid || op == UnaryOp::kRelu;
}

// Op names of the unary kernels (launch records, messages), by UnaryOp.
inline constexpr int kUnaryOpCount = static_cast<int>(UnaryOp::kClamp) + 1;
inline constexpr const char* kUnaryNames[kUnaryOpCount] = {
    "exp", "log", "sqrt", "rsqrt", "pow", "abs", "tanh", "sigmoid", "relu", "gelu_tanh", "gelu", "silu", "clamp"};
inline constexpr const char* kUnaryBackwardNames[kUnaryOpCount] = {
    "exp_backward",  "log_backward",  "sqrt_backward",      "rsqrt_backward", "pow_backward",
    "abs_backward",  "tanh_backward", "sigmoid_backward",   "relu_backward",  "gelu_tanh_backward",
    "gelu_backward", "silu_backward", "clamp_backward"};

// The unary ops that also take i32/i64 inputs.
constexpr bool unary_supports_integers(UnaryOp op) {
  return op == UnaryOp::kAbs || op == UnaryOp::kRelu || op == UnaryOp::kClamp;
}

enum class RandomKind { kUniform, kNormal };

// The set of reduced dims: bit d set means input dim d is reduced.
using DimMask = uint32_t;

constexpr DimMask dim_bit(int64_t d) { return DimMask{1} << d; }

}  // namespace encore::backend
