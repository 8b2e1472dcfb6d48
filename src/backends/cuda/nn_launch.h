// Launchers of the CUDA nn kernels (nn.cu) and their argument structs, in
// plain types so that both nn.cu (nvcc) and nn.cpp (host C++) include them.
// nn.cpp fills an Args struct from tensors and hands it to
// current_stream(device).launch<&nn_launch::softmax>(...); the launcher
// enqueues the kernels on active_stream() and never synchronizes, allocates
// or reads device memory on the host (the launches get captured).
//
//   nn_launch::SoftmaxArgs a{x_ptr, y_ptr, outer, n, inner, nn_launch::Float::kF32, /*log=*/false};
//   current_stream(dev).launch<&nn_launch::softmax>("softmax", a, {x.storage()}, {y.storage()});
//
// Sizes are in elements. Every pointer is device memory of one contiguous
// tensor; optional ones may be null where noted. Contracts: src/backends/cpu/nn.h.
#pragma once

#include <cstddef>
#include <cstdint>

namespace encore::cuda::nn_launch {

// Storage type of the float tensors of a launch (all compute in f32).
enum class Float : uint8_t { kF32, kF16, kBF16 };
// Type of a class-id / index tensor.
enum class Index : uint8_t { kI32, kI64 };

// x, y: [outer, n, inner].
struct SoftmaxArgs { const void* x; void* y; int64_t outer, n, inner; Float dtype; bool log; };
void softmax(const SoftmaxArgs& a);

// g (grad_out), y (forward output), gx (grad_in): [outer, n, inner].
struct SoftmaxBackwardArgs { const void* g; const void* y; void* gx; int64_t outer, n, inner; Float dtype; bool log; };
void softmax_backward(const SoftmaxBackwardArgs& a);

// x [rows, classes], target [rows], loss 0-d, stats f32 [rows + 1]. Two
// kernels: logsumexp per row, then the mean in one block in a fixed order.
// errors: the device's kernel error word (cuda::error_word); a target that
// is neither in [0, classes) nor ignore_index sets error_bit there.
struct CrossEntropyArgs {
  const void* x; const void* target; void* loss; float* stats;
  int64_t rows, classes, ignore_index; Float dtype; Index index;
  uint32_t* errors; uint32_t error_bit;
};
void cross_entropy(const CrossEntropyArgs& a);

// grad_loss: 0-d, read by the kernel (a replay sees this step's value).
struct CrossEntropyBackwardArgs {
  const void* x; const void* target; const float* stats; const void* grad_loss; void* gx;
  int64_t rows, classes, ignore_index; Float dtype; Index index;
};
void cross_entropy_backward(const CrossEntropyBackwardArgs& a);

// x, y [rows, cols]; w, b [cols] or null; stats f32 [rows, 2] = {mean, rstd}.
struct LayerNormArgs { const void* x; const void* w; const void* b; void* y; float* stats; int64_t rows, cols; float eps; Float dtype; };
void layer_norm(const LayerNormArgs& a);

// NOTE [ Deterministic layer_norm sums ]: dweight/dbias are column sums over
// rows. Rows are cut into `chunks` fixed chunks of `rows_per_chunk` (a
// function of rows only); one kernel writes each chunk's partial sums to
// partial f32 [chunks, 2, cols] = {dw, db}, a second adds the chunks in
// chunk order. No float atomics: replays are bit-identical.
inline constexpr int64_t kLayerNormMaxChunks = 256;
inline int64_t layer_norm_rows_per_chunk(int64_t rows) {
  const int64_t r = (rows + kLayerNormMaxChunks - 1) / kLayerNormMaxChunks;
  return r < 1 ? 1 : r;
}
// dx, dw, db may each be null (not wanted); partial is null when dw and db both are.
struct LayerNormBackwardArgs {
  const void* g; const void* x; const void* w; const float* stats;
  void* dx; void* dw; void* db; float* partial;
  int64_t rows, cols, chunks, rows_per_chunk; Float dtype;
};
void layer_norm_backward(const LayerNormBackwardArgs& a);

// w [vocab, dim], idx [n], out [n, dim]: a byte copy of rows, so any dtype
// works (elem_bytes 1, 2, 4 or 8). Bad indices give zero rows.
// errors: as for CrossEntropyArgs; an index outside [0, vocab) sets error_bit.
struct EmbeddingArgs {
  const void* w; const void* idx; void* out; int64_t n, vocab, dim; int elem_bytes; Index index;
  uint32_t* errors; uint32_t error_bit;
};
void embedding(const EmbeddingArgs& a);

// NOTE [ Deterministic embedding backward ]: a stable radix sort (CUB) of
// (index, position) pairs groups the positions of each row in increasing
// order; then one thread per grad_weight element adds its row's gradients
// in that order (the CPU order, rounded in the storage type at each add as
// the CPU does). No float atomics; cost O(n + vocab) for the sort and
// O((n + vocab) * dim) for the sums. Scratch (all from empty() in nn.cpp):
// keys, keys_sorted (as u32), pos, pos_sorted: i32 [n]; row_start: i32 [vocab + 1];
// sort_temp: embedding_sort_temp_bytes(n, end_bit) bytes.
struct EmbeddingBackwardArgs {
  const void* g; const void* idx; void* gw;
  uint32_t* keys; uint32_t* keys_sorted; int32_t* pos; int32_t* pos_sorted; int32_t* row_start;
  void* sort_temp; size_t sort_temp_bytes;
  int64_t n, vocab, dim; int end_bit; Float dtype; Index index;
};
void embedding_backward(const EmbeddingBackwardArgs& a);
// Bits of the sort keys (0..vocab, vocab = bad index) and CUB's scratch size
// in bytes for n keys; host-only queries (no device work).
int embedding_sort_bits(int64_t vocab);
size_t embedding_sort_temp_bytes(int64_t n, int end_bit);

// state: i64 [2] {seed, offset} in device memory, read by the kernel; a
// second one-thread kernel then advances offset by n. mask may be null.
struct DropoutArgs { const void* x; void* y; bool* mask; int64_t* state; int64_t n; float p, scale; Float dtype; };
void dropout(const DropoutArgs& a);

struct DropoutBackwardArgs { const void* g; const bool* mask; void* gx; int64_t n; float scale; Float dtype; };
void dropout_backward(const DropoutBackwardArgs& a);

}  // namespace encore::cuda::nn_launch
