// The eager ops of encore. Each runs at once on its inputs' device and, when
// an input requires grad (and grad mode is on), records its backward formula.
//
//   using namespace encore;
//   Tensor h = relu(linear(x, w1, b1));                 // [B, H]
//   Tensor loss = cross_entropy(linear(h, w2, b2), y);   // y: i32 or i64 class ids
//   loss.backward();
//
// Conventions:
//  - Elementwise ops broadcast like NumPy: shapes align from the right; a dim
//    of size 1 stretches. Both tensor operands must have the same dtype and
//    device; mismatches throw encore::Error naming the op, shapes and dtypes.
//  - f16/bf16 inputs are computed in f32 and rounded back on store.
//  - `dim` arguments may be negative (counted from the end).
//  - Reductions with an empty `dims` reduce over all dims.
//  - The elementwise ops below also take rvalue tensors (a temporary, or
//    std::move(t)), like std::string's operator+: such an operand is
//    consumed, left undefined, and when nothing else holds its buffer (no
//    other tensor, view, saved tensor or .grad) and the output has its shape
//    and dtype, the output is written into that buffer instead of a fresh
//    one. Same values; one allocation fewer, and writes into lines still in
//    cache. relu(bn(conv(x))) and x + f(x) run so.
#pragma once

#include <cstdint>
#include <optional>
#include <utility>
#include <vector>

#include "encore/random.h"
#include "encore/tensor.h"

