// GraphedStep (include/encore/graphed.h): every call is one training step,
// so a graphed loop must equal the same loop of eager calls bit for bit
// (parameters after every call, and every returned output), whatever the
// order of signatures, the limits and the fallbacks.
#include "encore/graphed.h"

#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "encore/autograd.h"
#include "encore/encore.h"
#include "encore/nn.h"
#include "encore/optim.h"
#include "src/core/allocator.h"
#include "tests/backends/cuda_test_util.h"
#include "tests/test_util.h"

namespace encore {
namespace {

std::vector<unsigned char> bits(const Tensor& t) {
  Tensor c = t.to(kCPU).contiguous();
  const auto* p = static_cast<const unsigned char*>(c.data_ptr());
  return {p, p + c.numel() * dtype_size(c.dtype())};
}

std::vector<Tensor> batch(int64_t rows, int i, Device dev = kCPU) {
  std::vector<int64_t> labels(rows);
  for (int64_t r = 0; r < rows; ++r) labels[r] = (r * 3 + i + 5) % 5;
  return {testing::random_tensor({rows, 12}, 500 + i).to(dev), from_vector<int64_t>(labels).to(dev)};
}

// A model, its optimizer, and the step function a GraphedStep wraps.
struct Trainer {
  std::unique_ptr<nn::Mlp> model;
  std::unique_ptr<optim::AdamW> opt;
  // stepped: one eager step first, so that gradients and optimizer state
  // exist (a recorded first call would create them: NOTE [ Lazily created state ]).
  explicit Trainer(Device dev = kCPU, bool stepped = false) {
    manual_seed(21);
    model = std::make_unique<nn::Mlp>(std::vector<int64_t>{12, 16, 5});
    model->to(dev);
    opt = std::make_unique<optim::AdamW>(model->parameters(), optim::AdamWOptions{.lr = 1e-2});
    if (stepped) train(batch(2, -1, dev));
  }
  std::vector<Tensor> train(const std::vector<Tensor>& in) {
    opt->zero_grad();
    Tensor loss = cross_entropy(model->forward(in[0]), in[1]);
    loss.backward();
    opt->step();
    return {loss};
  }
  std::vector<Tensor> eval(const std::vector<Tensor>& in) {
    NoGradGuard no_grad;
    return {cross_entropy(model->forward(in[0]), in[1])};
  }
};

void expect_same_params(const Trainer& a, const Trainer& b, int call) {
  const std::vector<Tensor> pa = a.model->parameters(), pb = b.model->parameters();
  for (size_t i = 0; i < pa.size(); ++i) {
    ASSERT_EQ(bits(pa[i]), bits(pb[i])) << "call " << call << ": parameter " << i << " differs from eager";
  }
}

// Calls in a seeded random order over `sizes`, graphed against eager.
void expect_graphed_matches_eager(const std::vector<int64_t>& sizes, int calls, GraphedOptions options = {},
                                  Device dev = kCPU, GraphedStats* out_stats = nullptr, bool stepped = false) {
  Trainer eager(dev, stepped), graphed(dev, stepped);
  GraphedStep step([&](const std::vector<Tensor>& in) { return graphed.train(in); }, options);
  std::mt19937 rng(7);
  for (int i = 0; i < calls; ++i) {
    const std::vector<Tensor> in = batch(sizes[rng() % sizes.size()], i, dev);
    const std::vector<Tensor> want = eager.train(in);
    const std::vector<Tensor> got = step(in);
    ASSERT_EQ(got.size(), 1u);
    ASSERT_EQ(bits(want[0]), bits(got[0])) << "call " << i << ": loss differs from eager";
    expect_same_params(eager, graphed, i);
  }
  if (out_stats != nullptr) *out_stats = step.stats();
}

TEST(GraphedStepTest, ThreeShapesInRandomOrderTrainAsEager) {
  GraphedStats s;
  expect_graphed_matches_eager({4, 8, 12}, 60, {}, kCPU, &s);
  EXPECT_EQ(s.graphs, 3);
  EXPECT_EQ(s.captures, 3);
  EXPECT_EQ(s.eager_calls, 6);                 // two per signature, the second recorded
  EXPECT_EQ(s.replays, 60 - 6);                // every other call, its capture call included
  EXPECT_EQ(s.eager_fallbacks, 0);
  EXPECT_EQ(s.arena_bytes, s.largest_arena_bytes) << "one arena, as large as the largest graph needs";
  EXPECT_GT(s.output_bytes, 0);
}

TEST(GraphedStepTest, EveryCallIsOneStepWithWarmupOne) {
  GraphedStats s;
  expect_graphed_matches_eager({8}, 10, {.warmup = 1}, kCPU, &s, /*stepped=*/true);
  EXPECT_EQ(s.eager_calls, 1);
  EXPECT_EQ(s.replays, 9);
  // On a fresh model the first call creates the optimizer's state, which
  // escapes it: its recording is refused (an eager step, counted) and
  // recorded again at the next call, which the state no longer escapes. It
  // used to leave the signature eager for good.
  expect_graphed_matches_eager({8}, 6, {.warmup = 1, .log = false}, kCPU, &s);
  EXPECT_EQ(s.graphs, 1);
  EXPECT_EQ(s.eager_fallbacks, 1);
  EXPECT_EQ(s.eager_calls, 2);   // both recorded calls
  EXPECT_EQ(s.replays, 4);
}

TEST(GraphedStepTest, TrainAndEvalInterleavedMatchEager) {
  Trainer eager, graphed;
  GraphedStep train([&](const std::vector<Tensor>& in) { return graphed.train(in); });
  GraphedStep eval([&](const std::vector<Tensor>& in) { return graphed.eval(in); });
  for (int i = 0; i < 30; ++i) {
    const std::vector<Tensor> in = batch(i % 3 == 0 ? 6 : 8, i);
    const bool training = i % 4 != 3;
    const std::vector<Tensor> want = training ? eager.train(in) : eager.eval(in);
    const std::vector<Tensor> got = training ? train(in, "train") : eval(in, "eval");
    ASSERT_EQ(bits(want[0]), bits(got[0])) << "call " << i;
    expect_same_params(eager, graphed, i);
  }
  EXPECT_EQ(train.stats().graphs, 2);
  EXPECT_EQ(eval.stats().graphs, 2);
  EXPECT_EQ(train.stats().eager_fallbacks + eval.stats().eager_fallbacks, 0);
}

TEST(GraphedStepTest, TrainAndEvalObjectsShareOnePool) {
  Trainer eager, graphed;
  GraphPool pool;
  GraphedStep train([&](const std::vector<Tensor>& in) { return graphed.train(in); }, {.pool = pool});
  GraphedStep eval([&](const std::vector<Tensor>& in) { return graphed.eval(in); }, {.pool = pool});
  for (int i = 0; i < 40; ++i) {
    const std::vector<Tensor> in = batch(i % 3 == 0 ? 6 : 10, i);
    const bool training = i % 4 != 3;
    const std::vector<Tensor> want = training ? eager.train(in) : eager.eval(in);
    const std::vector<Tensor> got = training ? train(in) : eval(in);
    ASSERT_EQ(bits(want[0]), bits(got[0])) << "call " << i;
    expect_same_params(eager, graphed, i);
  }
  // A train output stays valid while the other train signature and both
  // eval graphs replay in the same arena.
  const std::vector<Tensor> in6 = batch(6, 200);
  const Tensor kept_want = eager.train(in6)[0].clone();
  const Tensor kept = train(in6)[0];
  for (int i = 0; i < 3; ++i) {
    eager.train(batch(10, 201 + i));
    train(batch(10, 201 + i));
    eval(batch(6, 210 + i));
    eval(batch(10, 220 + i));
  }
  EXPECT_EQ(bits(kept), bits(kept_want)) << "another graph's replay overwrote a train output";
  EXPECT_EQ(train.stats().graphs, 2);
  EXPECT_EQ(eval.stats().graphs, 2);
  EXPECT_EQ(train.stats().eager_fallbacks + eval.stats().eager_fallbacks, 0);
  // One arena for both objects, as large as the larger need of the four graphs.
  EXPECT_EQ(train.stats().arena_bytes, pool.arena_bytes());
  EXPECT_EQ(eval.stats().arena_bytes, pool.arena_bytes());
  EXPECT_EQ(pool.arena_bytes(), std::max(train.stats().largest_arena_bytes, eval.stats().largest_arena_bytes));
}

TEST(GraphedStepTest, SeparatePoolsAreSeparateArenas) {
  Trainer a, b;
  GraphedStep ta([&](const std::vector<Tensor>& in) { return a.train(in); });
  GraphedStep tb([&](const std::vector<Tensor>& in) { return b.train(in); });
  for (int i = 0; i < 4; ++i) {
    ta(batch(8, i));
    tb(batch(8, i));
  }
  ASSERT_EQ(ta.stats().graphs, 1);
  ASSERT_EQ(tb.stats().graphs, 1);
  EXPECT_NE(ta.stats().arena_bytes, 0);
  GraphPool fresh;
  EXPECT_EQ(fresh.arena_bytes(), 0);
}

// The small signature is captured first; the large one grows the arena, so
// the small graph moves at its next call: same kernels, other pointers. On
// CUDA its executable is updated in place (cudaGraphExecUpdate); the CPU
// makes its kernel list anew. Either way it trains as the eager step does.
void expect_moved_graph_trains_as_eager(Device dev) {
  Trainer eager(dev), graphed(dev);
  GraphedStep step([&](const std::vector<Tensor>& in) { return graphed.train(in); });
  int i = 0;
  auto call = [&](int64_t rows) {
    const std::vector<Tensor> in = batch(rows, i, dev);
    const std::vector<Tensor> want = eager.train(in);
    ASSERT_EQ(bits(want[0]), bits(step(in)[0])) << "call " << i;
    expect_same_params(eager, graphed, i);
    ++i;
  };
  for (int k = 0; k < 3; ++k) call(2);
  for (int k = 0; k < 3; ++k) call(64);
  EXPECT_EQ(step.stats().recaptures, 0);
  for (int k = 0; k < 3; ++k) call(2);
  EXPECT_EQ(step.stats().recaptures, 1);
  EXPECT_EQ(step.stats().updates, dev.is_cuda() ? 1 : 0);
  EXPECT_EQ(step.stats().arena_bytes, step.stats().largest_arena_bytes);
  const std::vector<GraphedGraph> graphs = step.graphs();
  ASSERT_EQ(graphs.size(), 2u);
  EXPECT_EQ(graphs[0].signature, GraphedStep::signature(batch(64, 0, dev)));   // least recently used first
  EXPECT_EQ(graphs[1].signature, GraphedStep::signature(batch(2, 0, dev)));
  EXPECT_EQ(graphs[1].capture.updated, dev.is_cuda());
  EXPECT_FALSE(graphs[0].capture.updated);
  EXPECT_GT(graphs[1].capture.instantiate_ms, 0);
  EXPECT_EQ(graphs[0].replays, 1);   // its capture call
  EXPECT_EQ(graphs[1].replays, 4);   // its capture call and the three after the move
}

TEST(GraphedStepTest, AGraphMovedIntoALargerArenaTrainsAsEager) { expect_moved_graph_trains_as_eager(kCPU); }

TEST(GraphedStepTest, CudaAGraphMovedIntoALargerArenaIsUpdatedNotInstantiatedAnew) {
  ENCORE_SKIP_WITHOUT_GPU();
  expect_moved_graph_trains_as_eager(Device::cuda(0));
}

TEST(GraphedStepTest, BucketGraphsShareAnArenaWithinTheTargets) {
  // K shapes: the shared arena is the largest graph's need (1.0x, within the
  // 1.05x target), and with the outputs' regions it stays under the eager
  // peak of the largest shape.
  GraphedStats s;
  expect_graphed_matches_eager({8, 16, 32, 64}, 40, {}, kCPU, &s);
  ASSERT_EQ(s.graphs, 4);
  EXPECT_LE(s.arena_bytes, s.largest_arena_bytes * 105 / 100);
  EXPECT_GT(s.eager_peak_bytes, 0);
  EXPECT_LE(s.arena_bytes + s.output_bytes, s.eager_peak_bytes);
}

TEST(GraphedStepTest, ReplaysAllocateNothing) {
  // Every temporary, workspaces and scratch included, lives in the shared
  // arena; a call that replays copies its inputs into the static ones.
  Trainer graphed;
  GraphedStep step([&](const std::vector<Tensor>& in) { return graphed.train(in); });
  const std::vector<int64_t> sizes = {4, 8, 12};
  std::vector<std::vector<Tensor>> batches;
  for (int i = 0; i < 30; ++i) batches.push_back(batch(sizes[i % 3], i));
  // Three calls per signature capture all three; the 4 and 8 graphs then
  // move into the arena the larger ones grew (a capture run each, which
  // allocates their output regions), so every graph has settled after 12.
  for (int i = 0; i < 12; ++i) step(batches[i]);
  ASSERT_EQ(step.stats().graphs, 3);
  ASSERT_EQ(step.stats().recaptures, 2);
  const int64_t before = allocator_stats(kCPU).allocations;
  for (int i = 12; i < 33; ++i) step(batches[(i * 7) % 30]);
  EXPECT_EQ(allocator_stats(kCPU).allocations, before);
  EXPECT_EQ(step.stats().replays, 6 + 21);
  EXPECT_EQ(step.stats().recaptures, 2);
}

TEST(GraphedStepTest, AnOutputStaysValidWhileOtherSignaturesReplay) {
  Trainer eager, graphed;
  GraphedStep step([&](const std::vector<Tensor>& in) { return graphed.train(in); });
  for (int i = 0; i < 6; ++i) step(batch(i % 2 == 0 ? 4 : 8, i));   // both signatures captured
  for (int i = 0; i < 6; ++i) eager.train(batch(i % 2 == 0 ? 4 : 8, i));
  const std::vector<Tensor> in4 = batch(4, 100), in8 = batch(8, 101);
  const Tensor want4 = eager.train(in4)[0].clone();
  const Tensor want8 = eager.train(in8)[0].clone();
  const Tensor got4 = step(in4)[0];
  const Tensor got8 = step(in8)[0];   // another graph replays, sharing the arena
  EXPECT_EQ(bits(got4), bits(want4)) << "the first output was overwritten by the other signature's replay";
  EXPECT_EQ(bits(got8), bits(want8));
  EXPECT_EQ(step.stats().replays, 2 + 2);
}

// NOTE [ Outputs the caller keeps ] (capture/graphed.cpp): losses gathered
// over calls, as handles and as views of them, keep each call's value as
// eager calls' would; a caller that drops them costs no copy.
void expect_kept_outputs_hold_their_values(Device dev) {
  Trainer eager(dev), graphed(dev);
  GraphedStep step([&](const std::vector<Tensor>& in) { return graphed.train(in); });
  std::vector<Tensor> want, kept, kept_views;
  Tensor last;   // the common loop: `last = step(in)[0]` holds the previous one during the call
  for (int i = 0; i < 12; ++i) {
    const std::vector<Tensor> in = batch(4, i, dev);
    want.push_back(eager.train(in)[0]);
    last = step(in)[0];
    if (i % 2 == 0) kept.push_back(last);
    if (i % 3 == 0) kept_views.push_back(last.reshape({1}));
  }
  ASSERT_EQ(step.stats().replays, 12 - 2);
  for (int i = 0, k = 0, v = 0; i < 12; ++i) {
    if (i % 2 == 0) {
      EXPECT_EQ(bits(kept[k++]), bits(want[i])) << "call " << i << ": a kept loss changed";
    }
    if (i % 3 == 0) {
      EXPECT_EQ(bits(kept_views[v++]), bits(want[i].reshape({1}))) << "call " << i << ": a kept view changed";
    }
  }
  EXPECT_EQ(step.stats().kept_outputs, 12 - 2 - 1) << "every replay but the first found its previous loss held";
  last = Tensor();
  kept.clear();
  kept_views.clear();
  std::vector<std::vector<Tensor>> batches;
  for (int i = 0; i < 5; ++i) batches.push_back(batch(4, 20 + i, dev));
  const int64_t before = allocator_stats(dev).allocations;
  for (int i = 0; i < 5; ++i) EXPECT_EQ(step(batches[i])[0].numel(), 1);
  EXPECT_EQ(step.stats().kept_outputs, 12 - 3) << "nothing held: no copy";
  EXPECT_EQ(allocator_stats(dev).allocations, before) << "a replay whose outputs were dropped allocates nothing";
}

TEST(GraphedStepTest, OutputsTheCallerKeepsHoldTheirCallsValues) { expect_kept_outputs_hold_their_values(kCPU); }

TEST(GraphedStepTest, CudaOutputsTheCallerKeepsHoldTheirCallsValues) {
  ENCORE_SKIP_WITHOUT_GPU();
  expect_kept_outputs_hold_their_values(Device::cuda(0));
}

TEST(GraphedStepTest, SignaturesPastTheGraphLimitRunEagerlyAndAreCounted) {
  GraphedStats s;
  expect_graphed_matches_eager({4, 8, 12}, 40, {.max_graphs = 2, .log = false}, kCPU, &s);
  EXPECT_EQ(s.graphs, 2);
  EXPECT_GT(s.eager_fallbacks, 0);
  Trainer t;
  GraphedStep step([&](const std::vector<Tensor>& in) { return t.train(in); }, {.max_graphs = 1, .log = false});
  step(batch(4, 0));
  step(batch(8, 1));
  EXPECT_NE(step.last_fallback().find("graphed step [[8, 12] f32 cpu, [8] i64 cpu]: graph limit"),
            std::string::npos)
      << step.last_fallback();
}

TEST(GraphedStepTest, AMemoryCapReleasesLeastRecentlyUsedGraphs) {
  // The graphs share one arena, so a cap bites through what each holds on
  // its own (static inputs, outputs): room for the size-8 graph and a
  // little, not for a second graph beside it.
  GraphedStats one;
  expect_graphed_matches_eager({8}, 4, {}, kCPU, &one);
  const int64_t cap = one.arena_bytes + one.output_bytes + one.input_bytes + 64;
  GraphedStats s;
  expect_graphed_matches_eager({4, 8}, 40, {.max_bytes = cap, .log = false}, kCPU, &s);
  EXPECT_GT(s.released, 0);
  EXPECT_LE(s.arena_bytes + s.output_bytes + s.input_bytes, cap);
  EXPECT_EQ(s.graphs, 1);
}

TEST(GraphedStepTest, ADtypeChangeIsAnotherSignature) {
  GraphedStep step([](const std::vector<Tensor>& in) { return std::vector<Tensor>{mul(in[0], 2.0).sum()}; });
  for (int i = 0; i < 8; ++i) {
    const Tensor x = full({5}, 1.0 + i, i % 2 == 0 ? kFloat32 : kBFloat16);
    const Tensor got = step({x})[0];
    EXPECT_EQ(got.dtype(), x.dtype());
    EXPECT_EQ(got.to(kFloat32).item<float>(), 10.f * (1 + i)) << "call " << i;
  }
  EXPECT_EQ(step.stats().graphs, 2);
}

TEST(GraphedStepTest, ARefusedCaptureRunsEagerlyAndNamesTheSignature) {
  int host_reads = 0;
  GraphedStep step(
      [&](const std::vector<Tensor>& in) {
        Tensor s = in[0].sum();
        host_reads += s.item<float>() > 0;   // a host read: capture refuses it
        return std::vector<Tensor>{s};
      },
      {.log = false});
  for (int i = 0; i < 5; ++i) EXPECT_EQ(step({full({3}, 1.0)})[0].item<float>(), 3.f);
  EXPECT_EQ(host_reads, 5) << "every call is exactly one step, also the refused recording";
  EXPECT_EQ(step.stats().graphs, 0);
  EXPECT_EQ(step.stats().eager_fallbacks, 4);   // the refused recorded call and the three after it
  EXPECT_NE(step.last_fallback().find("graphed step [[3] f32 cpu]: capture refused: capture: item stops"),
            std::string::npos)
      << step.last_fallback();
}

// A signature whose recording or capture run was refused runs eagerly from
// then on and needs no static inputs. It used to keep them: counted in
// stats().input_bytes and against max_bytes, where they pushed the graphs
// that do replay out (released as least recently used).
TEST(GraphedStepTest, ARefusedSignatureKeepsNoStaticInputs) {
  int calls = 0;
  GraphedStep step(
      [&](const std::vector<Tensor>& in) {
        if (in[0].dim() == 1) (void)in[0].sum().item<float>();   // [n]: a host read refuses the recording
        // [2, n]: a host number that changes per call refuses the capture run
        return std::vector<Tensor>{mul(in[0], in[0].dim() == 2 ? static_cast<double>(++calls) : 1.0).sum()};
      },
      {.log = false});
  for (int i = 0; i < 6; ++i) {   // a refused capture run is recorded again once (NOTE [ A refused recording ... ])
    step({full({3}, 1.0)});
    step({full({2, 5}, 1.0)});
  }
  EXPECT_EQ(step.stats().graphs, 0);
  EXPECT_EQ(step.stats().input_bytes, 0);
  // Within a cap that holds one graph and its inputs, the refused
  // signatures leave that graph alone.
  GraphedStep capped(
      [&](const std::vector<Tensor>& in) {
        if (in[0].numel() == 4096) (void)in[0].sum().item<float>();   // refused
        return std::vector<Tensor>{in[0].sum()};
      },
      {.max_bytes = 4096, .log = false});
  for (int i = 0; i < 4; ++i) {
    capped({full({4096}, 1.0)});   // 16 KiB of static input, were it kept
    capped({full({8}, 1.0)});
  }
  EXPECT_EQ(capped.stats().graphs, 1);
  EXPECT_EQ(capped.stats().released, 0);
  EXPECT_EQ(capped.stats().replays, 2);
}

// NOTE [ Graphs of another gradient state ]: a signature whose replay is
// refused for a parameter's new gradient state is recorded again, at most
// four times; a state that changes before every call then runs eagerly.
TEST(GraphedStepTest, AGradientStateThatKeepsChangingIsRecordedAgainAtMostFourTimes) {
  Trainer eager(kCPU, /*stepped=*/true), graphed(kCPU, /*stepped=*/true);
  GraphedStep step([&](const std::vector<Tensor>& in) { return graphed.train(in); }, {.warmup = 1, .log = false});
  const Tensor w = graphed.model->parameters()[0];
  int64_t hook = -1;
  for (int i = 0; i < 24; ++i) {
    // A hook that does nothing, added and removed in turn: each is another
    // hook list, which a graph refuses.
    if (hook < 0) {
      hook = autograd::register_post_accumulate_hook(w, [](const Tensor&) {});
    } else {
      autograd::remove_post_accumulate_hook(w, hook);
      hook = -1;
    }
    const std::vector<Tensor> in = batch(8, i);
    ASSERT_EQ(bits(eager.train(in)[0]), bits(step(in)[0])) << "call " << i;
    expect_same_params(eager, graphed, i);
  }
  // Calls 3k+1 recorded, 3k+2 captured (its state then: no hook) and
  // replayed, 3k+3 refused and started over, for k = 0..3; then no more
  // restarts: the calls with a hook run eagerly, those without (the graph's
  // state: AutogradMeta::hooks_key is the set of hooks) replay.
  EXPECT_EQ(step.stats().captures, 5);
  EXPECT_EQ(step.stats().replays, 5 + 5);
  EXPECT_NE(step.last_fallback().find("replay refused: replay: post-accumulate hooks"), std::string::npos)
      << step.last_fallback();
}

TEST(GraphedStepTest, AReplayRefusedForItsPreconditionsRunsEagerly) {
  // zero_grad() between calls of a forward+backward step: the graph was
  // captured accumulating, so its replays are refused and the calls run
  // eagerly, as the eager loop would.
  Trainer eager, graphed;
  GraphedStep step(
      [&](const std::vector<Tensor>& in) {
        Tensor loss = cross_entropy(graphed.model->forward(in[0]), in[1]);
        loss.backward();
        return std::vector<Tensor>{loss};
      },
      {.log = false});
  for (int i = 0; i < 8; ++i) {
    const std::vector<Tensor> in = batch(8, i);
    if (i >= 4) {
      eager.opt->zero_grad();
      graphed.opt->zero_grad();
    }
    Tensor want = cross_entropy(eager.model->forward(in[0]), in[1]);
    want.backward();
    const Tensor got = step(in)[0];
    ASSERT_EQ(bits(want), bits(got)) << "call " << i;
    eager.opt->step();
    graphed.opt->step();
    expect_same_params(eager, graphed, i);
  }
  EXPECT_GT(step.stats().eager_fallbacks, 0);
  EXPECT_NE(step.last_fallback().find("replay refused"), std::string::npos) << step.last_fallback();
}

TEST(GraphedStepTest, BadOptionsAreRefused) {
  const GraphedStep::Fn fn = [](const std::vector<Tensor>&) { return std::vector<Tensor>{}; };
  EXPECT_THROW(GraphedStep(nullptr), Error);
  EXPECT_THROW(GraphedStep(fn, {.warmup = 0}), Error);
  EXPECT_THROW(GraphedStep(fn, {.max_graphs = -1}), Error);
  EXPECT_THROW(GraphedStep(fn, {.max_bytes = -1}), Error);
  EXPECT_THROW(GraphedStep(fn, {.capture = {.verify_every = -1}}), Error);
  Tensor x = zeros({2});
  EXPECT_THROW(GraphedStep(fn, {.capture = {.inputs = {&x}}}), Error);
  GraphedStep step(fn);
  EXPECT_THROW(step({Tensor()}), Error);
}

// NOTE [ Inputs written in place ]: a step that carries state in its input
// leaves the caller's tensor as the eager calls do.
TEST(GraphedStepTest, AnInputWrittenInPlaceComesBackToTheCaller) {
  const GraphedStep::Fn fn = [](const std::vector<Tensor>& in) {
    Tensor state = in[0];
    state.add_(full({3}, 1.0));   // a counter carried from call to call
    return std::vector<Tensor>{mul(in[0], in[1])};
  };
  Tensor eager_state = zeros({3}), graphed_state = zeros({3});
  GraphedStep graphed(fn);
  for (int i = 0; i < 6; ++i) {
    const Tensor scale = full({3}, 2.0 + i);
    const std::vector<Tensor> e = fn({eager_state, scale});
    const std::vector<Tensor> g = graphed({graphed_state, scale});
    ASSERT_EQ(bits(graphed_state), bits(eager_state)) << "call " << i;
    ASSERT_EQ(bits(g[0]), bits(e[0])) << "call " << i;
  }
  EXPECT_EQ(graphed.stats().replays, 4);
  EXPECT_EQ(graphed.stats().eager_fallbacks, 0);
}

// A replay over a class id out of range (NOTE [ Index checks ]) runs the
// step with that row skipped and throws naming the op; what it did stays, as
// for any replay (NOTE [ A replay that ran ] in capture/executable.h): the
// parameters are those of the eager step over the batch with that row
// ignored (ignore_index), the counter it carries in its input is copied
// back to the caller, and it counts as a replay. Later calls match eager.
TEST(GraphedStepTest, AReplayOverABadClassIdThrowsAndKeepsWhatTheStepDid) {
  Trainer eager, graphed;
  auto counting = [](Trainer& t) {
    return [&t](const std::vector<Tensor>& in) {
      Tensor counter = in[2];
      counter.add_(full({3}, 1.0));   // carried from call to call
      return t.train(in);
    };
  };
  const GraphedStep::Fn eager_fn = counting(eager);
  GraphedStep step(counting(graphed), {.log = false});
  Tensor eager_counter = zeros({3}), graphed_counter = zeros({3});
  for (int i = 0; i < 6; ++i) {
    const std::vector<Tensor> in = batch(8, i);
    Tensor eager_y = in[1].clone(), graphed_y = in[1].clone();
    const bool bad = i == 3;   // a replay (calls 1-2: eager, call 3: capture and replay)
    if (bad) {
      eager_y.slice(0, 2, 3).fill_(-100.0);   // ignore_index
      graphed_y.slice(0, 2, 3).fill_(9.0);    // 5 classes
    }
    const std::vector<Tensor> want = eager_fn({in[0], eager_y, eager_counter});
    if (bad) {
      try {
        (void)step({in[0], graphed_y, graphed_counter});
        FAIL() << "call " << i << ": a bad class id was not reported";
      } catch (const Error& e) {
        EXPECT_EQ(e.status().code(), absl::StatusCode::kInvalidArgument) << e.status();
        EXPECT_NE(e.status().message().find("cross_entropy"), std::string::npos) << e.status();
      }
    } else {
      const std::vector<Tensor> got = step({in[0], graphed_y, graphed_counter});
      ASSERT_EQ(bits(got[0]), bits(want[0])) << "call " << i;
    }
    ASSERT_EQ(bits(graphed_counter), bits(eager_counter)) << "call " << i << ": the counter was not copied back";
    expect_same_params(eager, graphed, i);
    EXPECT_EQ(step.stats().replays, std::max(0, i - 1)) << "call " << i;
  }
  EXPECT_EQ(step.stats().eager_fallbacks, 0);
}

TEST(GraphedStepTest, InputsSharingMemoryRunEagerly) {
  const GraphedStep::Fn fn = [](const std::vector<Tensor>& in) {
    Tensor a = in[0];
    a.add_(full({3}, 1.0));
    return std::vector<Tensor>{add(in[1], 0.0)};   // sees the write eagerly: in[1] is in[0]
  };
  Tensor eager_state = zeros({3}), graphed_state = zeros({3});
  GraphedStep graphed(fn, {.log = false});
  for (int i = 0; i < 5; ++i) {
    const std::vector<Tensor> e = fn({eager_state, eager_state});
    const std::vector<Tensor> g = graphed({graphed_state, graphed_state});
    ASSERT_EQ(bits(g[0]), bits(e[0])) << "call " << i;
    ASSERT_EQ(bits(graphed_state), bits(eager_state)) << "call " << i;
  }
  EXPECT_EQ(graphed.stats().replays, 0);
  EXPECT_NE(graphed.last_fallback().find("share memory"), std::string::npos) << graphed.last_fallback();
}

TEST(GraphedStepTest, InputsThatRequireGradRunEagerlyAndGetTheirGradients) {
  const GraphedStep::Fn fn = [](const std::vector<Tensor>& in) {
    Tensor loss = sum(mul(in[0], in[0]));
    loss.backward();
    return std::vector<Tensor>{loss};
  };
  Tensor eager_x = full({3}, 2.0).requires_grad_(true), graphed_x = full({3}, 2.0).requires_grad_(true);
  GraphedStep graphed(fn, {.log = false});
  for (int i = 0; i < 6; ++i) {
    fn({eager_x});
    graphed({graphed_x});
  }
  EXPECT_EQ(bits(graphed_x.grad()), bits(eager_x.grad()));
  EXPECT_EQ(graphed.stats().replays, 0);
  EXPECT_NE(graphed.last_fallback().find("input 0 requires grad"), std::string::npos) << graphed.last_fallback();
}

// NOTE [ Nested captures ] (capture/capture.cpp): a graphed step called
// inside a step that capture() records or captures runs eagerly, so the
// enclosing graph holds its kernels; its own replay there would have been
// invisible to the outer capture, whose replays then left its work out.
TEST(GraphedStepTest, AGraphedStepInsideACapturedStepRunsInTheOuterGraph) {
  Tensor b = zeros({4}), c = zeros({4});
  GraphedStep inner(
      [&](const std::vector<Tensor>& in) {
        b.add_(in[0]);
        return std::vector<Tensor>{};
      },
      {.log = false});
  const Tensor one = full({4}, 1.0);
  for (int i = 0; i < 3; ++i) inner({one});   // warm-up, recorded call, capture and first replay
  ASSERT_EQ(inner.stats().replays, 1);
  absl::StatusOr<Graph> outer = capture([&] {
    inner({one});
    c.add_(b);
    return std::vector<Tensor>{};
  });
  ASSERT_TRUE(outer.ok()) << outer.status();
  // Eagerly: b = 3 + 2 warm-ups = 5 (the capture run computes nothing), c = 4 + 5 = 9.
  ASSERT_EQ(b.to_vector<float>(), std::vector<float>(4, 5.f));
  ASSERT_EQ(c.to_vector<float>(), std::vector<float>(4, 9.f));
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(outer->replay().ok());
  EXPECT_EQ(b.to_vector<float>(), std::vector<float>(4, 8.f));
  EXPECT_EQ(c.to_vector<float>(), std::vector<float>(4, 9.f + 6.f + 7.f + 8.f));
  EXPECT_EQ(inner.stats().replays, 2);   // and once in the outer first warm-up, which nothing watches
  EXPECT_NE(inner.last_fallback().find("inside a step that capture() is recording or capturing"),
            std::string::npos) << inner.last_fallback();
}

// NOTE [ Outputs over the static inputs ] (capture/graphed.cpp): a step
// that returns its input (labels handed back beside the loss, a view of the
// batch) gives the caller its own tensor, as an eager call does. Graphed,
// such outputs used to be the signature's static input, which the next
// call overwrote: every kept one read the last batch. A transposed input
// (not laid out as its contiguous static copy) comes back as a copy. The
// recorded call (call 1, transposed) runs over the caller's tensor as laid
// out, a probe (NOTE [ Inputs that are the step's own state ]), so it sums
// x itself; call 2 records again and replays start at call 3; the others
// read the contiguous static copy, as the eager calls on x.clone() do.
TEST(GraphedStepTest, InputsTheStepReturnsKeepTheirCallsValues) {
  const GraphedStep::Fn fn = [](const std::vector<Tensor>& in) {
    return std::vector<Tensor>{in[0].sum(), in[1], in[0].select(0, 1), mul(in[0], 2.0)};
  };
  GraphedStep graphed(fn, {.log = false});
  std::vector<std::vector<Tensor>> eager_kept, graphed_kept;
  std::vector<Tensor> graphed_inputs;
  for (int i = 0; i < 6; ++i) {
    const std::vector<Tensor> in = batch(4, i);
    // Every other call passes the features transposed back from a [12, 4] tensor.
    const Tensor x = i % 2 == 0 ? in[0].clone() : in[0].t().clone().t();
    eager_kept.push_back(fn({i == 1 ? x : x.clone(), in[1].clone()}));
    graphed_inputs = {x, in[1].clone()};
    graphed_kept.push_back(graphed(graphed_inputs));
    if (i == 4) {
      EXPECT_EQ(graphed_kept.back()[1].storage(), graphed_inputs[1].storage()) << "the caller's own labels";
    }
  }
  EXPECT_EQ(graphed.stats().replays, 3);
  for (size_t i = 0; i < eager_kept.size(); ++i) {
    for (size_t j = 0; j < eager_kept[i].size(); ++j) {
      EXPECT_EQ(bits(graphed_kept[i][j]), bits(eager_kept[i][j])) << "call " << i << ", output " << j;
    }
  }
}

// A step returning an undefined tensor cannot be captured, so its
// signature runs eagerly; the recorded call, refused for it, used to return
// no outputs at all where the eager call returns both.
TEST(GraphedStepTest, AStepReturningAnUndefinedTensorReturnsItOnEveryCall) {
  const GraphedStep::Fn fn = [](const std::vector<Tensor>& in) { return std::vector<Tensor>{in[0].sum(), Tensor()}; };
  GraphedStep graphed(fn, {.log = false});
  for (int i = 0; i < 4; ++i) {
    const std::vector<Tensor> out = graphed({full({3}, static_cast<double>(i))});
    ASSERT_EQ(out.size(), 2u) << "call " << i;
    EXPECT_EQ(out[0].to_vector<float>(), std::vector<float>{3.f * i}) << "call " << i;
    EXPECT_FALSE(out[1].defined()) << "call " << i;
  }
  EXPECT_EQ(graphed.stats().replays, 0);
  EXPECT_NE(graphed.last_fallback().find("undefined tensor"), std::string::npos) << graphed.last_fallback();
}

// CaptureOptions::verify_every applies to a GraphedStep's graphs: a step
// that depends on a host counter capture cannot see is caught at the first
// verified replay (thrown, as the graphed step's errors are).
TEST(GraphedStepTest, VerifyEveryAppliesToItsGraphs) {
  Tensor w = zeros({4});
  int calls = 0;
  GraphedStep graphed(
      [&](const std::vector<Tensor>& in) {
        w.add_(in[0], ++calls <= 3 ? 1.0 : -1.0);
        return std::vector<Tensor>{};
      },
      {.capture = {.verify_every = 1, .names = {{"w", w}}}});
  const Tensor one = full({4}, 1.0);
  graphed({one});
  graphed({one});
  try {
    graphed({one});   // the capture, then the first replay: verified
    FAIL() << "the verified replay did not find the difference";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'w' differs from the eager step"), std::string::npos) << e.what();
  }
  EXPECT_EQ(w.to_vector<float>(), std::vector<float>(4, 1.f)) << "the state is the eager step's";
}

TEST(GraphedStepTest, CudaShapesInRandomOrderTrainAsEager) {
  ENCORE_SKIP_WITHOUT_GPU();
  GraphedStats s;
  expect_graphed_matches_eager({4, 8, 12}, 40, {}, Device::cuda(0), &s);
  EXPECT_EQ(s.graphs, 3);
}



// NOTE [ Inputs that are the step's own state ] (capture/graphed.cpp): an
// input that is also memory the step reaches itself. Eagerly a write through
// one is read through the other; a graph's static input is a copy, which
// replayed the stale value without a word. These steps run eagerly instead,
// the recorded call included, and match the eager twin bit for bit.
struct StateStep {
  Tensor state;
  // Bumps its input in place and reads `state` itself (or the reverse).
  static GraphedStep::Fn bump_input_read_state(const Tensor& state) {
    return [state](const std::vector<Tensor>& in) {
      Tensor(in[0]).add_(full(in[0].shape(), 1.0));
      return std::vector<Tensor>{add(mul(state, 2.0), in[1])};
    };
  }
  static GraphedStep::Fn bump_state_read_input(const Tensor& state) {
    return [state](const std::vector<Tensor>& in) {
      Tensor(state).add_(full(state.shape(), 1.0));
      return std::vector<Tensor>{add(mul(in[0], 2.0), in[1])};
    };
  }
};

// The eager step and its graphed twin, each over its own copy of one state.
struct StateTwins {
  Tensor eager_state, graphed_state;
  GraphedStep::Fn eager_fn;
  GraphedStep graphed;
  explicit StateTwins(GraphedStep::Fn (*make)(const Tensor&))
      : eager_state(testing::random_tensor({2, 3}, 1)), graphed_state(eager_state.clone()),
        eager_fn(make(eager_state)), graphed(make(graphed_state), {.log = false}) {}
};

void expect_state_input_runs_as_eager(GraphedStep::Fn (*make)(const Tensor&), bool transposed) {
  Tensor eager_state = testing::random_tensor(transposed ? Shape{3, 2} : Shape{2, 3}, 1);
  Tensor graphed_state = eager_state.clone();
  auto as_input = [&](const Tensor& t) { return transposed ? t.t() : t; };   // [2, 3] either way
  const GraphedStep::Fn eager_fn = make(as_input(eager_state));
  GraphedStep graphed(make(as_input(graphed_state)), {.log = false});
  for (int i = 0; i < 6; ++i) {
    const Tensor other = testing::random_tensor({2, 3}, 10 + i);
    const std::vector<Tensor> e = eager_fn({as_input(eager_state), other});
    const std::vector<Tensor> g = graphed({as_input(graphed_state), other});
    ASSERT_EQ(bits(g[0]), bits(e[0])) << "call " << i << ": output differs from eager";
    ASSERT_EQ(bits(graphed_state), bits(eager_state)) << "call " << i << ": state differs from eager";
  }
  EXPECT_EQ(graphed.stats().replays, 0);
  EXPECT_EQ(graphed.stats().graphs, 0);
  EXPECT_NE(graphed.last_fallback().find("input 0 is memory the step also reads or writes itself"), std::string::npos)
      << graphed.last_fallback();
}

TEST(GraphedStepTest, AnInputTheStepWritesAndAlsoReadsAsStateRunsEagerly) {
  expect_state_input_runs_as_eager(&StateStep::bump_input_read_state, false);
}
TEST(GraphedStepTest, AnInputTheStepReadsAndAlsoWritesAsStateRunsEagerly) {
  expect_state_input_runs_as_eager(&StateStep::bump_state_read_input, false);
}
// A non-contiguous input: the recorded call is an exact probe over the
// caller's storage.
TEST(GraphedStepTest, ANonContiguousInputThatIsStateRunsEagerly) {
  expect_state_input_runs_as_eager(&StateStep::bump_input_read_state, true);
  expect_state_input_runs_as_eager(&StateStep::bump_state_read_input, true);
}

// A module buffer passed as an input: BatchNorm updates running_mean itself,
// the step reads it through its input afterwards.
TEST(GraphedStepTest, AModuleBufferPassedAsAnInputRunsEagerly) {
  manual_seed(3);
  nn::BatchNorm1d eager_bn(3), graphed_bn(3);
  auto make = [](nn::BatchNorm1d& bn) {
    return [&bn](const std::vector<Tensor>& in) {
      Tensor y = bn.forward(in[1]);
      return std::vector<Tensor>{add(y.sum(), in[0].sum())};
    };
  };
  const GraphedStep::Fn eager_fn = make(eager_bn);
  GraphedStep graphed(make(graphed_bn), {.log = false});
  for (int i = 0; i < 5; ++i) {
    const Tensor x = testing::random_tensor({4, 3}, 40 + i);
    const std::vector<Tensor> e = eager_fn({eager_bn.running_mean, x});
    const std::vector<Tensor> g = graphed({graphed_bn.running_mean, x});
    ASSERT_EQ(bits(g[0]), bits(e[0])) << "call " << i;
    ASSERT_EQ(bits(graphed_bn.running_mean), bits(eager_bn.running_mean)) << "call " << i;
  }
  EXPECT_EQ(graphed.stats().replays, 0);
  EXPECT_NE(graphed.last_fallback().find("reads or writes itself"), std::string::npos) << graphed.last_fallback();
}

// A graph captured over fresh inputs replays them; a call that passes the
// step's own state in that place runs eagerly (the graph would read a
// copy), and later fresh calls replay again.
TEST(GraphedStepTest, ACallPassingTheStepsStateToItsGraphRunsEagerly) {
  StateTwins t(&StateStep::bump_input_read_state);
  for (int i = 0; i < 9; ++i) {
    const bool state = i == 4 || i == 5;
    const Tensor fresh = testing::random_tensor({2, 3}, 20 + i), other = testing::random_tensor({2, 3}, 30 + i);
    const Tensor eager_in = state ? t.eager_state : fresh.clone();
    const Tensor graphed_in = state ? t.graphed_state : fresh.clone();
    const std::vector<Tensor> e = t.eager_fn({eager_in, other});
    const std::vector<Tensor> g = t.graphed({graphed_in, other});
    ASSERT_EQ(bits(g[0]), bits(e[0])) << "call " << i;
    ASSERT_EQ(bits(graphed_in), bits(eager_in)) << "call " << i;
    ASSERT_EQ(bits(t.graphed_state), bits(t.eager_state)) << "call " << i;
  }
  EXPECT_EQ(t.graphed.stats().replays, 5);   // calls 2, 3, 6, 7, 8
  EXPECT_EQ(t.graphed.stats().eager_fallbacks, 2);
  EXPECT_NE(t.graphed.last_fallback().find("reads or writes itself"), std::string::npos)
      << t.graphed.last_fallback();
}

// A non-contiguous input that is not state: its recorded call probes, the
// next call records with a copy, and the signature replays from then on.
TEST(GraphedStepTest, ANonContiguousInputIsGraphedAfterOneProbe) {
  StateTwins t(&StateStep::bump_input_read_state);
  for (int i = 0; i < 7; ++i) {
    const Tensor fresh = testing::random_tensor({3, 2}, 20 + i);
    Tensor eager_in = fresh.clone(), graphed_in = fresh.clone();
    const Tensor other = testing::random_tensor({2, 3}, 30 + i);
    const std::vector<Tensor> e = t.eager_fn({eager_in.t(), other});
    const std::vector<Tensor> g = t.graphed({graphed_in.t(), other});
    ASSERT_EQ(bits(g[0]), bits(e[0])) << "call " << i;
    ASSERT_EQ(bits(graphed_in), bits(eager_in)) << "call " << i << ": the write did not come back";
  }
  EXPECT_EQ(t.graphed.stats().eager_calls, 3);   // warm-up, the probe, the recorded call
  EXPECT_EQ(t.graphed.stats().replays, 4);
  EXPECT_EQ(t.graphed.stats().eager_fallbacks, 0);
}

// Inputs that alias each other: two views of one storage (overlapping or
// not) run eagerly, as one tensor passed twice does.
TEST(GraphedStepTest, InputsThatAreViewsOfOneStorageRunEagerly) {
  const GraphedStep::Fn fn = [](const std::vector<Tensor>& in) {
    Tensor(in[0]).add_(full({2}, 1.0));
    return std::vector<Tensor>{add(in[1], 0.0)};
  };
  for (int64_t start : {1, 2}) {   // [0, 2) and [1, 3) overlap; [0, 2) and [2, 4) do not
    Tensor eager_buf = zeros({4}), graphed_buf = zeros({4});
    GraphedStep graphed(fn, {.log = false});
    for (int i = 0; i < 5; ++i) {
      const std::vector<Tensor> e = fn({eager_buf.slice(0, 0, 2), eager_buf.slice(0, start, start + 2)});
      const std::vector<Tensor> g = graphed({graphed_buf.slice(0, 0, 2), graphed_buf.slice(0, start, start + 2)});
      ASSERT_EQ(bits(g[0]), bits(e[0])) << "call " << i;
      ASSERT_EQ(bits(graphed_buf), bits(eager_buf)) << "call " << i;
    }
    EXPECT_EQ(graphed.stats().replays, 0);
    EXPECT_NE(graphed.last_fallback().find("share memory"), std::string::npos) << graphed.last_fallback();
  }
}

}  // namespace
}  // namespace encore
