// The backend surface the op layer calls: the device-neutral host side of
// every kernel family. Each function checks its arguments, fills the family's
// argument struct (src/backends/kernel_table.h) and launches the kernel of
// the output's device, with the one read/write list the recorder and the
// planner trust. Ops never name a backend.
//
//   backend::binary(BinaryOp::kAdd, out, a, b);     // the CPU or CUDA kernel, by out.device()
//
// Unless a function says otherwise, every tensor lives on one device, inputs
// may have any strides and outputs are allocated by the caller. Errors: the
// functions throw encore::Error naming the op (a dtype the kernel does not
// support, shapes that do not fit); "internal:" messages mean the op layer
// broke a contract. Backends never include autograd or ops.
#pragma once

#include <cstdint>

#include "absl/types/span.h"
#include "encore/tensor.h"
#include "src/backends/kernel_table.h"
#include "src/backends/op_kinds.h"

namespace encore::backend {

extern const KernelTable kCpuKernels;   // cpu/kernel_table.cpp
// The CUDA backend's table (cuda/kernel_table.cpp); throws (Unimplemented)
// when encore was built without CUDA.
const KernelTable& cuda_kernels(Device device);

// The kernel table of `device`'s backend. Throws (Unimplemented) for a CUDA
// device when encore was built without CUDA. Inline: every launch asks.
inline const KernelTable& kernels_for(Device device) {
  if (device.is_cpu()) [[likely]] return kCpuKernels;
  return cuda_kernels(device);
}

// A new dense tensor on `target` holding dense `src`, when exactly one of
// src's device and `target` is the CPU and the other's backend copies to and
// from the host (KernelTable::copy_host_device; on CUDA through pinned
// staging, NOTE [ Staged host-to-device copies ]). `op` names the caller in
// errors (Unimplemented: a device this build has no backend for).
Tensor copy_to_device(const Tensor& src, Device target, const char* op);

// ---- binary (binary.cpp) ----

// out = a + alpha * b (kAdd), a - alpha * b (kSub), a * b, a / b. out has the
// broadcast shape (any strides, may alias a for in-place); all one dtype, not bool.
void binary(BinaryOp op, const Tensor& out, const Tensor& a, const Tensor& b, double alpha = 1.0);
// out = a + s, a * s, s - a, s / a.
void binary_scalar(ScalarOp op, const Tensor& out, const Tensor& a, double s);
// out (bool, the broadcast shape, any strides) = a op b; a and b of one
// dtype (any, bool included), broadcast to out.
void compare(CompareOp op, const Tensor& out, const Tensor& a, const Tensor& b);
// out (bool, a's shape) = a op s, with s converted to a's dtype first (the op
// checks that it fits).
void compare_scalar(CompareOp op, const Tensor& out, const Tensor& a, double s);

// ---- unary (unary.cpp) ----
// Elementwise unary math (exp, log, ..., gelu, clamp) and the fused backward
// of each op: one launch computes grad_in from the output gradient and one
// saved tensor, instead of a chain of elementwise ops.
//
//   backend::unary(UnaryOp::kTanh, y, x);                    // y = tanh(x)
//   backend::unary_backward(UnaryOp::kTanh, dx, dy, y);       // dx = dy * (1 - y^2)
//
// Each op's backward reads either its forward output y or its input x; which
// one is fixed per op by unary_saves_output() (op_kinds.h) so that the op
// layer saves the right tensor.

// out = op(a). out: contiguous, a's shape and dtype; a: any strides. Floats,
// and i32/i64 for abs, relu and clamp. For integer clamp, p0/p1 must be whole
// numbers (or infinite); they are clipped to the dtype's range.
void unary(UnaryOp op, const Tensor& out, const Tensor& a, double p0 = 0.0, double p1 = 0.0);
// grad_in = g * op'(...), using `saved` (y or x, see unary_saves_output).
// grad_in: contiguous; g and saved: its shape and dtype, any strides. Floats only.
void unary_backward(UnaryOp op, const Tensor& grad_in, const Tensor& g, const Tensor& saved, double p0 = 0.0,
                    double p1 = 0.0);

// ---- select (select.cpp) ----
// Elementwise selection. masked_fill with value 0 is also the fused backward
// of both ops (one launch: the gradient with zeros where it does not flow).
//
//   backend::where(out, cond, a, b);                    // out = cond ? a : b
//   backend::masked_fill(out, a, mask, -INFINITY);      // out = mask ? -inf : a
//   backend::masked_fill(ga, g, cond, 0.0, false);      // ga  = cond ? g : 0

// out = cond ? a : b. out: contiguous, the broadcast shape of all three;
// cond: bool; a, b: out's dtype (any); inputs broadcast to out, any strides.
void where(const Tensor& out, const Tensor& cond, const Tensor& a, const Tensor& b);
// out = (mask == fill_when) ? value : a. out: contiguous, of a broadcast shape
// that a and mask (bool) broadcast to; value converted to out's dtype (the op
// checks that it fits; to bool: value != 0).
void masked_fill(const Tensor& out, const Tensor& a, const Tensor& mask, double value, bool fill_when = true);

// ---- copy (copy.cpp) ----
// Kernels that create and move data on one device (host <-> device transfers:
// copy_to_device above).

// Every element of out = value converted to out's dtype (convert.h). out: any strides, any dtype.
void fill(const Tensor& out, double value);
// dst = src converted to dst's dtype (convert.h; the same bits on every
// backend). src broadcast to dst; any strides; any pair of dtypes; one device.
void copy(const Tensor& dst, const Tensor& src);
// out[i] = start + step * i, exact in int64 (every value must fit it), then
// converted (floats: rounded once). out: contiguous, not bool.
void arange(const Tensor& out, int64_t start, int64_t step);
// out = uniform [0, 1) (kUniform) or standard normal (kNormal) Philox draws.
// out: contiguous float; state: i64 [2] {seed, offset} on out's device; the
// kernel advances offset by out.numel() on the device (so a captured step
// draws new numbers on every replay).
void random(const Tensor& out, const Tensor& state, RandomKind kind);

// The backend's own forms of Tensor::to(dtype) and Tensor::contiguous() for
// the host sides of other families (which sit below the op layer): `t` itself
// when it already is f32 / contiguous, else a new contiguous tensor filled by
// one "copy" launch. No autograd: the result never records a backward.
Tensor to_float32(const Tensor& t);
Tensor contiguous(const Tensor& t);

// ---- reduce (reduce.cpp) ----
//
//   // a: [B, T, C]; reduce dims 0 and 2 -> out [T] (contiguous, f32)
//   backend::sum(out, a, dim_bit(0) | dim_bit(2));
//
// The input may have any strides; the output is contiguous and its elements
// are the kept dims of the input in order (so keepdim only changes the
// output's shape, not its layout). Shapes and strides travel inline in the
// kernel arguments (ReduceGeom), so captured graphs replay them. Every order
// of summation is fixed by the shape alone: results are the same run to run.

// out[o] = sum of the reduced elements. Float inputs accumulate in f32 and
// store in out's dtype (the input's, or f32); integer and bool inputs
// accumulate in wrapping 64-bit arithmetic and store in out's dtype (i64 for
// sum, the input's for sum_to). An empty reduction gives 0.
void sum(const Tensor& out, const Tensor& a, DimMask dims);
// out[o] = sum / count (floats only; out f32 or a's dtype). count 0 gives NaN.
void mean(const Tensor& out, const Tensor& a, DimMask dims);
// out[o] = sum (a - mean[o])^2 / max(0, count - correction); mean: contiguous
// f32 with out's numel (from mean() above). Dividing by 0 gives inf or NaN.
void var(const Tensor& out, const Tensor& a, const Tensor& mean, DimMask dims, int64_t correction);
// Max over the reduced dims: values (a's dtype; may be undefined for argmax)
// and indices (i64): the row-major index within the reduced dims of the first
// maximum; a NaN is the maximum (the first NaN wins). Needs a non-empty reduction.
void max(const Tensor& values, const Tensor& indices, const Tensor& a, DimMask dims);
// Max's backward: grad_in (contiguous, viewed as [outer, n, inner]) = 0
// except grad_in[p, indices[p, i], i] = grad_out[p, i]. grad_out and indices
// are contiguous [outer, inner]; indices outside [0, n) are skipped.
void max_backward(const Tensor& grad_in, const Tensor& grad_out, const Tensor& indices, int64_t outer, int64_t n,
                  int64_t inner);

// ---- nn (nn.cpp) ----
//
//   backend::softmax(out, x, /*outer=*/4, /*n=*/10, /*inner=*/1, /*log=*/false);
//
// Softmax, log_softmax, cross entropy, layer norm, embedding and dropout:
// one fused forward kernel and one fused backward kernel each (one launch
// each, plus its scratch). Every tensor is CONTIGUOUS (the op makes it so)
// and sizes are plain elements. A reduction over one dim of a contiguous
// tensor sees it as [outer, n, inner] (n: the reduced dim; inner = 1 is the
// fast last-dim path). Float tensors are f32, f16 or bf16 (computed in f32);
// saved statistics are always f32. Index tensors are i32 or i64. Bad class
// ids and embedding indices: NOTE [ Index checks ] in kernel_table.h.

// out = softmax (or log_softmax) of x over n; x, out: [outer, n, inner].
void softmax(const Tensor& out, const Tensor& x, int64_t outer, int64_t n, int64_t inner, bool log);
// grad_in from grad_out (g) and the forward output y, same layout:
// softmax: y * (g - sum(g * y)); log_softmax: g - exp(y) * sum(g).
void softmax_backward(const Tensor& grad_in, const Tensor& grad_out, const Tensor& out, int64_t outer,
                      int64_t n, int64_t inner, bool log);

// logits [N, C], target [N] (i32/i64) -> loss (0-d, logits dtype), the mean
// of logsumexp(row) - logit[target] over rows whose target != ignore_index
// (0 when none). stats: f32 [2N + 1]: the max of each row and the log of its
// sum of exp(x - max), kept apart (NOTE [ Log-sum-exp apart ] in
// kernel_table.h), then the number of counted rows (exact below 2^24).
void cross_entropy(const Tensor& loss, const Tensor& stats, const Tensor& logits, const Tensor& target,
                   int64_t ignore_index);
// grad_logits [N, C] = (softmax - onehot(target)) * grad_loss / count on
// counted rows, 0 on ignored rows. grad_loss (0-d) is read inside the kernel.
void cross_entropy_backward(const Tensor& grad_logits, const Tensor& grad_loss, const Tensor& logits,
                            const Tensor& target, const Tensor& stats, int64_t ignore_index);

// x, out: [rows, cols]; weight, bias: [cols] or undefined. stats: f32
// [rows, 2] = {mean - x[row, 0], rstd} of each row, with rstd = 1 / sqrt(var
// + eps) (population variance; NOTE [ Layer norm's shifted mean ] in
// kernel_table.h).
void layer_norm(const Tensor& out, const Tensor& stats, const Tensor& x, const Tensor& weight,
                const Tensor& bias, double eps);
// Any of dx [rows, cols], dweight [cols], dbias [cols] may be undefined (not
// computed). dweight/dbias are sums over rows in a fixed partition and a
// fixed combine order (deterministic whatever the thread count; a scratch
// tensor holds the partial sums).
void layer_norm_backward(const Tensor& dx, const Tensor& dweight, const Tensor& dbias, const Tensor& grad_out,
                         const Tensor& x, const Tensor& weight, const Tensor& stats);

// weight [V, D] (any dtype but bool), indices [n] (i32/i64) -> out [n, D].
void embedding(const Tensor& out, const Tensor& weight, const Tensor& indices);
// grad_weight [V, D] = 0, then row indices[i] += grad_out[i] for each i in
// order (deterministic, no atomics).
void embedding_backward(const Tensor& grad_weight, const Tensor& grad_out, const Tensor& indices);

// out = keep ? a / (1 - p) : 0 with keep = uniform(philox(offset + i, seed)
// word 0) >= p; mask (bool, may be undefined) records keep. state: i64 [2]
// {seed, offset}; the kernel advances offset by numel.
void dropout(const Tensor& out, const Tensor& mask, const Tensor& a, const Tensor& state, double p);
// grad_in = mask ? grad_out * scale : 0.
void dropout_backward(const Tensor& grad_in, const Tensor& grad_out, const Tensor& mask, double scale);

// ---- loss (loss.cpp) ----
// The kernels of binary_cross_entropy_with_logits and nll_loss (the
// contracts: BceLogitsArgs, NllArgs in kernel_table.h); the weights and the
// reductions are composed around them by src/ops/loss.cpp.
//
//   backend::bce_logits(BceMode::kLoss, out, x, t, pos_weight);   // elementwise, no weight

// out = the BceLogitsArgs element of x, t and pos_weight (undefined: 1);
// out contiguous of x's shape; t of x's shape, pos_weight broadcast to it,
// any strides; one float dtype.
void bce_logits(BceMode mode, const Tensor& out, const Tensor& x, const Tensor& t, const Tensor& pos_weight);
// x contiguous [outer, classes, inner] (float), target contiguous [outer,
// inner] (i32/i64), weight [classes] (contiguous, x's dtype) or undefined;
// out and out_weight contiguous [outer * inner] of x's dtype.
void nll(const Tensor& out, const Tensor& out_weight, const Tensor& x, const Tensor& target,
         const Tensor& weight, int64_t ignore_index);
// grad_x [outer, classes, inner] = the scatter of -weight[t] * grad_out[m].
void nll_backward(const Tensor& grad_x, const Tensor& grad_out, const Tensor& target, const Tensor& weight,
                  int64_t ignore_index);

// ---- index (index.cpp) ----
// Gathers and deterministic scatters along one dim (NOTE [ Index geometry ]
// in kernel_table.h), top-k and multinomial draws.
//
//   backend::gather(out, x, 1, idx);            // out[i][j] = x[i][idx[i][j]]
//   backend::scatter_add(gx, 1, idx, g);        // gx[i][idx[i][j]] += g[i][j], in j order

// out (index's shape, any strides) = in[p with p[dim] = index[p]]; in: any
// strides, index.size(d) <= in.size(d) for d != dim; index i32/i64 (any
// strides, 0 for an expanded index); out and in one dtype (any).
void gather(const Tensor& out, const Tensor& in, int64_t dim, const Tensor& index);
// out[p with p[dim] = index[p]] += src[p] in place, over index's shape; src
// at least index's size in every dim, out in every dim but `dim`; one
// dtype, not bool. Deterministic: the adds into an element run in index
// order along dim (ScatterAddArgs).
void scatter_add(const Tensor& out, int64_t dim, const Tensor& index, const Tensor& src);
// values (x's dtype) and indices (i64), both contiguous [outer, k, inner], of
// contiguous x [outer, n, inner]; TopkArgs says the order.
void topk(const Tensor& values, const Tensor& indices, const Tensor& x, int64_t outer, int64_t n, int64_t inner,
          int64_t k, bool largest);
// out (i64, contiguous [rows, samples]) drawn from probs (float, contiguous
// [rows, classes]) with the Philox generator whose state (i64 [2]) lives on
// probs' device; the kernel advances the offset by rows * samples.
void multinomial(const Tensor& out, const Tensor& probs, int64_t samples, bool replacement, const Tensor& state);

// ---- gemm (gemm.cpp) ----
//
// Matrix products through the backend's BLAS (OpenBLAS cblas_sgemm on CPU,
// cuBLAS on CUDA), and the column sums of bias gradients.
//
//   backend::matmul(out, x, w.t());     // w.t() goes to BLAS transposed: no copy
//
// NOTE [ Matmul layouts ]: a matrix operand is passed to BLAS as is when one
// of its last two dims has unit stride (row-major -> not transposed,
// column-major such as w.t() -> transposed, leading dim = the other stride).
// Only a matrix with no unit stride (e.g. a column slice with step 2, or an
// expanded row) is copied. Batch dims may have any strides, 0 included
// (broadcast). src/backends/matmul_layout.h decides.
//
// NOTE [ Matmul accumulation ]: out's batch dims may be smaller than the
// broadcast batch of a and b (size 1 or missing). Those dims are reduced: the
// products of the batch items that map to the same out matrix are summed into
// it (beta applies to the first, then beta = 1). Backward uses this to sum a
// gradient over broadcast batch dims in the GEMM itself, with no temporary of
// the broadcast size and no separate reduction.
//
// f16/bf16 accumulate in f32. On CPU the operands are converted to f32 (a
// copy), multiplied with sgemm and the result rounded back on store: OpenBLAS
// 0.3.21 has no f16 GEMM that we can rely on. On CUDA cuBLAS takes them as
// they are; a product summed over batch items accumulates in an f32 copy of
// out, rounded into out once (NOTE [ CUDA matmul batches ] in cuda/blas.cpp).

// out[.., n, m] = alpha * a[.., n, k] @ b[.., k, m] + beta * out, all of one
// float dtype (f32, f16, bf16) on one device, each at least 2-D. a and b: any
// strides; their batch dims broadcast (NumPy) against out's; out's last dim
// has unit stride (fresh tensors always do). beta = 0 overwrites out (never
// reads it).
void matmul(const Tensor& out, const Tensor& a, const Tensor& b, float alpha = 1.f, float beta = 0.f);

// out[j] = sum_i x[i, j]: column sums of a 2-D x (any strides; copied if its
// rows are not contiguous) into a contiguous 1-D out, same float dtype,
// accumulated in f32. Used for a bias gradient.
void column_sum(const Tensor& out, const Tensor& x);

// ---- optim (optim.cpp) ----
//
// The kernels of the optimizers (src/optim/): NOTE [ Step state lives on the
// device ] (src/backends/kernel_table.h): lr, step and the clipping scale are
// tensors the kernels read where they run, so a captured graph replays their
// current values. Parameters and gradients: f32, f16 or bf16 (same dtype,
// same shape, any strides); updates compute in f32 (src/backends/optim_math.h).
// State tensors (momentum, exp_avg, exp_avg_sq) are f32 of the parameter's
// shape; lr is f32 with one element, step i64 with one element, all on the
// parameter's device. Each function lists every storage its kernel reads or
// writes.
//
//   backend::increment(step);                                 // step: i64 0-d
//   backend::adamw_update(p, p.grad(), m, v, lr, step, 0.9, 0.999, 1e-8, 0.01);

// One SGD step in place (PyTorch semantics, dampening 0). momentum_buf is
// undefined for plain SGD (momentum == 0), else it is read and updated.
void sgd_update(const Tensor& param, const Tensor& grad, const Tensor& momentum_buf, const Tensor& lr,
                double momentum, bool nesterov, double weight_decay);

// One AdamW step in place; reads lr (f32) and the step count t (i64, already
// incremented for this step) from device memory.
void adamw_update(const Tensor& param, const Tensor& grad, const Tensor& exp_avg, const Tensor& exp_avg_sq,
                  const Tensor& lr, const Tensor& step, double beta1, double beta2, double eps,
                  double weight_decay);

// One AdamW update of many parameters in one launch (the same bits as one
// adamw_update per parameter), on table's device. `table`: a dense tensor
// holding `count` AdamWEntry rows (src/backends/kernel_table.h) whose arrays
// are all dense, `total` elements in all; every parameter has `dtype`.
// `reads` / `writes`: every storage the update reads (table, p, g, m, v, lr,
// step) / writes (p, m, v).
void adamw_update_many(const Tensor& table, int64_t count, int64_t total, DType dtype,
                       absl::Span<Storage* const> reads, absl::Span<Storage* const> writes, const Tensor& lr,
                       const Tensor& step, double beta1, double beta2, double eps, double weight_decay);

// counter += 1 (i64, one element).
void increment(const Tensor& counter);

// partial[slot] = sqrt(sum of x^2), x's L2 norm (x float, any strides;
// partial f32 contiguous, on x's device). Summed in double in an order fixed
// by x's size, so the result does not depend on the number of threads; the
// root is what goes to f32 (the sum itself would overflow f32 from norms of
// 1.8e19 on).
void sum_of_squares(const Tensor& x, const Tensor& partial, int64_t slot);

// norm = sqrt(sum(partial^2)) (in double); scale = min(1, max_norm / (norm + 1e-6)).
// partial: f32 [P] of norms (sum_of_squares); norm and scale: f32 with one element.
void clip_coefficient(const Tensor& partial, const Tensor& norm, const Tensor& scale, double max_norm);

// x *= scale[0] in place (x float, any strides, no broadcast dims); writes
// nothing when scale[0] >= 1 or is NaN.
void scale_in_place(const Tensor& x, const Tensor& scale);

// ---- cnn (cnn.cpp) ----
// 2-D convolutions (NCHW, PyTorch's semantics), pooling and batch
// normalization. Every tensor is contiguous and of one float dtype (indices
// i64, batch norm's saved statistics f32); the op layer computes the output
// sizes (ConvGeom's and PoolGeom's rules in kernel_table.h).
//
//   backend::conv2d(y, x, w, b, {{1, 1}, {1, 1}, {1, 1}, 1});    // 3x3, padding 1
//   backend::conv2d_backward_data(gx, gy, w, params);
//   backend::conv2d_backward_weights(gw, gb, x, gy, params);     // gb may be undefined
//
// f16/bf16 convolutions on a backend that takes f32 only (the CPU) run on f32
// copies and round each result once. Each pass asks the backend for its plan
// and workspace first (CnnKernels::plan): the first call of a geometry builds
// it, so the eager warm-up of a captured step does and the capture only looks
// it up; the workspace is a temporary tensor (from the arena under capture).
struct Conv2dParams {
  int64_t stride[2], padding[2], dilation[2];
  int64_t groups;
};
// y [n, k, oh, ow] = conv(x [n, c, h, w], w [k, c / groups, kh, kw]) + b [k] (b may be undefined).
void conv2d(const Tensor& y, const Tensor& x, const Tensor& w, const Tensor& b, const Conv2dParams& p);
// gx (x's shape) = the input's gradient from gy (y's shape) and w; overwrites gx.
void conv2d_backward_data(const Tensor& gx, const Tensor& gy, const Tensor& w, const Conv2dParams& p);
// gw (w's shape) and gb ([k] or undefined) from x and gy; overwrites both.
void conv2d_backward_weights(const Tensor& gw, const Tensor& gb, const Tensor& x, const Tensor& gy,
                             const Conv2dParams& p);
// y, indices (i64) [planes, oh, ow] = the windows' maxima of x [planes, h, w] and their flat positions.
void max_pool2d(const Tensor& y, const Tensor& indices, const Tensor& x, const PoolGeom& g);
// gx [planes, h, w] = gy scattered to the saved positions (summed where windows overlap).
void max_pool2d_backward(const Tensor& gx, const Tensor& gy, const Tensor& indices, const PoolGeom& g);
// y = the windows' means of x (mode: AvgPoolMode), and the backward from gy.
void avg_pool2d(const Tensor& y, const Tensor& x, const PoolGeom& g, AvgPoolMode mode);
void avg_pool2d_backward(const Tensor& gx, const Tensor& gy, const PoolGeom& g, AvgPoolMode mode);
// y = batch_norm(x [n, c, ...]) per channel (BatchNormArgs); saved f32 [2, c].
// weight, bias [c] may be undefined; running_mean / running_var [c] both or
// neither (neither only when training), updated in place when training, by
// the factor momentum or, where num_batches_tracked (0-d i64, this batch
// counted) is defined, 1 / num_batches_tracked read as the kernel runs.
void batch_norm(const Tensor& y, const Tensor& saved, const Tensor& x, const Tensor& weight, const Tensor& bias,
                const Tensor& running_mean, const Tensor& running_var, bool training, double momentum, double eps,
                const Tensor& num_batches_tracked = Tensor());
// gx, gw, gb (each may be undefined) from gy, the forward's x, weight and saved.
void batch_norm_backward(const Tensor& gx, const Tensor& gw, const Tensor& gb, const Tensor& gy, const Tensor& x,
                         const Tensor& weight, const Tensor& saved, bool training);

}  // namespace encore::backend