namespace encore {

// ---- elementwise, binary (broadcasting) ----
Tensor add(const Tensor& a, const Tensor& b);
Tensor sub(const Tensor& a, const Tensor& b);
Tensor mul(const Tensor& a, const Tensor& b);
Tensor div(const Tensor& a, const Tensor& b);
Tensor add(const Tensor& a, double b);
Tensor mul(const Tensor& a, double b);
Tensor rsub(const Tensor& a, double b);      // b - a
Tensor div(const Tensor& a, double b);       // a / b, rounded once (floats only, as div)
Tensor rdiv(const Tensor& a, double b);      // b / a
// Consuming forms (see Conventions).
Tensor add(Tensor&& a, const Tensor& b);
Tensor add(const Tensor& a, Tensor&& b);
Tensor add(Tensor&& a, Tensor&& b);
Tensor sub(Tensor&& a, const Tensor& b);
Tensor sub(const Tensor& a, Tensor&& b);
Tensor sub(Tensor&& a, Tensor&& b);
Tensor mul(Tensor&& a, const Tensor& b);
Tensor mul(const Tensor& a, Tensor&& b);
Tensor mul(Tensor&& a, Tensor&& b);
Tensor div(Tensor&& a, const Tensor& b);
Tensor div(const Tensor& a, Tensor&& b);
Tensor div(Tensor&& a, Tensor&& b);
Tensor add(Tensor&& a, double b);
Tensor mul(Tensor&& a, double b);
Tensor rsub(Tensor&& a, double b);
Tensor div(Tensor&& a, double b);
Tensor rdiv(Tensor&& a, double b);

inline Tensor operator+(const Tensor& a, const Tensor& b) { return add(a, b); }
inline Tensor operator-(const Tensor& a, const Tensor& b) { return sub(a, b); }
inline Tensor operator*(const Tensor& a, const Tensor& b) { return mul(a, b); }
inline Tensor operator/(const Tensor& a, const Tensor& b) { return div(a, b); }
inline Tensor operator+(Tensor&& a, const Tensor& b) { return add(std::move(a), b); }
inline Tensor operator+(const Tensor& a, Tensor&& b) { return add(a, std::move(b)); }
inline Tensor operator+(Tensor&& a, Tensor&& b) { return add(std::move(a), std::move(b)); }
inline Tensor operator-(Tensor&& a, const Tensor& b) { return sub(std::move(a), b); }
inline Tensor operator-(const Tensor& a, Tensor&& b) { return sub(a, std::move(b)); }
inline Tensor operator-(Tensor&& a, Tensor&& b) { return sub(std::move(a), std::move(b)); }
inline Tensor operator*(Tensor&& a, const Tensor& b) { return mul(std::move(a), b); }
inline Tensor operator*(const Tensor& a, Tensor&& b) { return mul(a, std::move(b)); }
inline Tensor operator*(Tensor&& a, Tensor&& b) { return mul(std::move(a), std::move(b)); }
inline Tensor operator/(Tensor&& a, const Tensor& b) { return div(std::move(a), b); }
inline Tensor operator/(const Tensor& a, Tensor&& b) { return div(a, std::move(b)); }
inline Tensor operator/(Tensor&& a, Tensor&& b) { return div(std::move(a), std::move(b)); }
inline Tensor operator+(const Tensor& a, double b) { return add(a, b); }
inline Tensor operator+(double a, const Tensor& b) { return add(b, a); }
inline Tensor operator-(const Tensor& a, double b) { return add(a, -b); }
inline Tensor operator-(double a, const Tensor& b) { return rsub(b, a); }
inline Tensor operator*(const Tensor& a, double b) { return mul(a, b); }
inline Tensor operator*(double a, const Tensor& b) { return mul(b, a); }
inline Tensor operator/(const Tensor& a, double b) { return div(a, b); }
inline Tensor operator/(double a, const Tensor& b) { return rdiv(b, a); }
inline Tensor operator+(Tensor&& a, double b) { return add(std::move(a), b); }
inline Tensor operator+(double a, Tensor&& b) { return add(std::move(b), a); }
inline Tensor operator-(Tensor&& a, double b) { return add(std::move(a), -b); }
inline Tensor operator-(double a, Tensor&& b) { return rsub(std::move(b), a); }
inline Tensor operator*(Tensor&& a, double b) { return mul(std::move(a), b); }
inline Tensor operator*(double a, Tensor&& b) { return mul(std::move(b), a); }
inline Tensor operator/(Tensor&& a, double b) { return div(std::move(a), b); }
inline Tensor operator/(double a, Tensor&& b) { return rdiv(std::move(b), a); }

// ---- elementwise, unary (float dtypes; neg/abs also integers) ----
Tensor neg(const Tensor& a);
inline Tensor operator-(const Tensor& a) { return neg(a); }
Tensor neg(Tensor&& a);   // consuming (see Conventions)
inline Tensor operator-(Tensor&& a) { return neg(std::move(a)); }
Tensor exp(const Tensor& a);
Tensor log(const Tensor& a);
Tensor sqrt(const Tensor& a);
Tensor rsqrt(const Tensor& a);
Tensor pow(const Tensor& a, double exponent);
Tensor abs(const Tensor& a);
Tensor tanh(const Tensor& a);
Tensor sigmoid(const Tensor& a);
Tensor relu(const Tensor& a);
enum class GeluApprox { kNone, kTanh };      // kNone: exact erf form
// Defaults to the exact form, as torch.nn.functional.gelu (approximate="none");
// GPT-2's tanh form is GeluApprox::kTanh.
Tensor gelu(const Tensor& a, GeluApprox approx = GeluApprox::kNone);
Tensor silu(const Tensor& a);
// min(max(a, min), max); a NaN element stays NaN. Unlike PyTorch, NaN bounds
// and min > max (PyTorch: max everywhere) are refused, and integer tensors
// take whole (or infinite) bounds.
Tensor clamp(const Tensor& a, double min, double max);
// Consuming forms (see Conventions).
Tensor exp(Tensor&& a);
Tensor log(Tensor&& a);
Tensor sqrt(Tensor&& a);
Tensor rsqrt(Tensor&& a);
Tensor pow(Tensor&& a, double exponent);
Tensor abs(Tensor&& a);
Tensor tanh(Tensor&& a);
Tensor sigmoid(Tensor&& a);
Tensor relu(Tensor&& a);
Tensor gelu(Tensor&& a, GeluApprox approx = GeluApprox::kNone);
Tensor silu(Tensor&& a);
Tensor clamp(Tensor&& a, double min, double max);

// ---- comparisons (bool results, no gradient) ----
// a op b elementwise, broadcasting; a and b of one dtype (any, bool
// included), compared in f32 for f16/bf16. The scalar forms convert s to
// a's dtype first (integer tensors: s must be a whole number in range).
// NaN compares unequal to everything: ne is true, the others false.
Tensor eq(const Tensor& a, const Tensor& b);
Tensor ne(const Tensor& a, const Tensor& b);
Tensor lt(const Tensor& a, const Tensor& b);
Tensor le(const Tensor& a, const Tensor& b);
Tensor gt(const Tensor& a, const Tensor& b);
Tensor ge(const Tensor& a, const Tensor& b);
Tensor eq(const Tensor& a, double s);
Tensor ne(const Tensor& a, double s);
Tensor lt(const Tensor& a, double s);
Tensor le(const Tensor& a, double s);
Tensor gt(const Tensor& a, double s);
Tensor ge(const Tensor& a, double s);

// ---- selection ----
// cond (bool) ? a : b, all three broadcast together.
Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b);
// a with value wherever mask (bool, broadcast to a) is true. As in PyTorch, a
// finite value beyond a float dtype's range (1e6 for f16) is refused, not
// stored as inf; integer tensors take whole numbers in range.
Tensor masked_fill(const Tensor& a, const Tensor& mask, double value);

