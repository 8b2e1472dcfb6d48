// Shared by the data-parallel tests: a small MLP training rig (or one with
// a batch norm, whose running statistics each rank updates from its own
// rows) whose global batch i is the same on every rank (seeded by i), each
// rank training on its own rows of it, and bit fingerprints of parameters,
// optimizer state and buffers to compare ranks.
//
//   auto rig = DdpRig::make(pg, /*local_batch=*/4, /*world=*/2, /*rank=*/pg->rank());
//   rig->fill(step);  rig->step();   // eager: zero_grad, forward, backward (all-reduce), AdamW
//   uint64_t h = rig->state_hash();  // the same on every rank
#pragma once

#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "capture/graph_impl.h"
#include "encore/dist.h"
#include "encore/encore.h"
#include "tests/test_util.h"

namespace encore::testing {

inline constexpr int64_t kIn = 12, kHidden = 16, kClasses = 5;

// The process group of this test process (the world mpirun started, or a
// world of one), made at the first call with a 60 s collective timeout.
inline std::shared_ptr<dist::ProcessGroup> world() {
  static std::shared_ptr<dist::ProcessGroup> g = [] {
    absl::StatusOr<std::shared_ptr<dist::ProcessGroup>> pg = dist::ProcessGroup::create({.timeout_s = 60});
    if (!pg.ok()) throw Error(pg.status());
    return *pg;
  }();
  return g;
}

// FNV-1a over the bits of every tensor (float32 or int64 as stored).
inline uint64_t bits_hash(const std::vector<Tensor>& ts) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (const Tensor& t : ts) {
    Tensor c = t.to(kCPU).contiguous();
    const auto* p = static_cast<const unsigned char*>(c.data_ptr());
    const int64_t n = c.numel() * dtype_size(c.dtype());
    for (int64_t i = 0; i < n; ++i) h = (h ^ p[i]) * 0x100000001b3ull;
  }
  return h;
}

// The rows [lo, hi) of global batch `i` (inputs and class ids).
inline Tensor global_x(int i, int64_t rows) { return random_tensor({rows, kIn}, 1000 + i); }
inline std::vector<int64_t> global_y(int i, int64_t rows) {
  std::vector<int64_t> y(rows);
  for (int64_t r = 0; r < rows; ++r) y[r] = (r * 7 + i * 3) % kClasses;
  return y;
}

struct DdpRig {
  std::unique_ptr<nn::Module> model;   // nn::Mlp, or Linear-BatchNorm1d-ReLU-Linear
  std::unique_ptr<dist::DistributedDataParallel> ddp;   // null: one process, no wrapper
  std::unique_ptr<optim::AdamW> opt;
  Tensor x, y;
  int64_t local_batch = 4;
  int world = 1, rank = 0;

  // seed: the model's initialisation (differs per rank on purpose in tests:
  // the wrapper must broadcast rank 0's).
  static std::unique_ptr<DdpRig> make(std::shared_ptr<dist::ProcessGroup> pg, int64_t local_batch, int world,
                                      int rank, uint64_t seed, dist::DdpOptions options = {},
                                      bool batch_norm = false) {
    auto r = std::make_unique<DdpRig>();
    manual_seed(seed);
    if (batch_norm) {
      r->model = std::make_unique<nn::Sequential>(std::make_unique<nn::Linear>(kIn, kHidden),
                                                  std::make_unique<nn::BatchNorm1d>(kHidden),
                                                  std::make_unique<nn::ReLU>(),
                                                  std::make_unique<nn::Linear>(kHidden, kClasses));
    } else {
      r->model = std::make_unique<nn::Mlp>(std::vector<int64_t>{kIn, kHidden, kHidden, kClasses});
    }
    if (pg != nullptr) r->ddp = std::make_unique<dist::DistributedDataParallel>(*r->model, pg, options);
    r->opt = std::make_unique<optim::AdamW>(r->model->parameters(), optim::AdamWOptions{.lr = 1e-2});
    r->local_batch = local_batch;
    r->world = world;
    r->rank = rank;
    r->x = zeros({local_batch, kIn});
    r->y = zeros({local_batch}, kInt64);
    return r;
  }

  // This rank's rows of global batch i.
  void fill(int i) {
    NoGradGuard no_grad;
    const int64_t rows = local_batch * world;
    x.copy_(global_x(i, rows).slice(0, rank * local_batch, (rank + 1) * local_batch));
    std::vector<int64_t> all = global_y(i, rows);
    y.copy_(from_vector<int64_t>(
        std::vector<int64_t>(all.begin() + rank * local_batch, all.begin() + (rank + 1) * local_batch)));
  }

  Tensor loss() { return cross_entropy(model->forward(x), y); }

  // One training step; returns the loss.
  std::vector<Tensor> step() {
    opt->zero_grad();
    Tensor l = loss();
    l.backward();
    if (ddp) ddp->finish();
    opt->step();
    return {l};
  }

  std::vector<Tensor> state() const {
    std::vector<Tensor> out = model->parameters();
    for (const auto& [name, t] : opt->state()) out.push_back(t);
    return out;
  }
  uint64_t state_hash() const { return bits_hash(state()); }
  uint64_t buffers_hash() const {
    std::vector<Tensor> out;
    for (const auto& [name, t] : model->named_buffers()) out.push_back(t);
    return bits_hash(out);
  }
};

// Trains `eager` on batches 0 and 1 and captures `graphed`'s step, made
// alike: batch 0 eagerly (AdamW creates its state, lazily from the host,
// outside the capture), batch 1 as capture()'s recorded run. Replays from
// batch 2 on then compare with eager's steps.
inline absl::StatusOr<Graph> capture_twin(DdpRig& eager, DdpRig& graphed) {
  for (int i = 0; i < 2; ++i) {
    eager.fill(i);
    eager.step();
  }
  graphed.fill(0);
  graphed.step();
  graphed.fill(1);
  return capture([&] { return graphed.step(); }, {.warmup = 1});
}

// One more batch for both twins: batch i through a replay of g (graphed's
// captured step) and through eager's step, which runs whatever the replay
// returned, so that every rank takes part in the same collectives. The
// replay's Status.
inline absl::Status replay_beside_eager(Graph& g, DdpRig& graphed, DdpRig& eager, int i) {
  graphed.fill(i);
  absl::Status replayed = g.replay();
  eager.fill(i);
  eager.step();
  return replayed;
}

// The op of each node of g, in order ("dist.start", "matmul", ...).
inline std::vector<std::string> node_ops(const Graph& g) {
  const Graph::Impl& impl = g.internals();
  std::vector<std::string> ops;
  for (int64_t i = 0; i < impl.stats.kernels; ++i) ops.emplace_back(impl.node_op(i));
  return ops;
}

}  // namespace encore::testing
