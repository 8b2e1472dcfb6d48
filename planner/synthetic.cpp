// Generated problems; see synthetic.h.
#include "planner/synthetic.h"

#include <algorithm>
#include <cstdint>
#include <vector>

#include "absl/strings/str_cat.h"
#include "planner/internal.h"

namespace encore::planner {
namespace {

constexpr int64_t kKiB = 1024, kMiB = 1024 * 1024;

// splitmix64: tiny, fast, and the same on every platform.
class Rng {
 public:
  explicit Rng(uint64_t seed) : state_(seed) {}
  uint64_t next() {
    uint64_t z = (state_ += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  int64_t uniform(int64_t lo, int64_t hi) { return lo + static_cast<int64_t>(next() % uint64_t(hi - lo + 1)); }
  bool chance(int percent) { return uniform(1, 100) <= percent; }

 private:
  uint64_t state_;
};

class TraceBuilder {
 public:
  TraceBuilder(const TraceOptions& options) : options_(options), rng_(options.seed) {}

  int add(int64_t size, int64_t lower, int64_t upper) {
    size = std::max(internal::align_up(size, options_.alignment), options_.alignment);
    buffers_.push_back({absl::StrCat("b", buffers_.size()), size, lower, upper, options_.alignment});
    return static_cast<int>(buffers_.size()) - 1;
  }
  // A temporary: mostly small, sometimes activation-sized, rarely large.
  int64_t temporary_size(int64_t activation) {
    if (rng_.chance(5)) return activation * rng_.uniform(2, 8);
    if (rng_.chance(22)) return activation / rng_.uniform(1, 4);
    return rng_.uniform(1, 64) * kKiB / rng_.uniform(1, 16);
  }
  void add_temporaries(int count, int64_t t, int64_t activation) {
    for (int k = 0; k < count; ++k) add(temporary_size(activation), t, t + rng_.uniform(1, 3));
  }
  Rng& rng() { return rng_; }
  std::vector<Buffer>& buffers() { return buffers_; }

 private:
  const TraceOptions& options_;
  Rng rng_;
  std::vector<Buffer> buffers_;
};

// Forward, then backward in reverse layer order, then the optimizer.
void build_step(TraceBuilder& b, int layers) {
  std::vector<int64_t> activation(layers);
  std::vector<std::vector<int>> saved(layers);
  int64_t t = 0;
  for (int l = 0; l < layers; ++l) {
    activation[l] = b.rng().uniform(1, 16) * 128 * kKiB;
    const int kernels = static_cast<int>(b.rng().uniform(2, 4));
    for (int k = 0; k < kernels; ++k, ++t) {
      if (k == 0 || b.rng().chance(30)) saved[l].push_back(b.add(activation[l] * b.rng().uniform(1, 3), t, t + 1));
      b.add_temporaries(static_cast<int>(b.rng().uniform(0, 2)), t, activation[l]);
    }
  }
  int grad = b.add(activation[layers - 1], t, t + 1);
  for (int l = layers - 1; l >= 0; --l) {
    const int kernels = static_cast<int>(b.rng().uniform(2, 4));
    const int next_grad = b.add(activation[l], t, t + kernels + 1);  // handed to layer l - 1
    for (int k = 0; k < kernels; ++k, ++t) b.add_temporaries(static_cast<int>(b.rng().uniform(0, 2)), t, activation[l]);
    b.buffers()[grad].upper = t;
    for (int index : saved[l]) b.buffers()[index].upper = t - b.rng().uniform(0, kernels - 1);
    grad = next_grad;
  }
  b.buffers()[grad].upper = t + 1;
  b.add_temporaries(8, t + 1, 64 * kKiB);  // optimizer scratch
}

// Irregular small sizes: a few hundred bytes to a few hundred KiB.
int64_t small_size(Rng& rng) { return rng.uniform(1, 4096) * rng.uniform(1, 64); }

// One forward and backward pass of `layers` transformer blocks; `grads`
// holds each layer's weight gradients, created in the first pass.
void transformer_pass(TraceBuilder& b, int layers, int64_t& t, std::vector<std::vector<int>>& grads) {
  Rng& rng = b.rng();
  std::vector<std::vector<int>> saved(layers);
  std::vector<char> checkpointed(layers);
  const int64_t hidden = rng.uniform(2, 8) * 256 * kKiB, scores = hidden * rng.uniform(1, 3);
  for (int l = 0; l < layers; ++l) {  // forward
    checkpointed[l] = rng.chance(50);  // keeps only its input; the rest is recomputed in backward
    for (int64_t size : {hidden, hidden, hidden, scores, scores / 2, hidden, 4 * hidden, 4 * hidden}) {
      const int64_t jitter = size / 16 * rng.uniform(0, 7);
      const int index = b.add(size + jitter, t, t + 1);
      if (checkpointed[l] && !saved[l].empty()) b.buffers()[index].upper = t + rng.uniform(1, 3);
      else saved[l].push_back(index);
      for (int k = static_cast<int>(rng.uniform(0, 3)); k > 0; --k) b.add(small_size(rng), t, t + rng.uniform(1, 4));
      ++t;
    }
  }
  int grad_in = b.add(hidden, t, t + 1);
  for (int l = layers - 1; l >= 0; --l) {  // backward, freeing what layer l saved
    if (grads[l].empty()) {
      for (int64_t size : {hidden / 4, hidden / 4, hidden})  // weights of qkv, out, MLP
        grads[l].push_back(b.add(size * rng.uniform(1, 3), t, t + 1));
    }
    if (checkpointed[l]) {  // recompute the layer's forward, saving everything this time
      for (int64_t size : {hidden, hidden, hidden, scores, scores / 2, hidden, 4 * hidden, 4 * hidden}) {
        saved[l].push_back(b.add(size + size / 16 * rng.uniform(0, 7), t, t + 1));
        ++t;
      }
    }
    for (size_t k = saved[l].size(); k-- > 0;) {
      b.buffers()[saved[l][k]].upper = t + 1;
      b.add(std::max(b.buffers()[saved[l][k]].size / rng.uniform(1, 4), int64_t{1}), t, t + 1);  // its gradient
      for (int j = static_cast<int>(rng.uniform(0, 3)); j > 0; --j) b.add(small_size(rng), t, t + rng.uniform(1, 3));
      ++t;
    }
    b.buffers()[grad_in].upper = t;
    grad_in = b.add(hidden, t - 1, t + 1);
  }
  b.buffers()[grad_in].upper = t + 1;
}

// Micro-batches of transformer passes, then the optimizer reading every
// weight gradient.
void build_transformer_step(TraceBuilder& b, int buffers_per_pass, int micro_batches) {
  const int layers = std::max(1, buffers_per_pass / 40);
  std::vector<std::vector<int>> grads(layers);
  int64_t t = 0;
  for (int m = 0; m < micro_batches; ++m) transformer_pass(b, layers, t, grads);
  for (const std::vector<int>& layer : grads) {
    for (int index : layer) {
      b.buffers()[index].upper = t + 2;
      b.add(b.buffers()[index].size, t + 1, t + 2);  // optimizer scratch
    }
  }
}

}  // namespace

std::vector<Buffer> training_step_trace(const TraceOptions& options) {
  TraceBuilder builder(options);
  if (options.style == TraceStyle::kTransformer) {
    build_transformer_step(builder, options.num_buffers / std::max(options.micro_batches, 1),
                           std::max(options.micro_batches, 1));
  } else {
    build_step(builder, std::max(1, options.num_buffers / 10));
  }
  std::vector<Buffer>& buffers = builder.buffers();
  // Trim or pad with short temporaries to exactly num_buffers.
  while (static_cast<int>(buffers.size()) > options.num_buffers) buffers.pop_back();
  int64_t horizon = 1;
  for (const Buffer& buffer : buffers) horizon = std::max(horizon, buffer.upper);
  while (static_cast<int>(buffers.size()) < options.num_buffers) {
    const int64_t t = builder.rng().uniform(0, horizon - 1);
    builder.add(builder.temporary_size(256 * kKiB), t, t + 1);
  }
  return std::move(buffers);
}

namespace {

// A rectangle of the packing in grid units: time [t0, t1) x bytes [a0, a1).
struct Piece {
  int64_t t0, t1, a0, a1;
  int64_t area() const { return (t1 - t0) * (a1 - a0); }
};

// Cuts a piece at a random grid line, until there are `count` pieces or none
// can be cut. kSquarish: the biggest of four random pieces, across time with
// probability width / (width + height); kLargestFirst: the biggest piece of
// all, direction a fair coin (NOTE [ Largest-first cuts ] in synthetic.h).
std::vector<Piece> guillotine(int64_t cells, int count, ChallengeCuts cuts, Rng& rng) {
  const bool by_shape = cuts == ChallengeCuts::kSquarish;
  std::vector<Piece> pieces = {{0, cells, 0, cells}};
  while (static_cast<int>(pieces.size()) < count) {
    size_t pick = 0;
    if (by_shape) {
      pick = rng.next() % pieces.size();
      for (int k = 0; k < 3; ++k) {  // the largest of four draws
        const size_t other = rng.next() % pieces.size();
        if (pieces[other].area() > pieces[pick].area()) pick = other;
      }
    } else {
      for (size_t other = 1; other < pieces.size(); ++other) {
        if (pieces[other].area() > pieces[pick].area()) pick = other;
      }
    }
    Piece& p = pieces[pick];
    const int64_t width = p.t1 - p.t0, height = p.a1 - p.a0;
    if (width < 2 && height < 2) break;  // the largest of the draws (or of all) is one cell
    const bool across_time =
        height < 2 || (width >= 2 && (by_shape ? rng.uniform(1, width + height) <= width : rng.chance(50)));
    Piece cut = p;
    if (across_time) {
      const int64_t at = p.t0 + rng.uniform(1, width - 1);
      cut.t0 = at;
      p.t1 = at;
    } else {
      const int64_t at = p.a0 + rng.uniform(1, height - 1);
      cut.a0 = at;
      p.a1 = at;
    }
    pieces.push_back(cut);
  }
  return pieces;
}

}  // namespace

std::vector<Buffer> challenging_problem(const ChallengeOptions& options) {
  constexpr int64_t kGrid = 1024;
  Rng rng(options.seed);
  const int64_t cells = std::max<int64_t>(options.capacity / kGrid, 1);
  const int keep = std::max(options.num_buffers, 1);
  const int cut = static_cast<int>(int64_t{keep} * 100 / std::max(100 - options.drop_percent, 1));
  std::vector<Piece> pieces = guillotine(cells, cut, options.cuts, rng);
  // Drop pieces at random until `keep` are left (Fisher-Yates, then trim).
  for (size_t i = pieces.size(); i > 1; --i) std::swap(pieces[i - 1], pieces[rng.next() % i]);
  if (static_cast<int>(pieces.size()) > keep) pieces.resize(keep);
  std::vector<Buffer> buffers;
  buffers.reserve(pieces.size());
  for (Piece& p : pieces) {
    if (p.t1 - p.t0 >= 2 && rng.chance(options.shrink_percent)) {
      const int64_t width = p.t1 - p.t0;
      const int64_t cut_front = rng.uniform(0, width / 2), cut_back = rng.uniform(0, (width - cut_front) / 2);
      p.t0 += cut_front;
      p.t1 -= cut_back;
    }
    buffers.push_back({absl::StrCat("b", buffers.size()), (p.a1 - p.a0) * kGrid, p.t0 * kGrid, p.t1 * kGrid});
  }
  return buffers;
}

std::vector<Buffer> minimalloc_like_problem(uint64_t seed) {
  Rng rng(seed * 0x9E3779B97F4A7C15ull + 1);
  const int num_buffers = static_cast<int>(rng.uniform(150, 450));
  const int drop_percent = static_cast<int>(rng.uniform(5, 20));
  return challenging_problem({.num_buffers = num_buffers,
                              .seed = seed,
                              .drop_percent = drop_percent,
                              .shrink_percent = 0,
                              .cuts = ChallengeCuts::kLargestFirst});
}

std::vector<Buffer> random_buffers(int num_buffers, int64_t max_size, int64_t horizon, bool aligned,
                                   uint64_t seed) {
  Rng rng(seed);
  std::vector<Buffer> buffers;
  for (int i = 0; i < num_buffers; ++i) {
    const int64_t lower = rng.uniform(0, horizon - 1);
    const int64_t upper = rng.uniform(lower + 1, horizon);
    const int64_t alignment = aligned ? int64_t{1} << rng.uniform(0, 6) : 1;
    buffers.push_back({absl::StrCat("r", i), rng.uniform(1, max_size), lower, upper, alignment});
  }
  return buffers;
}

}  // namespace encore::planner