// ---- reductions (dims empty = all dims) ----
Tensor sum(const Tensor& a, std::vector<int64_t> dims = {}, bool keepdim = false);
Tensor mean(const Tensor& a, std::vector<int64_t> dims = {}, bool keepdim = false);
// Variance; correction 1 is the unbiased estimator, 0 the population one.
Tensor var(const Tensor& a, std::vector<int64_t> dims = {}, int64_t correction = 1, bool keepdim = false);
// Max along one dim: {values, indices (i64)}. Ties keep the first index; a
// NaN is the maximum. An empty dim (or empty tensor for max(a)) is an error.
std::pair<Tensor, Tensor> max(const Tensor& a, int64_t dim, bool keepdim = false);
// Over all elements, 0-d. Its gradient goes to the first maximal element
// only, as max(dim)'s does (PyTorch's max() splits it evenly among ties).
Tensor max(const Tensor& a);
Tensor argmax(const Tensor& a, int64_t dim, bool keepdim = false);   // i64
// Sums a to `shape` (the inverse of broadcasting): used by backward formulas.
Tensor sum_to(const Tensor& a, absl::Span<const int64_t> shape);

// ---- linear algebra (OpenBLAS cblas_sgemm on CPU) ----
// [.., n, k] x [.., k, m] -> [.., n, m]; batch dims broadcast; 1-D operands
// are promoted like NumPy's matmul.
Tensor matmul(const Tensor& a, const Tensor& b);
// x [.., in] W [out, in] b [out] -> x W^T + b [.., out]. bias may be undefined.
Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias = Tensor());

// ---- neural-network ops ----
// Over dim: exp(a - max) / sum(exp(a - max)); log_softmax: a - max -
// log(sum(exp(a - max))). A -inf entry gets probability exactly 0
// (log_softmax: -inf) and gradient exactly 0 (log_softmax: the upstream
// gradient itself, as d(a_i - lse)/da_i = 1 - p_i = 1); the other entries
// of its slice are the softmax of the finite ones. A slice that is all
// -inf has no softmax: it gives NaN, forward and backward (as PyTorch),
// never a finite number, and the other slices are unaffected.
Tensor softmax(const Tensor& a, int64_t dim);
Tensor log_softmax(const Tensor& a, int64_t dim);
// logits [N, C] (or [N, C] flattened from [.., C]); target [N] of class ids
// (i32/i64). The class dim is the last one, unlike PyTorch's cross_entropy
// (dim 1 of [N, C, d1, ...]): for that layout use
// nll_loss(log_softmax(x, 1), t). Mean over the targets that are not
// ignore_index; NaN if none (0 / 0, as PyTorch; the gradient is then 0).
// -inf logits as in log_softmax: probability and gradient exactly 0; a
// counted row whose target logit is -inf makes the loss +inf (its gradient
// stays finite); a counted row of all -inf logits makes the loss NaN (and
// that row's gradient); ignored rows count for nothing, whatever they hold.
Tensor cross_entropy(const Tensor& logits, const Tensor& target, int64_t ignore_index = -100);
// Normalises over the trailing dims of shape normalized_shape (at least one
// dim, as PyTorch: [] is refused). weight/bias (that shape) may be undefined.
Tensor layer_norm(const Tensor& x, Shape normalized_shape, const Tensor& weight = Tensor(),
                  const Tensor& bias = Tensor(), double eps = 1e-5);
