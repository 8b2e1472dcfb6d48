// The kernel table: everything a backend provides to run encore's ops, in
// one place. A backend (src/backends/cpu/, src/backends/cuda/) fills one
// KernelTable, family by family; the device-neutral host side of each family
// (src/backends/<family>.cpp: checks, scratch tensors, argument filling and
// the one read/write list) fills the argument structs below and launches the
// entry of the output's device through its Stream. nvcc-safe: no Abseil, no
// tensor types, so .cu files include it.
//
//   // src/backends/binary.cpp, the same for every backend:
//   const BinaryArgs args{make_layout<3>(out, {&a, &b}), out.dtype(), op, alpha};
//   current_stream(out.device()).launch(kernels_for(out.device()).binary->binary, "add", args,
//                                       {a.storage(), b.storage()}, {out.storage()});
//   // src/backends/cpu/binary.cpp: the CPU's entries
//   extern const BinaryKernels kBinary = {specialized_kernel<&pick_binary>(),
//                                         specialized_kernel<&pick_binary_scalar>(), ...};
//   // src/backends/cuda/binary.cu: kernel<&binary_launch>(), kernel<&binary_scalar_launch>(), ...
//
// Adding a kernel family: its argument structs and a `<Family>Kernels` struct
// here (one commented entry per kernel, "(optional)" where a backend may
// leave it null), its host side in src/backends/<family>.cpp, its kernels in
// src/backends/cpu/<family>.cpp and src/backends/cuda/<family>.cu, and one
// line in each backend's table (cpu/kernel_table.cpp, cuda/kernel_table.cpp).
// docs/ARCHITECTURE.md walks through it.
//
// Argument structs are plain data (trivially copyable: captured graphs copy
// them), and each lists its members in a fields() template
// (src/core/kernel_args.h): capture() compares every host value of a launch
// with the recorded warm-up's, and a Graph reports what it froze. Pointers are device pointers of the launch's device, owned by
// tensors that the launch's read/write lists keep alive during capture.
// Sizes are in elements and strides in bytes unless a field says otherwise.
#pragma once

#include <cstdint>

#include "encore/dtype.h"
#include "src/backends/layout.h"
#include "src/backends/op_kinds.h"
#include "src/core/kernel.h"

namespace encore {
class Tensor;
}  // namespace encore

