#include "encore/bucketing.h"

#include <algorithm>

#include "encore/autograd.h"
#include "encore/error.h"
#include "encore/ops.h"
#include "absl/strings/str_format.h"

namespace encore::nn {

int64_t bucket_for(int64_t length, const BucketOptions& options) {
  ENCORE_CHECK(length >= 1, "bucket_for: length %d; a batch has at least one position", length);
  ENCORE_CHECK(options.max_length >= 0 && (options.max_length == 0 || options.buckets.empty()),
               "bucket_for: max_length %d caps the powers of two; with buckets of your own, make the largest "
               "your longest length instead",
               options.max_length);
  if (options.buckets.empty()) {
    ENCORE_CHECK(options.max_length == 0 || length <= options.max_length,
                 "bucket_for: length %d is above max_length %d", length, options.max_length);
    ENCORE_CHECK(length <= (int64_t{1} << 62), "bucket_for: length %d has no power of two above it", length);
    int64_t b = 1;
    while (b < length) b *= 2;
    return options.max_length > 0 ? std::min(b, options.max_length) : b;
  }
  int64_t previous = 0;
  for (int64_t b : options.buckets) {
    ENCORE_CHECK(b > previous, "bucket_for: buckets must be ascending positive lengths, got %d after %d", b,
                 previous);
    previous = b;
  }
  for (int64_t b : options.buckets) {
    if (b >= length) return b;
  }
  throw_error(absl::StatusCode::kInvalidArgument,
              absl::StrFormat("bucket_for: length %d is above the largest bucket %d", length, previous));
}

Padded pad_to_bucket(const Tensor& ids, const Tensor& targets, const BucketOptions& options) {
  ENCORE_CHECK(ids.dim() == 2 && targets.shape() == ids.shape(),
               "pad_to_bucket: ids %s and targets %s must both be [B, T]", shape_str(ids.shape()),
               shape_str(targets.shape()));
  auto is_index = [](DType t) { return t == kInt32 || t == kInt64; };   // what embedding and cross_entropy take
  ENCORE_CHECK(is_index(ids.dtype()) && is_index(targets.dtype()) && ids.device() == targets.device(),
               "pad_to_bucket: ids (%s on %s) and targets (%s on %s) must be i32 or i64 tensors on one device",
               dtype_name(ids.dtype()), ids.device().str(), dtype_name(targets.dtype()), targets.device().str());
  const int64_t B = ids.size(0), T = ids.size(1);
  const int64_t bucket = bucket_for(T, options);
  if (bucket == T) return {ids, targets, T, T};
  NoGradGuard no_grad;
  const Tensor pad_ids = full({B, bucket - T}, static_cast<double>(options.pad_id), ids.dtype(), ids.device());
  const Tensor pad_targets =
      full({B, bucket - T}, static_cast<double>(options.ignore_index), targets.dtype(), targets.device());
  return {concat({ids, pad_ids}, 1), concat({targets, pad_targets}, 1), T, bucket};
}

Padded pad_sequences(const std::vector<std::vector<int64_t>>& seqs, const BucketOptions& options, Device device) {
  ENCORE_CHECK(!seqs.empty(), "pad_sequences: an empty batch");
  int64_t longest = 0;
  for (size_t b = 0; b < seqs.size(); ++b) {
    ENCORE_CHECK(seqs[b].size() >= 2, "pad_sequences: sequence %d has %d ids; at least 2 make one prediction", b,
                 seqs[b].size());
    longest = std::max<int64_t>(longest, static_cast<int64_t>(seqs[b].size()) - 1);
  }
  const int64_t B = static_cast<int64_t>(seqs.size()), T = bucket_for(longest, options);
  std::vector<int64_t> ids(B * T, options.pad_id), targets(B * T, options.ignore_index);
  for (int64_t b = 0; b < B; ++b) {
    const std::vector<int64_t>& s = seqs[b];
    for (size_t t = 0; t + 1 < s.size(); ++t) {
      ids[b * T + t] = s[t];
      targets[b * T + t] = s[t + 1];
    }
  }
  return {from_vector<int64_t>(ids, {B, T}, device), from_vector<int64_t>(targets, {B, T}, device), longest, T};
}

}  // namespace encore::nn