// weight [V, D], indices (i32/i64) of any shape -> [..., D].
Tensor embedding(const Tensor& weight, const Tensor& indices);
// Zeroes each element with probability p in [0, 1] and scales the rest by
// 1/(1-p); p = 1 gives zeros (and a zero gradient) without drawing.
// The mask comes from gen's Philox stream (seed and offset live in gen's
// state tensor and the offset advances inside the kernel), so a step is
// reproducible from the seed. training=false returns a.
Tensor dropout(const Tensor& a, double p, bool training = true, Generator* gen = nullptr);

// ---- convolutional networks (NCHW; PyTorch's names, defaults and sizes) ----
// Size2 is a (height, width) pair: an int stands for both.
//
//   Tensor y = conv2d(x, w, b, /*stride=*/1, /*padding=*/1);            // x [N, C, H, W], w [K, C, 3, 3]
//   y = max_pool2d(relu(batch_norm(y, rm, rv, gamma, beta, true)), 2);  // [N, K, H/2, W/2]
//   Tensor logits = linear(flatten(adaptive_avg_pool2d(y, 1), 1), w2, b2);
struct Size2 {
  int64_t h, w;
  Size2(int64_t v) : h(v), w(v) {}   // NOLINT: implicit, as PyTorch takes an int for both
  Size2(int64_t h_, int64_t w_) : h(h_), w(w_) {}
};
// input [N, C, H, W], weight [K, C / groups, kH, kW], bias [K] (may be
// undefined) -> [N, K, (H + 2 padding - dilation (kH - 1) - 1) / stride + 1, ...].
// CPU: oneDNN (f16/bf16 computed in f32); CUDA: cuDNN.
Tensor conv2d(const Tensor& input, const Tensor& weight, const Tensor& bias = Tensor(), Size2 stride = 1,
              Size2 padding = 0, Size2 dilation = 1, int64_t groups = 1);
// Max over each window of [.., H, W] (3-D or 4-D input); stride defaults to
// kernel_size; padding at most half the (dilated) kernel; ceil_mode rounds
// the output size up. NaN is the maximum; the gradient goes to the first
// maximum of each window.
Tensor max_pool2d(const Tensor& input, Size2 kernel_size, std::optional<Size2> stride = std::nullopt,
                  Size2 padding = 0, Size2 dilation = 1, bool ceil_mode = false);
// Mean over each window; count_include_pad counts the zero padding in the divisor.
Tensor avg_pool2d(const Tensor& input, Size2 kernel_size, std::optional<Size2> stride = std::nullopt,
                  Size2 padding = 0, bool ceil_mode = false, bool count_include_pad = true);
// Mean over output_size windows covering [.., H, W] (rows floor(i H / oh) to ceil((i + 1) H / oh)).
Tensor adaptive_avg_pool2d(const Tensor& input, Size2 output_size);
// Dims start_dim..end_dim merged into one (a view where the strides allow, as reshape).
Tensor flatten(const Tensor& input, int64_t start_dim = 0, int64_t end_dim = -1);
// Per-channel normalization of input [N, C, ...]. training: by the batch's
// mean and biased variance, and running_mean / running_var (if given) become
// (1 - f) running + f batch, the variance unbiased, in place, f = momentum;
// eval: by the running statistics (then required). weight, bias [C] may be
// undefined; running stats [C], of input's dtype, contiguous, not requiring grad.
// momentum = nullopt (PyTorch's momentum=None: a cumulative average) takes
// f = 1 / num_batches_tracked, a 0-d i64 tensor that already counts this
// batch, read on the device when the kernel runs, so a captured step's
// replays each use the count they reach (f is inf or negative where the count is
// not positive, as in PyTorch); it is required then when training with
// running statistics, and refused with a momentum.
Tensor batch_norm(const Tensor& input, const Tensor& running_mean, const Tensor& running_var,
                  const Tensor& weight = Tensor(), const Tensor& bias = Tensor(), bool training = false,
                  std::optional<double> momentum = 0.1, double eps = 1e-5,
                  const Tensor& num_batches_tracked = Tensor());