namespace encore::backend {

// ---- binary: broadcasting arithmetic, tensor-scalar arithmetic ----

// out = a op alpha * b (alpha only for kAdd/kSub); operands out, a, b; all of
// `dtype` (not bool). out may alias a (in place).
struct BinaryArgs {
  Layout<3> l;
  DType dtype;
  BinaryOp op;
  double alpha;
  template <typename V>
  void fields(V& v) const {
    v("l", l); v("dtype", dtype); v("op", op); v("alpha", alpha);
  }
};

// out = a op s (a + s, a * s, s - a, s / a); operands out, a; both of `dtype` (not bool).
struct BinaryScalarArgs {
  Layout<2> l;
  DType dtype;
  ScalarOp op;
  double s;
  template <typename V>
  void fields(V& v) const {
    v("l", l); v("dtype", dtype); v("op", op); v("s", s);
  }
};

// out (bool) = a op b; operands out, a, b; a and b of `dtype` (any, bool
// included), compared in the compute type (f16/bf16 as f32). NaN compares
// unequal to everything (ne: true).
struct CompareArgs {
  Layout<3> l;
  DType dtype;
  CompareOp op;
  template <typename V>
  void fields(V& v) const {
    v("l", l); v("dtype", dtype); v("op", op);
  }
};

// out (bool) = a op s; operands out, a (of `dtype`); s already converted to
// `dtype` (value_bits in convert.h), then compared as CompareArgs does.
struct CompareScalarArgs {
  Layout<2> l;
  DType dtype;
  CompareOp op;
  uint64_t value_bits;
  template <typename V>
  void fields(V& v) const {
    v("l", l); v("dtype", dtype); v("op", op); v.bits("value", value_bits, dtype);
  }
};

struct BinaryKernels {
  Kernel<BinaryArgs> binary;
  Kernel<BinaryScalarArgs> scalar;
  Kernel<CompareArgs> compare;                 // "eq", "lt", ... (kCompareNames)
  Kernel<CompareScalarArgs> compare_scalar;    // "eq_scalar", ... (kCompareScalarNames)
};

// ---- unary: elementwise math (unary_math.h) and its fused backward ----

// out = op(a); operands out, a, both of `dtype`: a float dtype, or i32/i64
// for abs, relu and clamp (unary_supports_integers; the host refuses the
// rest). p0, p1: the op's scalars as the caller gave them (pow: the exponent;
// clamp: the bounds, whole numbers or infinite for integers); each kernel
// converts them to the compute type with unary_param (integers: clipped).
struct UnaryArgs {
  Layout<2> l;
  DType dtype;
  UnaryOp op;
  double p0, p1;
  template <typename V>
  void fields(V& v) const {
    v("l", l); v("dtype", dtype); v("op", op); v("p0", p0); v("p1", p1);
  }
};

// grad_in = g * op'(saved), saved being y or x as unary_saves_output says;
// operands grad_in, g, saved, all of `dtype` (a float dtype).
struct UnaryBackwardArgs {
  Layout<3> l;
  DType dtype;
  UnaryOp op;
  double p0, p1;
  template <typename V>
  void fields(V& v) const {
    v("l", l); v("dtype", dtype); v("op", op); v("p0", p0); v("p1", p1);
  }
};

struct UnaryKernels {
  Kernel<UnaryArgs> forward;              // "exp", "tanh", ... (kUnaryNames)
  Kernel<UnaryBackwardArgs> backward;     // "exp_backward", ... (kUnaryBackwardNames)
};

// ---- select: where, masked_fill ----
// Elements are moved as storage bytes, never converted, so every dtype is
// exact; bool operands are read as bytes and tested against zero.

// out = cond ? a : b; operands out, cond (bool), a, b; out, a, b of `dtype`
// (any, bool included).
struct WhereArgs {
  Layout<4> l;
  DType dtype;
  template <typename V>
  void fields(V& v) const {
    v("l", l); v("dtype", dtype);
  }
};

// out = (mask == fill_when) ? value : a; operands out, a, mask (bool); out
// and a of `dtype` (any).
struct MaskedFillArgs {
  Layout<3> l;
  DType dtype;
  uint64_t value_bits;   // the value converted to `dtype` (value_bits in convert.h): its storage bytes, low first
  bool fill_when;
  template <typename V>
  void fields(V& v) const {
    v("l", l); v("dtype", dtype); v.bits("value", value_bits, dtype); v("fill_when", fill_when);
  }
};

struct SelectKernels {
  Kernel<WhereArgs> where;               // "where"
  Kernel<MaskedFillArgs> masked_fill;    // "masked_fill"; with value 0 also the backward of both ops
};

// ---- copy: fill, strided copy with dtype conversion, arange, random ----

// Every element of operand 0 = the value; any strides, any dtype.
struct FillArgs {
  Layout<1> l;
  DType dtype;
  uint64_t value_bits;   // the value converted to `dtype` (value_bits in convert.h): its storage bytes, low first
  template <typename V>
  void fields(V& v) const {
    v("l", l); v("dtype", dtype); v.bits("value", value_bits, dtype);
  }
};

// dst = convert(src) (convert.h; bit for bit on both backends); operands dst,
// src (broadcast to dst); any pair of dtypes; both on one device.
struct CopyArgs {
  Layout<2> l;
  DType dst_dtype, src_dtype;
  template <typename V>
  void fields(V& v) const {
    v("l", l); v("dst_dtype", dst_dtype); v("src_dtype", src_dtype);
  }
};

// out[i] = convert(start + step * i), the value exact in 64-bit integers
// (the host keeps every value in int64), then rounded once to a float dtype;
// out dense, n elements.
struct ArangeArgs {
  void* out;
  int64_t n;
  DType dtype;   // not bool
  int64_t start, step;
  template <typename V>
  void fields(V& v) const {
    v("out", out); v("n", n); v("dtype", dtype); v("start", start); v("step", step);
  }
};

// out[i] = draw i of Philox (src/core/philox.h) at counter state[1] + i, key
// state[0]: uniform on [0, 1) (kept below 1 after rounding to f16/bf16) or
// standard normal; then state[1] += n, on the device, after every draw
// (a captured step draws new numbers on every replay). out dense, n
// elements of a float `dtype`; state: two i64 {seed, offset} on out's
// device, read and written only by the kernel.
struct RandomArgs {
  void* out;
  int64_t n;
  int64_t* state;
  DType dtype;
  RandomKind kind;
  template <typename V>
  void fields(V& v) const {
    v("out", out); v("n", n); v("state", state); v("dtype", dtype); v("kind", kind);
  }
};

struct CopyKernels {
  Kernel<FillArgs> fill;        // "fill"
  Kernel<CopyArgs> copy;        // "copy"
  Kernel<ArangeArgs> arange;    // "arange"
  Kernel<RandomArgs> random;    // "rand" / "randn"
};

// ---- reduce: sum, mean, var, max/argmax, max's backward ----

// NOTE [ Reduction geometry ]
// The input seen as kept dims x reduced dims, as if permuted so the reduced
// dims come last (backend::group_reduce_dims in tensor_layout.h fills it).
// Size-1 dims are dropped and a dim merges into the previous one of its group
// when their strides allow, so reducing the last dim of a contiguous tensor
// is one reduced dim of stride 1, and a full reduction of a contiguous tensor
// one reduced dim of numel. Merging keeps row-major order, so the linear
// index over the reduced dims is the index max() reports. Output o is the
// o-th kept index in row-major order (outputs are contiguous, so keepdim only
// changes the output's shape, not its layout).
struct ReduceGeom {
  const void* in;                   // the input's first element
  int32_t kept_ndim, red_ndim;      // both >= 1 (a size-1 dim stands in for none)
  int64_t out_numel, red_numel;     // elements; red_numel per output
  int64_t kept_shape[kLayoutMaxDims], kept_stride[kLayoutMaxDims];   // strides in input elements
  int64_t red_shape[kLayoutMaxDims], red_stride[kLayoutMaxDims];
  template <typename V>
  void fields(V& v) const {
    v("in", in); v("kept_ndim", kept_ndim); v("red_ndim", red_ndim); v("out_numel", out_numel);
    v("red_numel", red_numel); v("kept_shape", kept_shape, kept_ndim); v("kept_stride", kept_stride, kept_ndim);
    v("red_shape", red_shape, red_ndim); v("red_stride", red_stride, red_ndim);
  }
};

// How a backend splits a reduction over its threads, from the geometry alone
// (so a shape always reduces in the same order). Filled by
// ReduceKernels::plan_sum / plan_max where a backend has them (CUDA: NOTE
// [ CUDA reduction plan ] in cuda/reduce.cu); zero and unused elsewhere (the
// CPU picks its loop from the geometry inside the kernel).
struct ReducePlan {
  int32_t tx, ty;       // outputs per block, threads per output
  int32_t splits;       // chunks per output (1: a single pass, no partials)
  bool row_threads;     // y varies fastest across the threads of a block
  template <typename V>
  void fields(V& v) const {
    v("tx", tx); v("ty", ty); v("splits", splits); v("row_threads", row_threads);
  }
};

enum class SumMode : int32_t {
  kSum,                // out = sum
  kMean,               // out = sum / divisor (divisor = count)
  kSquaredDeviation,   // out = sum (x - mean[o])^2 / divisor (divisor = max(0, count - correction))
};

// out[o] = the sum (mean, squared deviation) of output o's reduced elements
// (NOTE [ Reduction geometry ]). Floats accumulate in f32, integers and bool
// in wrapping 64-bit arithmetic; out_dtype is in_dtype or the wide type (f32
// for floats, i64 otherwise); kMean and kSquaredDeviation take floats only.
struct SumArgs {
  ReduceGeom g;
  ReducePlan plan;
  DType in_dtype, out_dtype;
  SumMode mode;
  void* out;                      // contiguous, g.out_numel elements of out_dtype
  const float* mean;              // kSquaredDeviation: the mean of each output (f32, contiguous), else null
  double divisor;                 // kMean, kSquaredDeviation (see SumMode)
  void* partials;                 // scratch of plan_sum's bytes (null when it asked for none)
  template <typename V>
  void fields(V& v) const {
    v("g", g); v("plan", plan); v("in_dtype", in_dtype); v("out_dtype", out_dtype); v("mode", mode);
    v("out", out); v("mean", mean); v("divisor", divisor); v("partials", partials);
  }
};

// values[o] / indices[o] = the max of output o's reduced elements and the
// row-major index within the reduced dims of its first occurrence; a NaN is
// the maximum (the first NaN wins). Needs g.red_numel > 0 unless g.out_numel is 0.
struct MaxArgs {
  ReduceGeom g;
  ReducePlan plan;
  DType dtype;                    // the input's and values' dtype: a float or an integer, not bool
  void* values;                   // contiguous, g.out_numel elements; null for argmax
  int64_t* indices;               // contiguous, g.out_numel elements
  void* partials;                 // scratch of plan_max's bytes (null when it asked for none)
  template <typename V>
  void fields(V& v) const {
    v("g", g); v("plan", plan); v("dtype", dtype); v("values", values); v("indices", indices);
    v("partials", partials);
  }
};

// grad_in [outer, n, inner] = 0 except grad_in[p, indices[p, i], i] =
// grad_out[p, i]; indices outside [0, n) are skipped. All contiguous.
struct MaxBackwardArgs {
  void* grad_in;                  // [outer, n, inner] of dtype
  const void* grad_out;           // [outer, inner] of dtype
  const int64_t* indices;         // [outer, inner]
  int64_t outer, n, inner;
  DType dtype;                    // f32, f16 or bf16
  template <typename V>
  void fields(V& v) const {
    v("grad_in", grad_in); v("grad_out", grad_out); v("indices", indices); v("outer", outer); v("n", n);
    v("inner", inner); v("dtype", dtype);
  }
};

struct ReduceKernels {
  Kernel<SumArgs> sum;                     // sum, mean and var (SumArgs::mode)
  Kernel<MaxArgs> max;                     // max and argmax (values null)
  Kernel<MaxBackwardArgs> max_backward;    // the scatter of max's gradient
  // (optional) Fill args.plan from args.g and return the bytes of scratch the
  // kernel needs in args.partials (0: none); the host allocates it and lists
  // it among the launch's writes. Null: no plan, no scratch (CPU).
  int64_t (*plan_sum)(SumArgs& args);
  int64_t (*plan_max)(MaxArgs& args);
};

// ---- nn: softmax, cross entropy, layer norm, embedding, dropout ----
//
// Every tensor is contiguous (the op makes it so) and sizes are plain
// elements. A reduction over one dim of a contiguous tensor sees it as
// [outer, n, inner] (n: the reduced dim; inner = 1 is the fast last-dim
// path). Float tensors are f32, f16 or bf16 (`dtype`; computed in f32);
// saved statistics are always f32; index tensors are i32 or i64 (`index`).
//
// NOTE [ Index checks ]: out-of-range class ids and embedding indices are
// rejected by the ops on the host before launch in eager CPU steps. The
// kernels (CPU and CUDA) still never touch memory out of bounds: a bad class
// id counts as ignored and a bad embedding index reads (and scatters)
// nothing, so a captured graph replayed with bad data stays memory-safe; the
// forward kernels also report the bad index (src/core/kernel_errors.h), which
// capture(), Graph::replay() and, on CUDA, the next synchronization turn
// into an error naming the op. `errors` is where a kernel reports: the
// device's kernel error word (NOTE [ Kernel error words ] in
// cuda/runtime.h) from NnKernels::error_word, or null where the backend has
// none (the CPU kernels call report_kernel_error()).

// y = softmax (or log_softmax) of x over n; x, y: [outer, n, inner].
// log_softmax is (x - max) - log(sum of exp(x - max)), on every backend:
//
// NOTE [ Log-sum-exp apart ]
// Why not x - lse with lse = max + log(sum), one number per row? In f32 lse
// is rounded at the precision of the max, and every log-probability and
// every softmax of cross_entropy's backward inherits that error: logits
// [o, o, o - 1] gave log-probabilities -0.8623 at o = 1e4, -0.875 at 1e6,
// -1 at 1e7 (exact -0.861995), and gradients summing to -0.13, not 0, at
// 1e7. x - max is exact (Sterbenz) for x within a factor of 2 of the max,
// which covers every x whose exp(x - max) is not 0 once the max passes
// 174, and log(sum) lies in [0, log n], so (x - max) - log(sum) is as
// accurate as the logits' differences (PyTorch's log_softmax computes it
// so too).
// cross_entropy keeps max and log(sum) apart in its stats for the same
// reason; its loss is log(sum) - (x[target] - max).
struct SoftmaxArgs {
  const void* x;
  void* y;
  int64_t outer, n, inner;
  DType dtype;
  bool log;
  template <typename V>
  void fields(V& v) const {
    v("x", x); v("y", y); v("outer", outer); v("n", n); v("inner", inner); v("dtype", dtype);
    v("log", log);
  }
};

// gx from g (grad_out) and the forward output y, all [outer, n, inner]:
// softmax: y * (g - sum(g * y)); log_softmax: g - exp(y) * sum(g).
struct SoftmaxBackwardArgs {
  const void* g;
  const void* y;
  void* gx;
  int64_t outer, n, inner;
  DType dtype;
  bool log;
  template <typename V>
  void fields(V& v) const {
    v("g", g); v("y", y); v("gx", gx); v("outer", outer); v("n", n); v("inner", inner);
    v("dtype", dtype); v("log", log);
  }
};

// loss (0-d, dtype) = the mean of logsumexp(row) - x[row, target] over rows
// whose target != ignore_index (0 when none), as log(sum) - (x[row, target]
// - max). stats f32 [2 * rows + 1]: the max of each row and the log of its
// sum of exp(x - max) (stats[2 * row], stats[2 * row + 1], NOTE [ Log-sum-exp
// apart ]), then the number of counted rows (exact below 2^24).
struct CrossEntropyArgs {
  const void* x;                  // [rows, classes] of dtype
  const void* target;             // [rows] of index
  void* loss;
  float* stats;
  int64_t rows, classes, ignore_index;
  DType dtype, index;
  uint32_t* errors;               // a target neither in [0, classes) nor ignore_index: KernelError::kClassIndex
  template <typename V>
  void fields(V& v) const {
    v("x", x); v("target", target); v("loss", loss); v("stats", stats); v("rows", rows);
    v("classes", classes); v("ignore_index", ignore_index); v("dtype", dtype); v("index", index); v("errors", errors);
  }
};

// gx [rows, classes] = (softmax - onehot(target)) * grad_loss / count on
// counted rows, 0 on ignored rows, softmax = exp((x - max) - log(sum)) from
// the stats. grad_loss (0-d) is read by the kernel, so a replay sees this
// step's value.
struct CrossEntropyBackwardArgs {
  const void* x;
  const void* target;
  const float* stats;             // from CrossEntropyArgs
  const void* grad_loss;
  void* gx;
  int64_t rows, classes, ignore_index;
  DType dtype, index;
  template <typename V>
  void fields(V& v) const {
    v("x", x); v("target", target); v("stats", stats); v("grad_loss", grad_loss); v("gx", gx);
    v("rows", rows); v("classes", classes); v("ignore_index", ignore_index); v("dtype", dtype); v("index", index);
  }
};

// y [rows, cols] = (x - mean) * rstd * w + b per row; stats f32 [rows, 2] =
// {mean - x[row, 0], rstd}, rstd = 1 / sqrt(var + eps) (population variance).
//
// NOTE [ Layer norm's shifted mean ]
// Why does stats hold the mean of x - x[row, 0] and not the mean? A row
// such as 1000 + tiny noise has a mean that f32 cannot hold: rounded, it is
// off by up to half an ulp of 1000 (3e-5), more with the sum's own
// rounding (even a constant row's sum * (1 / cols) missed it by an ulp),
// and x - mean carries that error into every output, times rstd (316 at
// eps 1e-5): constant rows came out up to 0.03 instead of 0 and
// near-constant rows 0.02 off. Both passes and the output work on
// d = x - x[row, 0] instead (the shifted-data algorithm): d is exact where
// x is within a factor of 2 of x[row, 0] (Sterbenz), so a constant row has
// d = 0, mean 0 and output exactly 0 (the bias with one), and the
// deviations d - mean(d) of a near-constant row keep f32's relative
// precision. Elsewhere d rounds as x - mean did, relative to the spread
// plus |x[row, 0] - mean| (at most sqrt(cols) standard deviations). The
// backward reads x[row, 0] again and forms xh = ((x - x[row, 0]) -
// stats[row, 0]) * rstd with the forward's operations.
struct LayerNormArgs {
  const void* x;                  // [rows, cols]
  const void* w;                  // [cols] or null (1)
  const void* b;                  // [cols] or null (0)
  void* y;
  float* stats;
  int64_t rows, cols;
  float eps;
  DType dtype;
  template <typename V>
  void fields(V& v) const {
    v("x", x); v("w", w); v("b", b); v("y", y); v("stats", stats); v("rows", rows); v("cols", cols);
    v("eps", eps); v("dtype", dtype);
  }
};

// NOTE [ Deterministic layer_norm sums ]: dw/db are column sums over rows.
// Rows are cut into `chunks` fixed chunks of `rows_per_chunk` (a function of
// rows and the backend's NnKernels::layer_norm_max_chunks only); the kernel
// writes each chunk's partial sums to partial f32 [chunks, 2, cols] = {dw,
// db}, then adds the chunks in chunk order. No float atomics, and the same
// result for any thread count: replays are bit-identical.
struct LayerNormBackwardArgs {
  const void* g;                  // [rows, cols]: grad_out
  const void* x;                  // [rows, cols]
  const void* w;                  // [cols] or null
  const float* stats;             // from LayerNormArgs
  void* dx;                       // [rows, cols]; each of dx, dw, db may be null (not wanted)
  void* dw;                       // [cols]
  void* db;                       // [cols]
  float* partial;                 // scratch [chunks, 2, cols]; null when dw and db both are
  int64_t rows, cols, chunks, rows_per_chunk;
  DType dtype;
  template <typename V>
  void fields(V& v) const {
    v("g", g); v("x", x); v("w", w); v("stats", stats); v("dx", dx); v("dw", dw); v("db", db);
    v("partial", partial); v("rows", rows); v("cols", cols); v("chunks", chunks); v("rows_per_chunk", rows_per_chunk);
    v("dtype", dtype);
  }
};

// out [n, dim] = rows idx[i] of w [vocab, dim] (any dtype but bool); a bad
// index gives a zero row (NOTE [ Index checks ]).
struct EmbeddingArgs {
  const void* w;
  const void* idx;                // [n] of index
  void* out;
  int64_t n, vocab, dim;
  DType dtype, index;
  uint32_t* errors;               // an index outside [0, vocab): KernelError::kEmbeddingIndex
  template <typename V>
  void fields(V& v) const {
    v("w", w); v("idx", idx); v("out", out); v("n", n); v("vocab", vocab); v("dim", dim);
    v("dtype", dtype); v("index", index); v("errors", errors);
  }
};

// gw [vocab, dim] = 0, then row idx[i] += g[i] for each i in order, summed
// in f32 (f16/bf16: rounded to the storage type once, at the end); bad
// indices are skipped. No atomics: deterministic.
struct EmbeddingBackwardArgs {
  const void* g;                  // [n, dim]: grad_out
  const void* idx;                // [n] of index
  void* gw;
  void* workspace;                // embedding_backward_workspace's bytes (null when it asked for none)
  int64_t workspace_bytes;
  int64_t n, vocab, dim;
  DType dtype, index;
  template <typename V>
  void fields(V& v) const {
    v("g", g); v("idx", idx); v("gw", gw); v("workspace", workspace);
    v("workspace_bytes", workspace_bytes); v("n", n); v("vocab", vocab); v("dim", dim); v("dtype", dtype);
    v("index", index);
  }
};

// y = keep ? x / (1 - p) : 0 with keep = uniform(philox(offset + i, seed)
// word 0) >= p (backend::dropout_keep in nn_formulas.h); mask (or null)
// records keep. state: i64 [2] {seed, offset} on the launch's device, read by
// the kernel, which advances offset by n: a replay draws a fresh mask.
struct DropoutArgs {
  const void* x;
  void* y;
  bool* mask;
  int64_t* state;
  int64_t n;
  float p, scale;                 // scale = 1 / (1 - p)
  DType dtype;
  template <typename V>
  void fields(V& v) const {
    v("x", x); v("y", y); v("mask", mask); v("state", state); v("n", n); v("p", p); v("scale", scale);
    v("dtype", dtype);
  }
};

// gx = mask ? g * scale : 0.
struct DropoutBackwardArgs {
  const void* g;
  const bool* mask;
  void* gx;
  int64_t n;
  float scale;
  DType dtype;
  template <typename V>
  void fields(V& v) const {
    v("g", g); v("mask", mask); v("gx", gx); v("n", n); v("scale", scale); v("dtype", dtype);
  }
};

struct NnKernels {
  Kernel<SoftmaxArgs> softmax;                               // softmax and log_softmax (SoftmaxArgs::log)
  Kernel<SoftmaxBackwardArgs> softmax_backward;              // their backward, from the forward output
  Kernel<CrossEntropyArgs> cross_entropy;                    // max and log(sum) per row, then the mean: loss and stats
  Kernel<CrossEntropyBackwardArgs> cross_entropy_backward;   // the logits' gradient, from the saved stats
  Kernel<LayerNormArgs> layer_norm;                          // the normalized rows and their stats
  Kernel<LayerNormBackwardArgs> layer_norm_backward;         // dx, and dw/db through the chunk partials
  Kernel<EmbeddingArgs> embedding;                           // the gather of rows
  Kernel<EmbeddingBackwardArgs> embedding_backward;          // the ordered scatter-add into grad_weight
  Kernel<DropoutArgs> dropout;                               // the draw, the mask and the offset's advance
  Kernel<DropoutBackwardArgs> dropout_backward;              // the masked, scaled gradient
  // At most this many row chunks in layer_norm_backward's sums (NOTE
  // [ Deterministic layer_norm sums ]): a plain number, as each backend's
  // parallel shape wants it.
  int64_t layer_norm_max_chunks;
  // (optional) CUTLASS's can_implement and get_workspace_size in one: the
  // bytes of scratch embedding_backward needs for a's sizes (the host
  // allocates them, when not 0, into a.workspace and lists them among the
  // writes), or -1 when the kernel cannot take these sizes, with *why set to
  // a static phrase that follows "<n> indices into <vocab> rows" in the
  // host's error (e.g. "exceed the 32-bit sort"). Null: no scratch, any size.
  int64_t (*embedding_backward_workspace)(const EmbeddingBackwardArgs& a, const char** why);
  // (optional) The kernel error word of device `index`, for `errors` (stable
  // for the life of the process, so captured graphs may hold it). Null: the
  // backend's kernels report otherwise and `errors` stays null.
  uint32_t* (*error_word)(int index);
};

// ---- gemm: matrix products, column sums ----

// A batch of row-major products C = alpha op(A) op(B) + beta C ("gemm"):
// C[m, n], op(A)[m, k], op(B)[k, n], op(X) = X^T when trans_x (X stored
// column-major: NOTE [ Matmul layouts ] in src/backends/kernels.h). Item i of
// the batch (its multi-index over batch_shape) starts at each operand's batch
// strides; where C's batch stride is 0 and the batch dim is > 1, the items'
// products are summed into one C (NOTE [ Matmul accumulation ]): the item
// with index 0 on all those dims applies beta, the others beta = 1. k == 0:
// C = beta C (beta 0 never reads C). m == 0 or n == 0: nothing.
struct GemmArgs {
  const void* a;               // first elements
  const void* b;
  void* c;
  DType dtype;                 // of a and b: f32, or f16/bf16 where GemmKernels::half_operands
  DType c_dtype;               // of c: dtype, or f32 (an f32 accumulator for half operands)
  int64_t m, n, k;
  int64_t lda, ldb, ldc;       // row strides (elements) of A, B, C as stored
  bool trans_a, trans_b;
  float alpha, beta;
  int batch_ndim;              // 0: one product
  int64_t batch_shape[kLayoutMaxDims];
  int64_t batch_stride[3][kLayoutMaxDims];   // elements; [0] a, [1] b, [2] c; 0: broadcast (c: summed into)
  void* workspace;             // GemmKernels::workspace_bytes of scratch; null when it asks for none
  int64_t workspace_bytes;
  int device;                  // the device's index (CUDA: whose cuBLAS handle)
  template <typename V>
  void fields(V& v) const {
    v("a", a); v("b", b); v("c", c); v("dtype", dtype); v("c_dtype", c_dtype); v("m", m); v("n", n);
    v("k", k); v("lda", lda); v("ldb", ldb); v("ldc", ldc); v("trans_a", trans_a); v("trans_b", trans_b);
    v("alpha", alpha); v("beta", beta); v("batch_ndim", batch_ndim); v("batch_shape", batch_shape, batch_ndim);
    v("batch_stride_a", batch_stride[0], batch_ndim); v("batch_stride_b", batch_stride[1], batch_ndim);
    v("batch_stride_c", batch_stride[2], batch_ndim); v("workspace", workspace);
    v("workspace_bytes", workspace_bytes); v("device", device);
  }
};

// out[j] = sum_i x[i, j], accumulated in f32 in an order that depends on the
// shape only ("column_sum").
struct ColumnSumArgs {
  const void* x;               // [rows, cols], row stride ldx elements, unit column stride
  void* out;                   // [cols], contiguous, same dtype as x
  float* partial;              // [chunks, cols] f32 scratch; null when chunks == 1
  int64_t rows, cols, ldx;
  int64_t chunk_rows;          // rows per chunk: ceil(rows / chunks)
  int chunks;                  // from GemmKernels::column_sum_chunks; 1 without it
  DType dtype;                 // f32, f16 or bf16
  template <typename V>
  void fields(V& v) const {
    v("x", x); v("out", out); v("partial", partial); v("rows", rows); v("cols", cols); v("ldx", ldx);
    v("chunk_rows", chunk_rows); v("chunks", chunks); v("dtype", dtype);
  }
};

struct GemmKernels {
  Kernel<GemmArgs> gemm;
  // Whether `gemm` multiplies f16/bf16 operands itself (accumulating in f32).
  // false (CPU: OpenBLAS has sgemm only): the host converts f16/bf16
  // operands and out to f32 tensors and rounds the result into out once.
  bool half_operands;
  // The largest m, n, k and leading dim `gemm` takes (CPU: BLAS's 32-bit ints).
  int64_t max_size;
  // (optional) Bytes of device scratch `gemm` needs for these arguments
  // (CUDA: the cuBLAS workspace plus alignment slack, NOTE [ cuBLAS
  // workspace ]); null: none. The host allocates it and lists it in the writes.
  int64_t (*workspace_bytes)(const GemmArgs& a);
  Kernel<ColumnSumArgs> column_sum;
  // (optional) Row chunks of a two-pass column sum over `rows` rows (CUDA),
  // whose f32 partials the host allocates; null: one pass, no scratch.
  int (*column_sum_chunks)(int64_t rows);
};

// ---- optim: SGD and AdamW updates, the step counter, gradient-norm clipping ----
//
// NOTE [ Step state lives on the device ] (encore/optim.h): the learning
// rate, the step count and the clipping scale are read by the kernels through
// pointers to tensor data, never passed as host values, so a captured graph
// replays with their current values. Parameters and gradients are f32, f16 or
// bf16 (`dtype`); updates compute in f32 (src/backends/optim_math.h); state
// tensors (momentum, exp_avg, exp_avg_sq) are f32 of the parameter's shape.

// One SGD step in place; operands param, grad (dtype) and the f32 momentum
// buffer (operand 2 is param itself, never touched, without momentum).
struct SgdArgs {
  Layout<3> l;
  DType dtype;
  bool has_momentum, nesterov;
  const float* lr;             // device scalar: this step's learning rate
  float momentum, weight_decay;
  template <typename V>
  void fields(V& v) const {
    v("l", l); v("dtype", dtype); v("has_momentum", has_momentum); v("nesterov", nesterov); v("lr", lr);
    v("momentum", momentum); v("weight_decay", weight_decay);
  }
};

// One AdamW step in place; operands param, grad (dtype), exp_avg, exp_avg_sq (f32).
struct AdamWArgs {
  Layout<4> l;
  DType dtype;
  const float* lr;             // device scalar: this step's learning rate
  const int64_t* step;         // device scalar: t, counting this step (t >= 1)
  float beta1, beta2, eps, weight_decay;
  template <typename V>
  void fields(V& v) const {
    v("l", l); v("dtype", dtype); v("lr", lr); v("step", step); v("beta1", beta1); v("beta2", beta2);
    v("eps", eps); v("weight_decay", weight_decay);
  }
};

// One parameter of a multi-tensor AdamW launch (NOTE [ One AdamW launch ] in
// src/optim/adamw.cpp). All four arrays are dense (contiguous) with `numel`
// elements; p and g of the launch's dtype, m and v f32. `start` is the sum of
// numel over the entries before this one.
struct AdamWEntry {
  char* p;
  const char* g;
  float* m;
  float* v;
  int64_t numel;
  int64_t start;
};

// One AdamW step of every row of `table` (the same bits as one AdamWArgs
// launch per row).
struct AdamWManyArgs {
  const AdamWEntry* table;     // device memory of the launch's device, `count` rows
  int64_t count, total;        // rows; total = the sum of their numel
  DType dtype;                 // of every p and g
  const float* lr;
  const int64_t* step;
  float beta1, beta2, eps, weight_decay;
  template <typename V>
  void fields(V& v) const {
    v("table", table); v("count", count); v("total", total); v("dtype", dtype); v("lr", lr);
    v("step", step); v("beta1", beta1); v("beta2", beta2); v("eps", eps); v("weight_decay", weight_decay);
  }
};

struct IncrementArgs {
  int64_t* counter;            // device scalar, += 1
  template <typename V>
  void fields(V& v) const {
    v("counter", counter);
  }
};

// *out = sqrt(sum of x^2 over x) (operand 0, float of `dtype`): x's L2 norm,
// the sum accumulated in double in an order that depends on the number of
// elements only, its root rounded once to f32. The root, not the sum: the
// sum overflows f32 from norms of 1.8e19, which f32 holds.
struct SumSquaresArgs {
  Layout<1> l;
  DType dtype;
  double* scratch;             // `blocks` doubles (an encore temporary); null when blocks == 0
  int blocks;                  // from OptimKernels::sum_of_squares_blocks; 0 without it
  float* out;                  // one f32 slot of the partial norms
  template <typename V>
  void fields(V& v) const {
    v("l", l); v("dtype", dtype); v("scratch", scratch); v("blocks", blocks); v("out", out);
  }
};

// norm = sqrt(sum(partial^2)) in double; scale = min(1, max_norm / (norm + 1e-6)), NaN kept.
struct ClipCoefArgs {
  const float* partial;        // [n] f32, contiguous
  int64_t n;
  float* norm;                 // device scalars, written
  float* scale;
  double max_norm;
  template <typename V>
  void fields(V& v) const {
    v("partial", partial); v("n", n); v("norm", norm); v("scale", scale); v("max_norm", max_norm);
  }
};

// x *= *scale in place (operand 0, float of `dtype`); writes nothing unless *scale < 1.
struct ScaleInPlaceArgs {
  Layout<1> l;
  DType dtype;
  const float* scale;          // device scalar
  template <typename V>
  void fields(V& v) const {
    v("l", l); v("dtype", dtype); v("scale", scale);
  }
};

struct OptimKernels {
  Kernel<SgdArgs> sgd;                    // "sgd"
  Kernel<AdamWArgs> adamw;                // "adamw", one parameter of any strides
  Kernel<AdamWManyArgs> adamw_many;       // "adamw", every parameter in one launch
  Kernel<IncrementArgs> increment;        // "increment"
  // (optional) How many partial sums (doubles of SumSquaresArgs::scratch) a
  // two-pass sum of squares of n elements writes; null: the kernel needs no
  // scratch (CPU). The host allocates the scratch and lists it in the writes.
  int (*sum_of_squares_blocks)(int64_t n);
  Kernel<SumSquaresArgs> sum_of_squares;  // "sum_of_squares"
  Kernel<ClipCoefArgs> clip_coefficient;  // "clip_coefficient", one thread's work
  Kernel<ScaleInPlaceArgs> scale_in_place;   // "scale_in_place"
};

// ---- cnn: 2-D convolution, pooling, batch normalization (NCHW) ----
//
// Every tensor is contiguous NCHW (the op makes it so), sizes are plain
// elements. Float tensors are f32, f16 or bf16 (`dtype`); computed in f32.

// A 2-D convolution's sizes, PyTorch's: input [n, c, h, w], weight
// [k, c / groups, kh, kw], output [n, k, oh, ow] with oh = (h + 2 pad_h -
// dil_h (kh - 1) - 1) / stride_h + 1 (and so for w).
struct ConvGeom {
  int64_t n, c, h, w;
  int64_t k, kh, kw;
  int64_t oh, ow;
  int64_t stride_h, stride_w, pad_h, pad_w, dil_h, dil_w, groups;
  template <typename V>
  void fields(V& v) const {
    v("n", n); v("c", c); v("h", h); v("w", w); v("k", k); v("kh", kh); v("kw", kw); v("oh", oh);
    v("ow", ow); v("stride_h", stride_h); v("stride_w", stride_w); v("pad_h", pad_h); v("pad_w", pad_w);
    v("dil_h", dil_h); v("dil_w", dil_w); v("groups", groups);
  }
};

enum class ConvPass : int32_t {
  kForward,           // y = conv(x, w) + b (b may be null)
  kBackwardData,      // x = the input's gradient from y (the output's) and w
  kBackwardWeights,   // w = the weight's gradient from x and y (the output's); b (or null) = the bias's
};

// One pass of a convolution (ConvPass says what each pointer holds and
// which are read or written). The host fills `plan` and the workspace from
// CnnKernels::plan before the launch; the same geometry always gets the same
// plan, so a captured launch compares equal to the eager one.
struct ConvArgs {
  ConvGeom g;
  ConvPass pass;
  DType dtype;                    // of every tensor: f32, or f16/bf16 where CnnKernels::half_operands
  int64_t plan;                   // the backend's cached plan for (g, pass, dtype, bias) (CPU: a oneDNN
                                  // primitive; CUDA: a cuDNN algorithm); -1 without CnnKernels::plan
  void* x;                        // [n, c, h, w]: input (kBackwardData: its gradient, written)
  void* w;                        // [k, c / groups, kh, kw]: weight (kBackwardWeights: its gradient, written)
  void* b;                        // [k] bias or its gradient, or null (kBackwardData: null)
  void* y;                        // [n, k, oh, ow]: output (written by kForward; otherwise its gradient)
  void* workspace;                // CnnKernels::plan's bytes of scratch; null when it asked for none
  int64_t workspace_bytes;
  int device;                     // the device's index (CUDA: whose cuDNN handle)
  template <typename V>
  void fields(V& v) const {
    v("g", g); v("pass", pass); v("dtype", dtype); v("plan", plan); v("x", x); v("w", w); v("b", b);
    v("y", y); v("workspace", workspace); v("workspace_bytes", workspace_bytes); v("device", device);
  }
};

// A 2-D pooling window over `planes` = n * c planes of [h, w] into [oh, ow]
// (PyTorch's sizes; ceil_mode is already in oh, ow).
struct PoolGeom {
  int64_t planes, h, w, oh, ow;
  int64_t kh, kw, stride_h, stride_w, pad_h, pad_w, dil_h, dil_w;
  template <typename V>
  void fields(V& v) const {
    v("planes", planes); v("h", h); v("w", w); v("oh", oh); v("ow", ow); v("kh", kh); v("kw", kw);
    v("stride_h", stride_h); v("stride_w", stride_w); v("pad_h", pad_h); v("pad_w", pad_w); v("dil_h", dil_h);
    v("dil_w", dil_w);
  }
};

// y[p, i, j] = the max of its window and indices[p, i, j] its flat position
// (ih * w + iw) within plane p, the first one on ties; a NaN is the maximum.
struct MaxPoolArgs {
  PoolGeom g;
  const void* x;                  // [planes, h, w]
  void* y;                        // [planes, oh, ow]
  int64_t* indices;               // [planes, oh, ow]
  DType dtype;
  template <typename V>
  void fields(V& v) const {
    v("g", g); v("x", x); v("y", y); v("indices", indices); v("dtype", dtype);
  }
};

// gx = 0, then gx[p, indices[p, i, j]] += gy[p, i, j] in row-major order of
// (i, j) within each plane (deterministic; f32 accumulation per plane).
struct MaxPoolBackwardArgs {
  PoolGeom g;
  const void* gy;                 // [planes, oh, ow]
  const int64_t* indices;         // [planes, oh, ow]
  void* gx;                       // [planes, h, w]
  DType dtype;
  template <typename V>
  void fields(V& v) const {
    v("g", g); v("gy", gy); v("indices", indices); v("gx", gx); v("dtype", dtype);
  }
};

enum class AvgPoolMode : int32_t {
  kExcludePad,   // avg_pool2d, count_include_pad=false: divide by the window's elements inside the input
  kIncludePad,   // avg_pool2d, count_include_pad=true: divide by the window clipped to the padded input
  kAdaptive,     // adaptive_avg_pool2d: rows floor(i h / oh) to ceil((i + 1) h / oh) (cols alike); g's
                 // kernel, stride and padding unused
};

// Forward: out [planes, oh, ow] = the windows' means of in [planes, h, w].
// Backward: out [planes, h, w] = the sum over the windows holding each
// element of in [planes, oh, ow] / the window's divisor (a gather: no scatter).
struct AvgPoolArgs {
  PoolGeom g;
  AvgPoolMode mode;
  const void* in;
  void* out;
  DType dtype;
  template <typename V>
  void fields(V& v) const {
    v("g", g); v("mode", mode); v("in", in); v("out", out); v("dtype", dtype);
  }
};

// Batch normalization of x [n, c, hw] per channel. training: the batch's mean
// and biased variance normalize x, and where running_mean / running_var are
// given they become (1 - f) running + f batch (the variance unbiased: times
// m / (m - 1), m = n hw), f = bn_update_factor(): momentum, or where
// num_batches_tracked is given 1 / *num_batches_tracked as the kernel runs
// (PyTorch's momentum=None, a cumulative average: the factor changes at
// every replay); eval: the running statistics normalize. saved f32 [2, c] =
// {mean, 1 / sqrt(var + eps)} as used.
struct BatchNormArgs {
  const void* x;                  // [n, c, hw]
  void* y;                        // [n, c, hw]
  const void* weight;             // [c] or null (1)
  const void* bias;               // [c] or null (0)
  void* running_mean;             // [c] or null; read and (training) written
  void* running_var;              // [c] or null (null exactly when running_mean is)
  float* saved;                   // [2, c]
  // 0-d i64 or null: the batches counted so far, this one included (read on
  // the device; null: momentum is the factor).
  const int64_t* num_batches_tracked;
  int64_t n, c, hw;
  bool training;
  float momentum, eps;            // momentum: unused (0) where num_batches_tracked is given
  DType dtype;                    // of x, y, weight, bias and the running statistics
  template <typename V>
  void fields(V& v) const {
    v("x", x); v("y", y); v("weight", weight); v("bias", bias); v("running_mean", running_mean);
    v("running_var", running_var); v("saved", saved); v("num_batches_tracked", num_batches_tracked);
    v("n", n); v("c", c); v("hw", hw); v("training", training); v("momentum", momentum); v("eps", eps);
    v("dtype", dtype);
  }
};

// The gradients of batch_norm from gy and the forward's x and saved. With
// xhat = (x - mean) invstd: gb = sum gy, gw = sum gy xhat (over n, hw);
// training: gx = weight invstd (gy - gb / m - xhat gw / m); eval: gx =
// weight invstd gy. Each of gx, gw, gb may be null (not wanted).
struct BatchNormBackwardArgs {
  const void* gy;                 // [n, c, hw]
  const void* x;
  const void* weight;             // [c] or null (1)
  const float* saved;             // [2, c], the forward's
  void* gx;                       // [n, c, hw]
  void* gw;                       // [c]
  void* gb;                       // [c]
  int64_t n, c, hw;
  bool training;
  DType dtype;
  template <typename V>
  void fields(V& v) const {
    v("gy", gy); v("x", x); v("weight", weight); v("saved", saved); v("gx", gx); v("gw", gw); v("gb", gb);
    v("n", n); v("c", c); v("hw", hw); v("training", training); v("dtype", dtype);
  }
};

struct CnnKernels {
  Kernel<ConvArgs> conv;                             // "conv2d", "conv2d_backward_data", "conv2d_backward_weights"
  // Whether `conv` takes f16/bf16 tensors itself (computing in f32). false
  // (CPU): the host converts them to f32 tensors and rounds the results once.
  bool half_operands;
  // (optional) Picks (or finds in its cache) the plan of args.g, args.pass,
  // args.dtype and whether args.b is set, stores its id in args.plan and
  // returns the bytes of scratch `conv` needs (the host allocates them into
  // args.workspace and lists them among the writes). The first call of a
  // geometry builds the plan (CPU: the oneDNN primitive; CUDA: the cuDNN
  // algorithm search); later calls, a captured step's included, only look it
  // up. Throws encore::Error naming the geometry where the library refuses it.
  int64_t (*plan)(ConvArgs& args);
  Kernel<MaxPoolArgs> max_pool;                      // "max_pool2d"
  Kernel<MaxPoolBackwardArgs> max_pool_backward;     // "max_pool2d_backward"
  Kernel<AvgPoolArgs> avg_pool;                      // "avg_pool2d", "adaptive_avg_pool2d"
  Kernel<AvgPoolArgs> avg_pool_backward;             // their backward
  Kernel<BatchNormArgs> batch_norm;                  // "batch_norm"
  Kernel<BatchNormBackwardArgs> batch_norm_backward; // "batch_norm_backward"
};

// ---- loss: binary cross-entropy with logits, negative log likelihood ----
// (the element formulas: src/backends/loss_math.h; mse_loss is composed of
// existing ops in src/ops/loss.cpp and has no kernel)

// Elementwise, without weight or reduction (the op composes those), in f32:
// kLoss: out = (1 - t) x + (1 + (pw - 1) t) softplus(-x);
// kGradInput: out = d/dx = (1 - t) - (1 + (pw - 1) t) sigmoid(-x);
// kGradTarget: out = d/dt = -x + (pw - 1) softplus(-x).
// Operands out, x, t, pw (broadcast to out); all of the float `dtype`; pw is
// read only when has_pos_weight (else pw = 1 and operand 3 is x again).
struct BceLogitsArgs {
  Layout<4> l;
  DType dtype;
  BceMode mode;
  bool has_pos_weight;
  template <typename V>
  void fields(V& v) const {
    v("l", l); v("dtype", dtype); v("mode", mode); v("has_pos_weight", has_pos_weight);
  }
};

// x: [outer, classes, inner] log-probabilities; target: [outer, inner] class
// ids (`index`); weight: [classes] or null (all 1). For m = o * inner + k:
// out[m] = -weight[t] * x[o, t, k] and out_weight[m] = weight[t], both 0 when
// t == ignore_index or t is outside [0, classes) (NOTE [ Index checks ]: the
// op refuses bad ids on the host in eager CPU steps; the kernels count them
// as ignored and report KernelError::kNllTarget). All contiguous, float
// tensors of `dtype`.
struct NllArgs {
  const void* x;
  const void* target;
  const void* weight;
  void* out;                      // [outer * inner]
  void* out_weight;               // [outer * inner]
  int64_t outer, classes, inner, ignore_index;
  DType dtype, index;
  uint32_t* errors;               // the device's error word (NnKernels::error_word) or null (CPU)
  template <typename V>
  void fields(V& v) const {
    v("x", x); v("target", target); v("weight", weight); v("out", out); v("out_weight", out_weight);
    v("outer", outer); v("classes", classes); v("inner", inner); v("ignore_index", ignore_index);
    v("dtype", dtype); v("index", index); v("errors", errors);
  }
};

// gx [outer, classes, inner] = 0 except gx[o, t, k] = -weight[t] * g[m] on
// the counted positions of NllArgs.
struct NllBackwardArgs {
  const void* g;                  // [outer * inner]
  const void* target;
  const void* weight;             // or null
  void* gx;
  int64_t outer, classes, inner, ignore_index;
  DType dtype, index;
  template <typename V>
  void fields(V& v) const {
    v("g", g); v("target", target); v("weight", weight); v("gx", gx); v("outer", outer);
    v("classes", classes); v("inner", inner); v("ignore_index", ignore_index); v("dtype", dtype);
    v("index", index);
  }
};

struct LossKernels {
  Kernel<BceLogitsArgs> bce_logits;          // the loss and both derivatives (BceLogitsArgs::mode)
  Kernel<NllArgs> nll;                       // the picked, weighted values and their weights
  Kernel<NllBackwardArgs> nll_backward;      // the scatter of -weight * g
};

// ---- index: gather, scatter_add, topk, multinomial ----

// NOTE [ Index geometry ]: an index tensor of shape `shape` (ndim dims, `dim`
// the indexed one) walked together with two data tensors: `iter`, addressed
// at the same multi-index p as the index, and `addr`, addressed at p with
// p[dim] replaced by index[p]. Strides in elements, any (0 for an expanded
// index). An index outside [0, addr_dim_size) (negative ones are not
// wrapped) reads a zero (gather) or is skipped (scatter_add), never
// touching memory out of bounds, and is reported (KernelError::kGatherIndex,
// kScatterIndex; NOTE [ Index checks ]) through `errors`: the device's
// error word (NnKernels::error_word), or null where the kernels call
// report_kernel_error() (CPU).
struct IndexGeom {
  int32_t ndim, dim;
  int64_t numel;
  int64_t addr_dim_size;
  int64_t shape[kLayoutMaxDims];
  int64_t index_stride[kLayoutMaxDims], iter_stride[kLayoutMaxDims], addr_stride[kLayoutMaxDims];
  template <typename V>
  void fields(V& v) const {
    v("ndim", ndim); v("dim", dim); v("numel", numel); v("addr_dim_size", addr_dim_size);
    v("shape", shape, ndim); v("index_stride", index_stride, ndim); v("iter_stride", iter_stride, ndim);
    v("addr_stride", addr_stride, ndim);
  }
};

// out (iter) [p] = in (addr) [p with p[dim] = index[p]]; any dtype (moved
// as bytes). Index i32 or i64.
struct GatherArgs {
  IndexGeom g;
  const void* index;
  void* out;
  const void* in;
  DType dtype, index_dtype;
  uint32_t* errors;
  template <typename V>
  void fields(V& v) const {
    v("g", g); v("index", index); v("out", out); v("in", in); v("dtype", dtype); v("index_dtype", index_dtype);
    v("errors", errors);
  }
};

// out (addr) [p with p[dim] = index[p]] += src (iter) [p], in place, for
// every p; the adds into one element happen in increasing p[dim] order of
// one line (all other coordinates fixed), one line at a time per element,
// so the result is deterministic and the same on every backend. Float
// dtypes add in f32 and round to `dtype` after each add; integers wrap.
struct ScatterAddArgs {
  IndexGeom g;
  const void* index;
  const void* src;
  void* out;
  DType dtype, index_dtype;   // dtype: not bool
  uint32_t* errors;
  template <typename V>
  void fields(V& v) const {
    v("g", g); v("index", index); v("src", src); v("out", out); v("dtype", dtype); v("index_dtype", index_dtype);
    v("errors", errors);
  }
};

// For each of outer x inner lines of x [outer, n, inner] (contiguous): the k
// largest (or smallest) elements, in order (largest: descending), ties to
// the lower index, NaN counted larger than every number (largest picks
// NaNs first, smallest last, as PyTorch does); values [outer, k, inner] of
// `dtype` (not bool), indices [outer, k, inner] i64. k <= n.
struct TopkArgs {
  const void* x;
  void* values;
  int64_t* indices;
  int64_t outer, n, inner, k;
  bool largest;
  DType dtype;
  template <typename V>
  void fields(V& v) const {
    v("x", x); v("values", values); v("indices", indices); v("outer", outer); v("n", n); v("inner", inner);
    v("k", k); v("largest", largest); v("dtype", dtype);
  }
};

// out [rows, samples] (i64) = categories drawn from each row of probs
// [rows, classes] (float `dtype`, contiguous; non-negative weights, not
// necessarily normalised) by inverse CDF over the running sum in f64
// (backend::multinomial_category, NOTE [ Multinomial sums in double ] in
// nn_formulas.h): draw s of row r uses uniform(philox(offset + r * samples
// + s, seed) word 0) (backend::multinomial_uniform). Without replacement a drawn category's
// weight counts as 0 for the row's later draws (samples <= classes). A row
// that is no distribution (a weight negative, NaN or infinite, none
// positive, or fewer positive than samples without replacement) is
// reported (KernelError::kMultinomialProbs; the op refuses it on the host
// in eager CPU steps) and draws deterministically from what is left (its
// last positive category, else 0). Then state[1] += rows * samples, on the
// device.
struct MultinomialArgs {
  const void* probs;
  int64_t* out;
  int64_t* state;                 // i64 [2] {seed, offset}
  int64_t rows, classes, samples;
  bool replacement;
  DType dtype;
  uint32_t* errors;
  template <typename V>
  void fields(V& v) const {
    v("probs", probs); v("out", out); v("state", state); v("rows", rows); v("classes", classes);
    v("samples", samples); v("replacement", replacement); v("dtype", dtype); v("errors", errors);
  }
};

struct IndexKernels {
  Kernel<GatherArgs> gather;              // gather and index_select (an expanded index)
  Kernel<ScatterAddArgs> scatter_add;     // scatter_add, and the backward of gather, index_select and topk
  Kernel<TopkArgs> topk;                  // the k extreme values of each line and their indices
  Kernel<MultinomialArgs> multinomial;    // the draws and the offset's advance
};

// ---- the table ----

// One pointer per kernel family; every entry of every family is required
// unless its comment says "(optional)".
struct KernelTable {
  const char* name;                // "cpu", "cuda"
  const BinaryKernels* binary;     // binary.cpp / binary.cu
  const UnaryKernels* unary;       // unary.cpp / unary.cu
  const SelectKernels* select;     // select.cpp / select.cu
  const CopyKernels* copy;         // copy.cpp / copy.cu
  const ReduceKernels* reduce;     // reduce.cpp / reduce.cu
  const NnKernels* nn;             // nn.cpp / nn.cu
  const GemmKernels* gemm;         // gemm.cpp / gemm.cu
  const OptimKernels* optim;       // optim.cpp / optim.cu
  const CnnKernels* cnn;           // cnn.cpp / cnn.cu (CUDA's convolutions: cudnn.cpp)
  const LossKernels* loss;         // loss.cpp / loss.cu
  const IndexKernels* index;       // index.cpp / index.cu
  // (optional; null on the CPU) Copies between host memory and a device of
  // this backend: dst and src dense, same dtype and element count, exactly
  // one of them on the CPU. Host to device may return once the data is
  // staged (the host source may be reused at once); device to host returns
  // when the data is in host memory. Launched through the device's Stream.
  void (*copy_host_device)(const Tensor& dst, const Tensor& src);
};

}  // namespace encore::backend
