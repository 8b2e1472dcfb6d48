// Bucketing variable-length batches: pad a [B, T] batch of token ids and
// targets up to one of a few lengths, so that a graphed step
// (include/encore/graphed.h) sees a few signatures instead of one per
// length, with padded targets set to ignore_index so that the loss (the
// mean over counted positions, cross_entropy's ignore_index) is the
// unpadded one. With a causal model (nn::Gpt) the real positions never
// attend to the padding, so the loss and gradients equal the unpadded ones
// up to float rounding (a longer GEMM may sum in another order).
//
//   encore::nn::Padded p = encore::nn::pad_to_bucket(ids, targets);   // T = 5 -> 8 (powers of two)
//   std::vector<encore::Tensor> out = train({p.ids, p.targets});     // one graph per bucket
//   encore::nn::pad_to_bucket(ids, targets, {.buckets = {16, 48, 64}});   // the user's lengths
//   encore::nn::pad_to_bucket(ids, targets, {.max_length = 48});          // T = 40 -> 48, not 64
#pragma once

#include <cstdint>
#include <vector>

#include "encore/tensor.h"

namespace encore::nn {

struct BucketOptions {
  std::vector<int64_t> buckets;   // ascending lengths; empty: powers of two
  // With the powers of two: the longest length a batch may have (a model's
  // block size), itself the last bucket (48: ..., 16, 32, 48). 0: none.
  int64_t max_length = 0;
  int64_t pad_id = 0;             // the token id of padded positions
  int64_t ignore_index = -100;    // the target of padded positions (cross_entropy's default)
};

struct Padded {
  Tensor ids, targets;   // [B, bucket], same dtypes and device as given
  int64_t length = 0;    // T before padding
  int64_t bucket = 0;    // T after
};

// The smallest bucket >= length (the next power of two by default, at most
// max_length). InvalidArgument when length < 1 or above the largest bucket
// (or max_length), when the buckets are not ascending positive lengths, or
// when max_length is set beside buckets of the caller's own or negative.
int64_t bucket_for(int64_t length, const BucketOptions& options = {});

// ids and targets [B, T] (i32 or i64, one device) padded along dim 1 to
// bucket_for(T): ids with pad_id, targets with ignore_index. A batch already
// at its bucket is returned as it is (the same tensors).
Padded pad_to_bucket(const Tensor& ids, const Tensor& targets, const BucketOptions& options = {});

// A next-token batch from sequences of varying length (lines of text, say):
// row b's ids are seqs[b][0 .. n-2] and its targets seqs[b][1 .. n-1], both
// padded (pad_id, ignore_index) to the bucket of the longest row's n - 1.
// Returns [B, bucket] i64 tensors on `device`; length is the longest row's
// n - 1. InvalidArgument for an empty batch or a sequence of fewer than 2
// ids (nothing to predict).
//
//   std::vector<std::vector<int64_t>> lines = {{5, 1, 7}, {2, 9, 9, 4, 3}};
//   encore::nn::Padded p = encore::nn::pad_sequences(lines);   // [2, 4]: lengths 2 and 4 -> bucket 4
Padded pad_sequences(const std::vector<std::vector<int64_t>>& seqs, const BucketOptions& options = {},
                     Device device = kCPU);

}  // namespace encore::nn