// ---- losses (PyTorch's semantics and argument names) ----
enum class Reduction { kMean, kSum, kNone };   // kNone: the elementwise (or per-target) losses
// (input - target)^2; target broadcasts to input's shape; float dtypes.
// Gradients flow to both.
Tensor mse_loss(const Tensor& input, const Tensor& target, Reduction reduction = Reduction::kMean);
// weight * [(1 - t) x + (1 + (pos_weight - 1) t) softplus(-x)] (never
// overflows), x the logits and t the target (input's shape); weight and
// pos_weight (e.g. [C] for the last dim) broadcast to input's shape, may be
// undefined. Gradients to input, target and weight; pos_weight must not
// require grad.
Tensor binary_cross_entropy_with_logits(const Tensor& input, const Tensor& target, const Tensor& weight = Tensor(),
                                        const Tensor& pos_weight = Tensor(),
                                        Reduction reduction = Reduction::kMean);
// input: log-probabilities [C], [N, C] or [N, C, d1, ...]; target: class ids
// (i32/i64) [], [N] or [N, d1, ...]; weight: [C] or undefined (no gradient).
// Each counted target gives -weight[t] * input[.., t, ..]; targets equal to
// ignore_index count 0. kMean divides the sum by the counted weights (NaN
// when every target is ignored, as in PyTorch); kNone has target's shape.
Tensor nll_loss(const Tensor& input, const Tensor& target, const Tensor& weight = Tensor(),
                int64_t ignore_index = -100, Reduction reduction = Reduction::kMean);

// ---- indexing ----
// Index tensors are i32 or i64; an index outside [0, size) throws in eager
// CPU steps (elsewhere the kernels read zeros / skip it: NOTE [ Index checks ]).
// out[i][j] = input[i][index[i][j]] (dim 1; likewise for any dim): out has
// index's shape; index has input's number of dims and no larger size
// outside dim. Gradient: a scatter_add into zeros.
Tensor gather(const Tensor& input, int64_t dim, const Tensor& index);
// The slices index[k] (0-d or 1-d index) of input along dim, in order.
Tensor index_select(const Tensor& input, int64_t dim, const Tensor& index);
// input with out[i][index[i][j]] += src[i][j] (dim 1; likewise any dim),
// over index's extent (src at least index's size in every dim).
// Deterministic on every backend: the adds into one element run in index
// order along dim, with no atomics. Gradients: g to input, gather(g) to src.
Tensor scatter_add(const Tensor& input, int64_t dim, const Tensor& index, const Tensor& src);
// {values, indices (i64)}: the k largest (smallest) elements along dim,
// always in sorted order (sorted=false allows any order, so it is the same),
// ties to the lower index, NaN counted above every number. Gradient to values.
std::pair<Tensor, Tensor> topk(const Tensor& input, int64_t k, int64_t dim = -1, bool largest = true,
                               bool sorted = true);
// num_samples category ids (i64) per row of probs ([C] or [R, C]:
// non-negative weights, not necessarily normalised), drawn on probs' device
// from generator's Philox stream (default: the device's); the offset
// advances on the device, so a captured step draws fresh samples on every
// replay. Without replacement, num_samples <= C distinct ids.
Tensor multinomial(const Tensor& probs, int64_t num_samples, bool replacement = false,
                   Generator* generator = nullptr);

// ---- joining and splitting ----
Tensor concat(const std::vector<Tensor>& tensors, int64_t dim = 0);
Tensor stack(const std::vector<Tensor>& tensors, int64_t dim = 0);
// Pieces of `size` along dim (the last one may be smaller); views of a.
std::vector<Tensor> split(const Tensor& a, int64_t size, int64_t dim = 0);

}  // namespace encore
