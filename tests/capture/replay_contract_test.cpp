// The replay contract's hazard suite (include/encore/capture.h, README
// "Capturing your own step"): training loops written in the ways a user
// plausibly writes them, with the capture boundary in different places. Each
// must either train exactly as its eager twin, bit for bit over kSteps steps
// (parameters, their gradients and the lazy zero_grad flags), or be refused
// by capture() or replay() with a message that names the op or call and says
// what to do. None may silently differ.
//
// The eager twin of a captured loop runs the same calls eagerly: capture()
// runs its step `warmup` times eagerly (real steps) and then once more
// without computing anything, so the twin runs the step `warmup` times where
// the captured loop calls capture().
#include <gtest/gtest.h>

#include <cstring>
#include <functional>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "capture/graph_impl.h"
#include "encore/autograd.h"
#include "encore/capture.h"
#include "encore/encore.h"
#include "encore/graphed.h"
#include "encore/nn.h"
#include "encore/optim.h"
#include "tests/backends/cuda_test_util.h"
#include "tests/test_util.h"

namespace encore {
namespace {

constexpr int kSteps = 50;
constexpr int kWarmup = 2;   // CaptureOptions::warmup's default

using Step = std::function<std::vector<Tensor>()>;

// A small model, its optimizer and static inputs.
struct Rig {
  std::unique_ptr<nn::Mlp> model;
  std::unique_ptr<optim::Optimizer> opt;
  Tensor x, y;
  Tensor loss() { return cross_entropy(model->forward(x), y); }
  // Batch i into the static inputs, in place.
  void fill(int i) {
    NoGradGuard no_grad;
    x.copy_(testing::random_tensor({8, 12}, 100 + i).to(x.device()));
    y.copy_(from_vector<int64_t>({0, 1, 2, 3, 4, i % 5, (i / 5) % 5, 2}).to(y.device()));
  }
};

enum class Opt { kAdamW, kSgdMomentum };

std::unique_ptr<Rig> make_rig(Opt which = Opt::kAdamW, Device dev = kCPU) {
  auto r = std::make_unique<Rig>();
  manual_seed(11);
  r->model = std::make_unique<nn::Mlp>(std::vector<int64_t>{12, 16, 5});
  r->model->to(dev);
  if (which == Opt::kAdamW) {
    r->opt = std::make_unique<optim::AdamW>(r->model->parameters(), optim::AdamWOptions{.lr = 1e-2});
  } else {
    r->opt = std::make_unique<optim::SGD>(r->model->parameters(),
                                          optim::SgdOptions{.lr = 5e-2, .momentum = 0.9});
  }
  r->x = zeros({8, 12}, dev);
  r->y = zeros({8}, kInt64, dev);
  // One eager step, so that gradients and optimizer state exist (NOTE [ Lazily created state ]).
  r->fill(0);
  r->opt->zero_grad();
  r->loss().backward();
  r->opt->step();
  return r;
}

// Bits of t (any float dtype) as bytes, read without touching autograd state.
std::vector<unsigned char> bits(const Tensor& t) {
  Tensor c = t.to(kCPU).contiguous();
  const auto* p = static_cast<const unsigned char*>(c.data_ptr());
  return {p, p + c.numel() * dtype_size(c.dtype())};
}

// The gradient as stored (Tensor::grad() would fill pending zeros, changing
// the state under test) and the lazy flag.
const Tensor& stored_grad(const Tensor& p) { return p.impl()->autograd->grad; }
bool zero_pending(const Tensor& p) { return p.impl()->autograd->grad_zero_pending_; }

// Parameters, stored gradients and the lazy zero_grad flags of both rigs are
// the same bits.
void expect_same_state(const Rig& eager, const Rig& captured, int step) {
  const std::vector<Tensor> a = eager.model->parameters(), b = captured.model->parameters();
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    ASSERT_EQ(bits(a[i]), bits(b[i])) << "step " << step << ": parameter " << i << " differs from eager";
    ASSERT_EQ(bits(stored_grad(a[i])), bits(stored_grad(b[i])))
        << "step " << step << ": gradient " << i << " differs from eager";
    ASSERT_EQ(zero_pending(a[i]), zero_pending(b[i]))
        << "step " << step << ": zero_grad() pending on parameter " << i << " differs from eager";
  }
}

void run_eagerly(const Step& step, int times) {
  for (int i = 0; i < times; ++i) step();
}

void expect_refused(const absl::Status& s, std::initializer_list<const char*> words) {
  ASSERT_FALSE(s.ok()) << "expected a refusal naming " << *words.begin();
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
  for (const char* w : words) EXPECT_NE(s.message().find(w), absl::string_view::npos) << "'" << w << "' in " << s;
}

// ---- 1. The lazy zero_grad flag across the capture boundary ----

// A loop whose captured part is `step` and whose eager parts run around
// every replay: before(rig) and after(rig). The eager twin runs the same
// with the step run eagerly. Expects bit-equality over kSteps, or (when
// `refusal` is given) that the first replay is refused naming those words.
struct Loop {
  std::function<std::vector<Tensor>(Rig&)> step;
  std::function<void(Rig&)> before = [](Rig&) {};
  std::function<void(Rig&)> after = [](Rig&) {};
};

void expect_loop_matches_eager(const Loop& loop, Opt opt = Opt::kAdamW, Device dev = kCPU,
                               const CaptureOptions& options = {}) {
  std::unique_ptr<Rig> eager = make_rig(opt, dev), cap = make_rig(opt, dev);
  // capture() where the eager twin runs the step kWarmup times.
  loop.before(*eager);
  run_eagerly([&] { return loop.step(*eager); }, kWarmup);
  loop.before(*cap);
  absl::StatusOr<Graph> graph = capture([&] { return loop.step(*cap); }, options);
  ASSERT_TRUE(graph.ok()) << graph.status();
  loop.after(*eager);
  loop.after(*cap);
  expect_same_state(*eager, *cap, 0);
  for (int i = 1; i <= kSteps; ++i) {
    eager->fill(i);
    loop.before(*eager);
    const std::vector<Tensor> outs = loop.step(*eager);
    loop.after(*eager);
    cap->fill(i);
    loop.before(*cap);
    const absl::Status replayed = graph->replay();
    ASSERT_TRUE(replayed.ok()) << "step " << i << ": " << replayed;
    loop.after(*cap);
    if (!outs.empty()) {
      ASSERT_EQ(bits(outs[0]), bits(graph->output(0))) << "step " << i << ": loss differs from eager";
    }
    expect_same_state(*eager, *cap, i);
  }
}

absl::Status first_replay_of(const Loop& loop, Opt opt = Opt::kAdamW) {
  std::unique_ptr<Rig> cap = make_rig(opt);
  loop.before(*cap);
  absl::StatusOr<Graph> graph = capture([&] { return loop.step(*cap); });
  if (!graph.ok()) return graph.status();
  loop.after(*cap);
  absl::Status s;
  for (int i = 1; i <= kSteps && s.ok(); ++i) {
    cap->fill(i);
    loop.before(*cap);
    s = graph->replay();
    loop.after(*cap);
  }
  return s;
}

std::vector<Tensor> whole_step(Rig& r) {
  r.opt->zero_grad();
  Tensor loss = r.loss();
  loss.backward();
  r.opt->step();
  return {loss};
}
std::vector<Tensor> forward_backward(Rig& r) {
  Tensor loss = r.loss();
  loss.backward();
  return {loss};
}
std::vector<Tensor> zero_forward_backward(Rig& r) {
  r.opt->zero_grad();
  return forward_backward(r);
}

TEST(ReplayContractTest, TheWholeStepCapturedTrainsAsEager) {
  expect_loop_matches_eager({.step = whole_step});
  expect_loop_matches_eager({.step = whole_step}, Opt::kSgdMomentum);
}

TEST(ReplayContractTest, ZeroGradInsideAndTheOptimizerOutsideTrainsAsEager) {
  expect_loop_matches_eager({.step = zero_forward_backward, .after = [](Rig& r) { r.opt->step(); }});
  expect_loop_matches_eager({.step = zero_forward_backward, .after = [](Rig& r) { r.opt->step(); }},
                            Opt::kSgdMomentum);
}

TEST(ReplayContractTest, ZeroGradAtTheEndOfTheCapturedStepTrainsAsEager) {
  // zero_grad() last: every replay starts with zeros pending, as capture saw.
  const Loop loop{.step = [](Rig& r) {
                    Tensor loss = r.loss();
                    loss.backward();
                    r.opt->step();
                    r.opt->zero_grad();
                    return std::vector<Tensor>{loss};
                  }};
  expect_loop_matches_eager(loop);
}

TEST(ReplayContractTest, ZeroGradBetweenReplaysOfAForwardBackwardGraphIsRefused) {
  // The graph was captured accumulating (its warm-ups left no zeros pending):
  // with zero_grad() before each replay an eager step would overwrite.
  const absl::Status s = first_replay_of({.step = forward_backward,
                                          .before = [](Rig& r) { r.opt->zero_grad(); },
                                          .after = [](Rig& r) { r.opt->step(); }});
  expect_refused(s, {"replay:", "zero_grad()", "backward", "inside the captured step"});
}

TEST(ReplayContractTest, ZeroGradBeforeReplaysOfAForwardBackwardStepGraphIsRefused) {
  const absl::Status s = first_replay_of({.step = [](Rig& r) {
                                            std::vector<Tensor> out = forward_backward(r);
                                            r.opt->step();
                                            return out;
                                          },
                                          .before = [](Rig& r) { r.opt->zero_grad(); }},
                                         Opt::kSgdMomentum);
  expect_refused(s, {"replay:", "zero_grad()", "adds to the gradient"});
}

TEST(ReplayContractTest, AccumulationWithTheFirstMicroBatchZeroingTrainsAsEager) {
  // K micro-batches per update: graph A zeroes and accumulates the first,
  // graph B accumulates each further one, the optimizer runs eagerly after.
  constexpr int kMicro = 3;
  std::unique_ptr<Rig> eager = make_rig(), cap = make_rig();
  run_eagerly([&] { return zero_forward_backward(*eager); }, kWarmup);
  run_eagerly([&] { return forward_backward(*eager); }, kWarmup);
  absl::StatusOr<Graph> first = capture([&] { return zero_forward_backward(*cap); });
  ASSERT_TRUE(first.ok()) << first.status();
  absl::StatusOr<Graph> more = capture([&] { return forward_backward(*cap); });
  ASSERT_TRUE(more.ok()) << more.status();
  for (int i = 1; i <= kSteps; ++i) {
    for (int m = 0; m < kMicro; ++m) {
      eager->fill(i * kMicro + m);
      m == 0 ? zero_forward_backward(*eager) : forward_backward(*eager);
      cap->fill(i * kMicro + m);
      ASSERT_TRUE((m == 0 ? first->replay() : more->replay()).ok()) << "step " << i << " micro-batch " << m;
    }
    eager->opt->step();
    cap->opt->step();
    expect_same_state(*eager, *cap, i);
  }
}

TEST(ReplayContractTest, AccumulationGraphAfterAnUpdateGraphThatZeroesIsRefused) {
  // "accumulate" replayed K times, then "update" = step + zero_grad: the
  // accumulate graph was captured adding, but after the update zeros are
  // pending, where eager would overwrite.
  std::unique_ptr<Rig> cap = make_rig();
  absl::StatusOr<Graph> accumulate = capture([&] { return forward_backward(*cap); });
  ASSERT_TRUE(accumulate.ok()) << accumulate.status();
  absl::StatusOr<Graph> update = capture([&] {
    cap->opt->step();
    cap->opt->zero_grad();
    return std::vector<Tensor>{};
  });
  ASSERT_TRUE(update.ok()) << update.status();
  expect_refused(accumulate->replay(), {"replay:", "adds to the gradient", "zero_grad()", "first micro-batch"});
}

TEST(ReplayContractTest, ARefusedReplayChangesNothing) {
  std::unique_ptr<Rig> cap = make_rig(), twin = make_rig();
  absl::StatusOr<Graph> graph = capture([&] { return forward_backward(*cap); });
  ASSERT_TRUE(graph.ok()) << graph.status();
  run_eagerly([&] { return forward_backward(*twin); }, kWarmup);
  cap->opt->zero_grad();
  twin->opt->zero_grad();
  ASSERT_FALSE(graph->replay().ok());
  expect_same_state(*twin, *cap, 0);
}

// A batch with a class id out of range (NOTE [ Index checks ]): the CPU
// replay runs the whole step with that row skipped and returns
// InvalidArgument naming the op, and leaves the host as after a step that
// ran (NOTE [ A replay that ran ] in capture/executable.h): the output holds
// its loss, the lazy zero_grad flags are the step's, it counts as a replay.
// Its eager twin is the step over the batch with that row ignored
// (ignore_index), which the kernels do to a bad id bit for bit; the replays
// after it, over good batches, go on matching the twin.
void expect_bad_class_id_replays_run_as_ignored_rows(const CaptureOptions& options) {
  std::unique_ptr<Rig> eager = make_rig(), cap = make_rig();
  run_eagerly([&] { return whole_step(*eager); }, kWarmup);
  absl::StatusOr<Graph> graph = capture([&] { return whole_step(*cap); }, options);
  ASSERT_TRUE(graph.ok()) << graph.status();
  auto set_label = [](Rig& r, int64_t row, int64_t label) {
    NoGradGuard no_grad;
    r.y.slice(0, row, row + 1).fill_(static_cast<double>(label));
  };
  for (int i = 1; i <= 6; ++i) {
    const bool bad = i == 1 || i == 4;   // the first replay: no earlier one filled the outputs
    eager->fill(i);
    cap->fill(i);
    if (bad) {
      set_label(*eager, 1, -100);   // ignore_index
      set_label(*cap, 1, 7);        // 5 classes
    }
    // zero_grad() before each step too (whole_step zeroes first, so a
    // pending flag is allowed): the step leaves none pending.
    eager->opt->zero_grad();
    cap->opt->zero_grad();
    const std::vector<Tensor> outs = whole_step(*eager);
    const absl::Status s = graph->replay();
    if (bad) {
      ASSERT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << "step " << i << ": " << s;
      EXPECT_NE(s.message().find("cross_entropy"), absl::string_view::npos) << s;
    } else {
      ASSERT_TRUE(s.ok()) << "step " << i << ": " << s;
    }
    EXPECT_EQ(graph->internals().replays, i);
    ASSERT_EQ(bits(outs[0]), bits(graph->output(0))) << "step " << i << ": loss differs from eager";
    expect_same_state(*eager, *cap, i);
  }
}

TEST(ReplayContractTest, AReplayOverABadClassIdRunsTheStepWithoutThatRowAndSaysSo) {
  expect_bad_class_id_replays_run_as_ignored_rows({});
}

TEST(ReplayContractTest, AVerifiedReplayOverABadClassIdRunsTheStepWithoutThatRowAndSaysSo) {
  expect_bad_class_id_replays_run_as_ignored_rows({.verify_every = 1});
}

// ---- 2. Host values a step computes: scalars, tensor choices, fills ----

TEST(ReplayContractTest, AHostScalarThatChangesPerCallIsRefusedNamingTheOpAndArgument) {
  std::unique_ptr<Rig> r = make_rig();
  int calls = 0;
  absl::StatusOr<Graph> graph = capture([&] {
    r->opt->zero_grad();
    Tensor loss = mul(r->loss(), 1024.0 / (1 << (++calls % 3)));   // a loss scale that changes per call
    loss.backward();
    r->opt->step();
    return std::vector<Tensor>{loss};
  });
  ASSERT_FALSE(graph.ok());
  expect_refused(graph.status(), {"capture: kernel #", "'mul_scalar'", "argument 's'", "in the capture run",
                                  "hold it in a tensor"});
}

TEST(ReplayContractTest, AConstantHostScalarTrainsAsEagerAndIsListedAsFrozen) {
  const Loop loop{.step = [](Rig& r) {
    r.opt->zero_grad();
    Tensor loss = mul(r.loss(), 0.5);
    loss.backward();
    r.opt->step();
    return std::vector<Tensor>{loss};
  }};
  expect_loop_matches_eager(loop);
  std::unique_ptr<Rig> r = make_rig();
  absl::StatusOr<Graph> graph = capture([&] { return loop.step(*r); });
  ASSERT_TRUE(graph.ok()) << graph.status();
  // The scale appears twice: the forward's mul and its backward's.
  std::set<std::string> phases;
  for (const FrozenValue& f : graph->frozen()) {
    if (std::string(f.op) == "mul_scalar" && f.name == "s" && f.value == "0.5") {
      EXPECT_LT(f.node, static_cast<size_t>(graph->stats().kernels));
      EXPECT_STREQ(graph->internals().node_op(f.node), "mul_scalar");
      phases.insert(f.phase);
    }
  }
  EXPECT_EQ(phases, (std::set<std::string>{"forward", "backward"})) << "the loss scale 0.5 in Graph::frozen()";
}

TEST(ReplayContractTest, AChangingScalarHeldInATensorTrainsAsEager) {
  // The recommended way: the scale lives in a 0-d tensor refilled before each step.
  std::unique_ptr<Rig> eager = make_rig(), cap = make_rig();
  Tensor scale_e = full({}, 1.0, kFloat32), scale_c = full({}, 1.0, kFloat32);
  auto step = [](Rig& r, const Tensor& scale) {
    r.opt->zero_grad();
    Tensor loss = mul(r.loss(), scale);
    loss.backward();
    r.opt->step();
    return std::vector<Tensor>{loss};
  };
  run_eagerly([&] { return step(*eager, scale_e); }, kWarmup);
  absl::StatusOr<Graph> graph = capture([&] { return step(*cap, scale_c); });
  ASSERT_TRUE(graph.ok()) << graph.status();
  for (int i = 1; i <= kSteps; ++i) {
    const double s = 1.0 / (1 + i % 4);
    eager->fill(i);
    scale_e.fill_(s);
    const std::vector<Tensor> outs = step(*eager, scale_e);
    cap->fill(i);
    scale_c.fill_(s);
    ASSERT_TRUE(graph->replay().ok());
    ASSERT_EQ(bits(outs[0]), bits(graph->output(0))) << "step " << i;
    expect_same_state(*eager, *cap, i);
  }
}

TEST(ReplayContractTest, DoubleBufferedInputsChosenByACounterAreRefused) {
  std::unique_ptr<Rig> r = make_rig();
  Tensor x0 = testing::random_tensor({8, 12}, 1), x1 = testing::random_tensor({8, 12}, 2);
  int calls = 0;
  absl::StatusOr<Graph> graph = capture([&] {
    const Tensor& x = (++calls % 2 == 0) ? x0 : x1;
    r->opt->zero_grad();
    Tensor loss = cross_entropy(r->model->forward(x), r->y);
    loss.backward();
    r->opt->step();
    return std::vector<Tensor>{loss};
  });
  ASSERT_FALSE(graph.ok());
  expect_refused(graph.status(), {"capture: kernel #", "another persistent tensor", "x.copy_(next)"});
}

TEST(ReplayContractTest, ALearningRateFilledInsideTheStepIsRefusedWhenItChanges) {
  std::unique_ptr<Rig> r = make_rig();
  int calls = 0;
  absl::StatusOr<Graph> graph = capture([&] {
    {
      NoGradGuard no_grad;
      Tensor lr = r->opt->lr();
      lr.fill_(1e-2 / ++calls);   // a schedule computed on the host, inside the step
    }
    return whole_step(*r);
  });
  ASSERT_FALSE(graph.ok());
  expect_refused(graph.status(), {"'fill'", "argument 'value'", "f32 0.00"});
}

TEST(ReplayContractTest, SetLrInsideTheStepIsRefused) {
  std::unique_ptr<Rig> r = make_rig();
  absl::StatusOr<Graph> graph = capture([&] {
    r->opt->set_lr(1e-3);
    return whole_step(*r);
  });
  ASSERT_FALSE(graph.ok());
  expect_refused(graph.status(), {"set_lr", "a host write (set_lr, from_vector, a seed) goes between replays"});
}

TEST(ReplayContractTest, AConstantFillInsideTheStepTrainsAsEagerAndIsListedAsFrozen) {
  const Loop loop{.step = [](Rig& r) {
    {
      NoGradGuard no_grad;
      Tensor lr = r.opt->lr();
      lr.fill_(2e-2);
    }
    return whole_step(r);
  }};
  expect_loop_matches_eager(loop);
  std::unique_ptr<Rig> r = make_rig();
  absl::StatusOr<Graph> graph = capture([&] { return loop.step(*r); });
  ASSERT_TRUE(graph.ok()) << graph.status();
  bool found = false;
  for (const FrozenValue& f : graph->frozen()) found |= std::string(f.op) == "fill" && f.value == "f32 0.0199999996";
  EXPECT_TRUE(found);
}

TEST(ReplayContractTest, AShapeChosenOnTheHostIsRefused) {
  std::unique_ptr<Rig> r = make_rig();
  int calls = 0;
  absl::StatusOr<Graph> graph = capture([&] {
    NoGradGuard no_grad;
    // A view of a persistent tensor: no allocation differs, only the launch's sizes.
    Tensor part = r->x.slice(0, 0, ++calls == 3 ? 4 : 8);
    return std::vector<Tensor>{part.sum()};
  });
  ASSERT_FALSE(graph.ok());
  expect_refused(graph.status(), {"capture: kernel #0 'sum'", "in the capture run"});
}

// ---- 3. Inputs ----

TEST(ReplayContractTest, BoundInputsRefilledThroughReplayTrainAsEager) {
  std::unique_ptr<Rig> eager = make_rig(), cap = make_rig();
  run_eagerly([&] { return whole_step(*eager); }, kWarmup);
  absl::StatusOr<Graph> graph = capture([&] { return whole_step(*cap); }, {.inputs = {&cap->x, &cap->y}});
  ASSERT_TRUE(graph.ok()) << graph.status();
  std::unique_ptr<Rig> batches = make_rig();   // only for its fill()
  for (int i = 1; i <= kSteps; ++i) {
    eager->fill(i);
    const std::vector<Tensor> outs = whole_step(*eager);
    batches->fill(i);
    // New tensors each step, as a data loader hands them out.
    ASSERT_TRUE(graph->replay({batches->x.clone(), batches->y.clone()}).ok()) << "step " << i;
    ASSERT_EQ(bits(outs[0]), bits(graph->output(0))) << "step " << i;
    expect_same_state(*eager, *cap, i);
  }
}

TEST(ReplayContractTest, AReboundInputIsRefusedEvenWhileAnotherHandleKeepsTheOldOne) {
  std::unique_ptr<Rig> r = make_rig();
  absl::StatusOr<Graph> graph = capture([&] { return whole_step(*r); }, {.inputs = {&r->x, &r->y}});
  ASSERT_TRUE(graph.ok()) << graph.status();
  ASSERT_TRUE(graph->replay().ok());
  Tensor keep = r->x;                              // e.g. a data loader's queue still holds it
  r->x = testing::random_tensor({8, 12}, 7);       // rebinding instead of x.copy_(...)
  expect_refused(graph->replay(), {"replay: input 0", "rebound", "copy_("});
  r->x = keep;                                     // bound back: replays again
  EXPECT_TRUE(graph->replay().ok());
}

TEST(ReplayContractTest, ReplayWithInputsChecksThem) {
  std::unique_ptr<Rig> r = make_rig();
  absl::StatusOr<Graph> graph = capture([&] { return whole_step(*r); }, {.inputs = {&r->x, &r->y}});
  ASSERT_TRUE(graph.ok()) << graph.status();
  absl::Status s = graph->replay({r->x.clone()});
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_NE(s.message().find("2 inputs"), absl::string_view::npos) << s;
  s = graph->replay({zeros({4, 12}), r->y.clone()});
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_NE(s.message().find("input 0"), absl::string_view::npos) << s;
  s = graph->replay({r->x.clone(), zeros({8})});
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_NE(s.message().find("i64"), absl::string_view::npos) << s;
}

TEST(ReplayContractTest, AnInputTheStepNeverReadsIsRefusedAtCapture) {
  std::unique_ptr<Rig> r = make_rig();
  Tensor unused = zeros({3});
  absl::StatusOr<Graph> graph = capture([&] { return whole_step(*r); }, {.inputs = {&r->x, &unused}});
  ASSERT_FALSE(graph.ok());
  EXPECT_EQ(graph.status().code(), absl::StatusCode::kInvalidArgument) << graph.status();
  EXPECT_NE(graph.status().message().find("input 1"), absl::string_view::npos) << graph.status();
}

TEST(ReplayContractTest, AnUnboundInputReboundWithNoOtherHandleIsRefused) {
  std::unique_ptr<Rig> r = make_rig();
  absl::StatusOr<Graph> graph = capture([&] { return whole_step(*r); });
  ASSERT_TRUE(graph.ok()) << graph.status();
  r->x = testing::random_tensor({8, 12}, 7);   // the old x is gone: only the graph holds it
  expect_refused(graph->replay(), {"replay:", "freed or replaced", "copy_()"});
}

// ---- Several graphs over the same tensors ----
//
// NOTE [ Counting the graphs' own references ] (capture/held.h): every graph
// that uses a tensor holds a reference to it; those must not keep a tensor
// its user freed alive in the other graphs' eyes, however many there are.

// Graphs of the first n steps (fewer when a capture fails, which fails the test).
std::vector<Graph> capture_first(const std::vector<Step>& steps, size_t n) {
  std::vector<Graph> graphs;
  for (size_t i = 0; i < n; ++i) {
    absl::StatusOr<Graph> g = capture(steps[i]);
    EXPECT_TRUE(g.ok()) << g.status();
    if (!g.ok()) break;
    graphs.push_back(*std::move(g));
  }
  return graphs;
}

// One to three graphs read one weight; rebinding the weight's only variable
// frees it, and every graph refuses to replay. Another handle keeps it
// alive, and dropping a graph leaves the others' checks right.
TEST(ReplayContractTest, ATensorFreedUnderSeveralGraphsIsRefusedByEach) {
  for (size_t n : {1, 2, 3}) {
    SCOPED_TRACE(::testing::Message() << n << " graphs");
    Tensor x = testing::random_tensor({8, 12}, 3), w = testing::random_tensor({12, 5}, 4);
    const std::vector<Step> steps = {[&] { return std::vector<Tensor>{matmul(x, w)}; },
                                     [&] { return std::vector<Tensor>{relu(matmul(x, w))}; },
                                     [&] { return std::vector<Tensor>{sum(matmul(x, w))}; }};
    std::vector<Graph> graphs = capture_first(steps, n);
    ASSERT_EQ(graphs.size(), n);
    Tensor old = w;
    w = testing::random_tensor({12, 5}, 5);   // rebound; `old` still holds the tensor the graphs read
    for (Graph& g : graphs) EXPECT_TRUE(g.replay().ok());
    if (n == 3) graphs.erase(graphs.begin());
    old = Tensor();                           // now only the graphs hold it
    for (Graph& g : graphs) expect_refused(g.replay(), {"replay:", "freed or replaced", "copy_()"});
  }
}

// A persistent tensor the step returns is held by the graph as an output
// (a detached view of it); that handle is the graph's own too, so once the
// user's variable is rebound every graph returning it refuses, as for any
// other freed tensor. Before, the output kept the old tensor alive in the
// graphs' eyes and they went on training it.
TEST(ReplayContractTest, AReturnedTensorFreedByItsUserIsRefused) {
  for (size_t n : {1, 2}) {
    SCOPED_TRACE(::testing::Message() << n << " graphs");
    Tensor x = testing::random_tensor({8, 12}, 3), w = testing::random_tensor({12, 5}, 4);
    const std::vector<Step> steps = {[&] { return std::vector<Tensor>{matmul(x, w), w}; },
                                     [&] { return std::vector<Tensor>{sum(matmul(x, w)), w.t()}; }};
    std::vector<Graph> graphs = capture_first(steps, n);
    ASSERT_EQ(graphs.size(), n);
    Tensor old = w;
    w = testing::random_tensor({12, 5}, 5);   // rebound; `old` still holds the tensor the graphs read
    for (Graph& g : graphs) EXPECT_TRUE(g.replay().ok());
    old = Tensor();                           // now only the graphs hold it, one of them as its output
    for (Graph& g : graphs) expect_refused(g.replay(), {"replay:", "freed or replaced", "copy_()"});
  }
}

// A training graph, an evaluation graph and (with three) a forward-backward
// graph over one model and optimizer; the user builds a new model and
// optimizer, freeing the old parameters and state. Each graph refuses.
TEST(ReplayContractTest, GraphsOverAModelTheUserReplacedAreEachRefused) {
  for (size_t n : {2, 3}) {
    SCOPED_TRACE(::testing::Message() << n << " graphs");
    std::unique_ptr<Rig> r = make_rig();
    const std::vector<Step> steps = {[&] { return whole_step(*r); },
                                     [&] {
                                       NoGradGuard no_grad;
                                       return std::vector<Tensor>{r->loss()};
                                     },
                                     [&] { return zero_forward_backward(*r); }};
    std::vector<Graph> graphs = capture_first(steps, n);
    ASSERT_EQ(graphs.size(), n);
    for (Graph& g : graphs) ASSERT_TRUE(g.replay().ok());
    std::unique_ptr<Rig> fresh = make_rig();
    std::swap(r->model, fresh->model);   // the old model and optimizer go with `fresh`
    std::swap(r->opt, fresh->opt);
    fresh.reset();
    for (size_t i = 0; i < n; ++i) {
      SCOPED_TRACE(::testing::Message() << "graph " << i);
      expect_refused(graphs[i].replay(), {"replay:", "freed or replaced"});
    }
  }
}

// A backward-only graph: the forward runs eagerly, the step backpropagates
// the loss variable, the optimizer runs eagerly. A new forward rebinds the
// variable; the graph would still backpropagate the old one, and it is
// refused because the old forward's saved tensors are gone.
TEST(ReplayContractTest, ABackwardOnlyGraphOfALossRecomputedOutsideIsRefused) {
  std::unique_ptr<Rig> r = make_rig();
  Tensor loss = r->loss();
  absl::StatusOr<Graph> graph = capture([&] {
    r->opt->zero_grad();
    autograd::backward({loss}, {}, /*retain_graph=*/true);
    return std::vector<Tensor>{};
  });
  ASSERT_TRUE(graph.ok()) << graph.status();
  ASSERT_TRUE(graph->replay().ok());
  r->opt->step();
  r->fill(1);
  loss = r->loss();
  expect_refused(graph->replay(), {"replay:", "freed or replaced"});
}

TEST(ReplayContractTest, CopyStyleInputsStillWork) {
  expect_loop_matches_eager({.step = whole_step});   // fill() refills x and y with copy_()
}

// ---- The same loops on CUDA (skipped without a GPU) ----

TEST(ReplayContractTest, CudaLoopsTrainAsEagerOrAreRefused) {
  ENCORE_SKIP_WITHOUT_GPU();
  const Device gpu = Device::cuda(0);
  expect_loop_matches_eager({.step = whole_step}, Opt::kAdamW, gpu);
  expect_loop_matches_eager({.step = zero_forward_backward, .after = [](Rig& r) { r.opt->step(); }},
                            Opt::kSgdMomentum, gpu);
  expect_loop_matches_eager({.step = whole_step}, Opt::kAdamW, gpu, {.verify_every = 2});
  std::unique_ptr<Rig> r = make_rig(Opt::kAdamW, gpu);
  absl::StatusOr<Graph> graph = capture([&] { return forward_backward(*r); });
  ASSERT_TRUE(graph.ok()) << graph.status();
  r->opt->zero_grad();
  expect_refused(graph->replay(), {"replay:", "zero_grad()"});
}

// ---- 4. Shadow verification ----

TEST(ReplayContractTest, VerifiedReplaysTrainAsEager) {
  for (int every : {1, 3}) {
    expect_loop_matches_eager({.step = whole_step}, Opt::kAdamW, kCPU, {.verify_every = every});
    expect_loop_matches_eager({.step = zero_forward_backward, .after = [](Rig& r) { r.opt->step(); }},
                              Opt::kSgdMomentum, kCPU, {.verify_every = every});
  }
}

// A step that depends on host state capture() cannot see (a counter that
// changes the scale only after the capture run): shadow verification finds
// the difference, names it, and leaves the eager step's state behind.
TEST(ReplayContractTest, VerificationFindsHostStateCaptureCouldNotSeeAndKeepsTheEagerState) {
  Tensor w = zeros({4}), x = full({4}, 1.0);
  int calls = 0;
  auto step = [&] {
    w.add_(x, ++calls <= 3 ? 1.0 : 2.0);   // calls 1-3: warm-ups and the capture run
    return std::vector<Tensor>{mul(w, 3.0)};
  };
  absl::StatusOr<Graph> graph = capture(step, {.verify_every = 2, .names = {{"w", w}}});
  ASSERT_TRUE(graph.ok()) << graph.status();
  ASSERT_TRUE(graph->replay().ok());   // replay 1, not verified: w = 2 + 1 (the warm-ups' 2, then the graph's 1)
  EXPECT_EQ(w.to_vector<float>(), std::vector<float>(4, 3.f));
  absl::Status s = graph->replay();    // replay 2, verified: the eager step adds 2
  EXPECT_EQ(s.code(), absl::StatusCode::kInternal) << s;
  EXPECT_NE(s.message().find("replay verification (replay #2): output 0 differs from the eager step at element 0: "
                             "replay f32 12, eager f32 15"),
            absl::string_view::npos)
      << s;
  EXPECT_EQ(w.to_vector<float>(), std::vector<float>(4, 5.f)) << "the state is the eager step's";
  EXPECT_EQ(graph->output(0).to_vector<float>(), std::vector<float>(4, 15.f)) << "the outputs are the eager step's";
}

TEST(ReplayContractTest, VerificationNamesTheFirstDifferingTensor) {
  Tensor w = zeros({4});
  int calls = 0;
  absl::StatusOr<Graph> graph = capture(
      [&] {
        w.add_(full({4}, 1.0), ++calls <= 3 ? 1.0 : -1.0);
        return std::vector<Tensor>{};
      },
      {.verify_every = 1, .names = {{"w", w}}});
  ASSERT_TRUE(graph.ok()) << graph.status();
  const absl::Status s = graph->replay();
  EXPECT_EQ(s.code(), absl::StatusCode::kInternal) << s;
  EXPECT_NE(s.message().find("'w' differs from the eager step at element 0: replay f32 3, eager f32 1"),
            absl::string_view::npos)
      << s;
  EXPECT_EQ(w.to_vector<float>(), std::vector<float>(4, 1.f));
}

TEST(ReplayContractTest, NegativeVerifyEveryIsRefused) {
  Tensor w = zeros({4});
  absl::StatusOr<Graph> graph = capture([&] { return std::vector<Tensor>{add(w, 1.0)}; }, {.verify_every = -1});
  EXPECT_EQ(graph.status().code(), absl::StatusCode::kInvalidArgument) << graph.status();
}

// ---- 5. Host state beyond zero_grad: training mode, requires_grad ----

// A linear layer with dropout after it, trained by SGD; the step reads the
// dropout module's training mode.
struct DropoutRig {
  nn::Linear lin{12, 5};
  nn::Dropout drop{0.5};
  std::unique_ptr<optim::SGD> opt;
  Tensor x = testing::random_tensor({8, 12}, 3), y = from_vector<int64_t>({0, 1, 2, 3, 4, 0, 1, 2});
  DropoutRig() {
    opt = std::make_unique<optim::SGD>(lin.parameters(), optim::SgdOptions{.lr = 0.1});
    step();   // gradients exist before capture
  }
  std::vector<Tensor> step() {
    opt->zero_grad();
    Tensor loss = cross_entropy(drop.forward(lin.forward(x)), y);
    loss.backward();
    opt->step();
    return {loss};
  }
};

TEST(ReplayContractTest, AModuleInAnotherTrainingModeIsRefusedAndReplaysBackInItsMode) {
  manual_seed(5);
  DropoutRig r;
  absl::StatusOr<Graph> graph = capture([&] { return r.step(); });
  ASSERT_TRUE(graph.ok()) << graph.status();
  ASSERT_TRUE(graph->replay().ok());
  const std::vector<unsigned char> before = bits(r.lin.weight);
  r.drop.eval();   // an eager step would now skip dropout's kernels
  expect_refused(graph->replay(), {"replay:", "training mode", "train()", "eval()"});
  EXPECT_EQ(bits(r.lin.weight), before) << "a refused replay runs nothing";
  r.drop.train();
  EXPECT_TRUE(graph->replay().ok());
}

TEST(ReplayContractTest, AStepThatSetsTheModeItselfReplaysInEitherModeAndLeavesItsOwn) {
  manual_seed(5);
  DropoutRig r;
  int calls = 0;
  auto eval_step = [&] {   // sets the mode before reading it: no precondition, the step's mode afterwards
    ++calls;
    r.drop.eval();
    Tensor loss = cross_entropy(r.drop.forward(r.lin.forward(r.x)), r.y);
    r.drop.train();
    return std::vector<Tensor>{loss};
  };
  absl::StatusOr<Graph> graph = capture(eval_step);
  ASSERT_TRUE(graph.ok()) << graph.status();
  for (bool mode : {false, true}) {
    r.drop.train(mode);
    ASSERT_TRUE(graph->replay().ok());
    EXPECT_TRUE(r.drop.is_training()) << "the replay leaves the mode as the step does";
  }
  // Eval mode: no dropout, so the loss is the plain one.
  r.drop.eval();
  const std::vector<unsigned char> expected = bits(cross_entropy(r.lin.forward(r.x), r.y));
  EXPECT_EQ(bits(graph->output(0)), expected);
  EXPECT_EQ(calls, 3) << "two warm-ups and the capture run; replays call nothing";
}

TEST(ReplayContractTest, AGraphWhoseModuleWasDestroyedIsRefused) {
  manual_seed(5);
  auto lin = std::make_unique<nn::Linear>(12, 5);
  auto drop = std::make_unique<nn::Dropout>(0.5);
  Tensor x = testing::random_tensor({8, 12}, 3);
  Tensor weight = lin->weight, bias = lin->bias;   // the parameters outlive the modules
  absl::StatusOr<Graph> graph = capture([&] {
    NoGradGuard no_grad;
    return std::vector<Tensor>{drop->forward(lin->forward(x))};
  });
  ASSERT_TRUE(graph.ok()) << graph.status();
  ASSERT_TRUE(graph->replay().ok());
  drop.reset();
  expect_refused(graph->replay(), {"replay:", "training mode", "destroyed"});
}

TEST(ReplayContractTest, FreezingOrUnfreezingAParameterAfterCaptureIsRefused) {
  std::unique_ptr<Rig> r = make_rig();
  absl::StatusOr<Graph> graph = capture([&] { return whole_step(*r); }, {.names = r->model->named_parameters()});
  ASSERT_TRUE(graph.ok()) << graph.status();
  ASSERT_TRUE(graph->replay().ok());
  Tensor first = r->model->parameters()[0];
  const std::vector<unsigned char> before = bits(first);
  first.requires_grad_(false);   // an eager step would no longer compute its gradient
  expect_refused(graph->replay(),
                 {"replay: requires_grad of the parameter '", "changed since capture", "Capture again"});
  EXPECT_EQ(bits(first), before) << "a refused replay runs nothing";
  first.requires_grad_(true);    // back as it was: still refused, the graph cannot tell (capture again)
  expect_refused(graph->replay(), {"requires_grad"});
  r->opt->zero_grad();
  absl::StatusOr<Graph> again = capture([&] { return whole_step(*r); });
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_TRUE(again->replay().ok());

  // Unfreezing a tensor a training step reads without training it: an
  // eager backward would now compute its gradient.
  Tensor frozen = testing::random_tensor({8, 12}, 9);
  absl::StatusOr<Graph> reads = capture([&] {
    r->opt->zero_grad();
    Tensor loss = add(r->loss(), mul(sum(mul(r->x, frozen)), 0.0));
    loss.backward();
    r->opt->step();
    return std::vector<Tensor>{loss};
  });
  ASSERT_TRUE(reads.ok()) << reads.status();
  ASSERT_TRUE(reads->replay().ok());
  frozen.requires_grad_(true);
  expect_refused(reads->replay(), {"requires_grad", "changed since capture"});
  frozen.requires_grad_(false);

  // A forward-only step computes no gradient whatever requires_grad says: it
  // replays (it was refused too).
  absl::StatusOr<Graph> forward = capture([&] { return std::vector<Tensor>{mul(r->x, frozen)}; });
  ASSERT_TRUE(forward.ok()) << forward.status();
  frozen.requires_grad_(true);
  ASSERT_TRUE(forward->replay().ok());
  EXPECT_EQ(bits(forward->output(0)), bits(mul(r->x, frozen).detach()));
}

// Two heads on one trunk under one optimizer (multi-task training), each
// trained by its own step: a head's parameters have no gradient until its
// step first runs.
struct TwoHeads {
  nn::Linear trunk{12, 16}, head_a{16, 5}, head_b{16, 5};
  std::unique_ptr<optim::AdamW> opt;
  Tensor x = testing::random_tensor({8, 12}, 3);
  Tensor y = from_vector<int64_t>({0, 1, 2, 3, 4, 0, 1, 2});
  TwoHeads() {
    std::vector<Tensor> params = trunk.parameters();
    for (const nn::Linear* head : {&head_a, &head_b}) {
      for (const Tensor& p : head->parameters()) params.push_back(p);
    }
    opt = std::make_unique<optim::AdamW>(params, optim::AdamWOptions{.lr = 1e-2});
  }
  std::vector<Tensor> step(const nn::Linear& head) {
    opt->zero_grad();
    Tensor loss = cross_entropy(head.forward(relu(trunk.forward(x))), y);
    loss.backward();
    opt->step();
    return {loss};
  }
  std::vector<Tensor> params() const {
    std::vector<Tensor> out = trunk.parameters();
    for (const nn::Linear* head : {&head_a, &head_b}) {
      for (const Tensor& p : head->parameters()) out.push_back(p);
    }
    return out;
  }
};

// A parameter without a gradient at capture is skipped by the optimizer and
// zero_grad() on the host, so the graph never touches it. Once another step
// gives it a gradient, an eager step would update it (AdamW's moments and
// weight decay): the replay was silently wrong, now refused.
TEST(ReplayContractTest, AParameterThatGetsItsFirstGradientAfterCaptureIsRefused) {
  manual_seed(3);
  TwoHeads m;
  m.step(m.head_a);
  absl::StatusOr<Graph> graph = capture([&] { return m.step(m.head_a); });
  ASSERT_TRUE(graph.ok()) << graph.status();
  ASSERT_TRUE(graph->replay().ok());
  m.step(m.head_b);   // head B's first gradients
  const std::vector<unsigned char> before = bits(m.head_b.weight);
  expect_refused(graph->replay(), {"replay: the [5, 16] f32 parameter had no gradient when the step was captured",
                                   "an eager step would update it", "Capture again"});
  EXPECT_EQ(bits(m.head_b.weight), before) << "a refused replay runs nothing";
  absl::StatusOr<Graph> again = capture([&] { return m.step(m.head_a); });
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_TRUE(again->replay().ok());

  // Dropping a gradient the graph uses is named as such.
  m.trunk.bias.set_grad(Tensor());
  expect_refused(again->replay(), {"gradient of the [16] f32 parameter", "which has none now"});
}

std::unique_ptr<TwoHeads> seeded_heads() {
  manual_seed(3);
  return std::make_unique<TwoHeads>();
}

// Two heads trained through a GraphedStep each beside their eager twin.
struct GraphedHeads {
  std::unique_ptr<TwoHeads> eager = seeded_heads(), graphed = seeded_heads();
  GraphedStep step_a{[this](const std::vector<Tensor>&) { return graphed->step(graphed->head_a); }, {.log = false}};
  GraphedStep step_b{[this](const std::vector<Tensor>&) { return graphed->step(graphed->head_b); }, {.log = false}};
  // One call per letter of `order` ('A' or 'B'), each loss and every
  // parameter bit-equal to the eager twin's after it.
  void run(const std::string& order) {
    for (size_t i = 0; i < order.size(); ++i) {
      const bool b = order[i] == 'B';
      const std::vector<Tensor> want = eager->step(b ? eager->head_b : eager->head_a);
      const std::vector<Tensor> got = (b ? step_b : step_a)({});
      ASSERT_EQ(bits(want[0]), bits(got[0])) << "call " << i << ": loss";
      const std::vector<Tensor> pe = eager->params(), pg = graphed->params();
      for (size_t k = 0; k < pe.size(); ++k) {
        ASSERT_EQ(bits(pe[k]), bits(pg[k])) << "call " << i << ": parameter " << k << " differs from eager";
      }
    }
  }
};

// The same loop through GraphedStep, heads alternating: what the graphs
// cannot replay runs eagerly, and every parameter stays as its eager twin's.
TEST(ReplayContractTest, GraphedHeadsThatGetTheirFirstGradientLateTrainAsEager) {
  GraphedHeads h;
  const GraphedStep &step_a = h.step_a, &step_b = h.step_b;
  // Head A alone until its graph is captured and replayed, then both in turn.
  ASSERT_NO_FATAL_FAILURE(h.run("AAAAABABABABABAB"));
  // Head A's graph was refused once head B had gradients, then recorded
  // again (NOTE [ Graphs of another gradient state ]) and replayed since.
  EXPECT_EQ(step_a.stats().captures, 2);
  EXPECT_EQ(step_a.stats().eager_fallbacks, 1);
  // Head A at i = 0 (warm-up), 1 (recorded), 2-4 (replays), 6 (refused:
  // eager), 8 (warm-up), 10 (recorded), 12 and 14 (replays).
  EXPECT_EQ(step_a.stats().replays, 5);
  EXPECT_EQ(step_b.stats().captures, 1);
  EXPECT_NE(step_a.last_fallback().find("recorded again: replay: the [5, 16] f32 parameter had no gradient"),
            std::string::npos)
      << step_a.last_fallback();
}

// A post-accumulate hook registered or removed after capture: the graph
// ran the hooks of its capture run, an eager step runs the ones there are.
TEST(ReplayContractTest, HooksRegisteredOrRemovedAfterCaptureAreRefused) {
  std::unique_ptr<Rig> r = make_rig(Opt::kSgdMomentum);
  absl::StatusOr<Graph> graph = capture([&] { return whole_step(*r); });
  ASSERT_TRUE(graph.ok()) << graph.status();
  ASSERT_TRUE(graph->replay().ok());
  Tensor w = r->model->parameters()[0];
  const int64_t id = autograd::register_post_accumulate_hook(w, [](const Tensor& leaf) {
    Tensor g = leaf.grad();
    g.mul_(0.5);   // a gradient mask, added mid-training
  });
  expect_refused(graph->replay(), {"post-accumulate hooks of the [16, 12] f32 parameter", "registered or removed",
                                   "Capture again"});
  absl::StatusOr<Graph> hooked = capture([&] { return whole_step(*r); });
  ASSERT_TRUE(hooked.ok()) << hooked.status();
  ASSERT_TRUE(hooked->replay().ok());
  autograd::remove_post_accumulate_hook(w, id);
  expect_refused(hooked->replay(), {"post-accumulate hooks", "registered or removed"});
  autograd::remove_post_accumulate_hook(w, id);   // removed already: nothing changes, still refused as before
  expect_refused(hooked->replay(), {"post-accumulate hooks"});
}

// A step that changes a leaf's state and undoes it before returning (a
// hook for one backward; a GAN step freezing D while G trains) starts each
// run from the same state: it replays, as its eager twin runs.
TEST(ReplayContractTest, LeafStateChangedAndRestoredInsideTheStepTrainsAsEager) {
  const Loop hooked{.step = [](Rig& r) {
    const Tensor w = r.model->parameters()[0];
    const int64_t id = autograd::register_post_accumulate_hook(w, [](const Tensor&) {});
    std::vector<Tensor> out = whole_step(r);
    autograd::remove_post_accumulate_hook(w, id);
    return out;
  }};
  expect_loop_matches_eager(hooked);
  const Loop frozen{.step = [](Rig& r) {
    Tensor first = r.model->parameters()[0];
    first.requires_grad_(false);
    std::vector<Tensor> out = whole_step(r);
    first.requires_grad_(true);
    return out;
  }};
  expect_loop_matches_eager(frozen);
}

// A step that leaves a leaf's state changed (a hook added at every step)
// cannot be replayed: a replay runs no host code. Refused at capture.
TEST(ReplayContractTest, AStepThatLeavesALeafChangedIsRefusedAtCapture) {
  std::unique_ptr<Rig> r = make_rig();
  const Tensor w = r->model->parameters()[0];
  absl::StatusOr<Graph> graph = capture([&] {
    autograd::register_post_accumulate_hook(w, [](const Tensor&) {});
    return whole_step(*r);
  });
  ASSERT_FALSE(graph.ok());
  expect_refused(graph.status(), {"capture: the step changes its post-accumulate hooks of the [16, 12] f32 parameter",
                                  "leaves it changed", "undo it before the step returns"});
}

// A hook registered and removed between replays leaves the hooks as they
// were: replays go on (a counter of changes refused them).
TEST(ReplayContractTest, AHookAddedAndRemovedBetweenReplaysChangesNothing) {
  std::unique_ptr<Rig> r = make_rig();
  absl::StatusOr<Graph> graph = capture([&] { return whole_step(*r); });
  ASSERT_TRUE(graph.ok()) << graph.status();
  const Tensor w = r->model->parameters()[0];
  autograd::remove_post_accumulate_hook(w, autograd::register_post_accumulate_hook(w, [](const Tensor&) {}));
  EXPECT_TRUE(graph->replay().ok());
}

// set_grad(new) between replays while the old gradient lives on (kept for
// logging): the graph went on reading and writing the old one.
TEST(ReplayContractTest, AGradientReplacedWhileTheOldOneLivesIsRefused) {
  std::unique_ptr<Rig> r = make_rig(Opt::kSgdMomentum);
  absl::StatusOr<Graph> graph = capture([&] { return forward_backward(*r); });
  ASSERT_TRUE(graph.ok()) << graph.status();
  ASSERT_TRUE(graph->replay().ok());
  Tensor w = r->model->parameters()[0];
  const Tensor kept = w.grad();
  w.set_grad(zeros(w.shape()));
  expect_refused(graph->replay(), {"the gradient of the [16, 12] f32 parameter was replaced since capture",
                                   "Write into the gradient in place"});
}

// A second head's first gradient between head A's recorded call and its
// capture call: the capture run issues other kernels than the recording
// (AdamW's fused launch no longer fits), which made A eager for good. A is
// recorded again and replays.
TEST(ReplayContractTest, AGradientArrivingBetweenRecordingAndCaptureIsRecordedAgain) {
  GraphedHeads h;
  ASSERT_NO_FATAL_FAILURE(h.run("AABAAAAAAA"));
  EXPECT_EQ(h.step_a.stats().captures, 1);
  EXPECT_GE(h.step_a.stats().replays, 5);
}

// A backbone frozen from the start (the optimizer over the head only), then
// unfrozen and frozen again every 25 calls: a tensor the step reads changes
// requires_grad. GraphedStep records again each time instead of running
// eagerly from then on; the fifth time too, past the four restarts in a
// row, since its graph replayed 16 times in between.
TEST(ReplayContractTest, GraphedStepsRecordAgainAfterEachUnfreezing) {
  manual_seed(3);
  TwoHeads m;
  for (const Tensor& p : m.trunk.parameters()) Tensor(p).requires_grad_(false);
  optim::SGD opt(m.head_a.parameters(), {.lr = 0.1});
  GraphedStep step([&](const std::vector<Tensor>&) {
    opt.zero_grad();
    Tensor loss = cross_entropy(m.head_a.forward(relu(m.trunk.forward(m.x))), m.y);
    loss.backward();
    opt.step();
    return std::vector<Tensor>{loss};
  }, {.log = false});
  for (int i = 0; i < 130; ++i) {
    if (i % 25 == 5) Tensor(m.trunk.weight).requires_grad_(i % 50 == 5);
    step({});
  }
  EXPECT_EQ(step.stats().captures, 6);
  EXPECT_EQ(step.stats().eager_fallbacks, 5);   // the refused call after each change
  EXPECT_NE(step.last_fallback().find("replay refused, recorded again"), std::string::npos) << step.last_fallback();
}

// zero_grad() last in the step, a gradient read between replays (to log it):
// the read fills in the zeros and ends the pending zero_grad(). The refusal
// says so.
TEST(ReplayContractTest, ReadingAGradientBetweenReplaysIsNamedInTheRefusal) {
  std::unique_ptr<Rig> r = make_rig();
  absl::StatusOr<Graph> graph = capture([&] {
    Tensor loss = r->loss();
    loss.backward();
    r->opt->step();
    r->opt->zero_grad();
    return std::vector<Tensor>{loss};
  });
  ASSERT_TRUE(graph.ok()) << graph.status();
  ASSERT_TRUE(graph->replay().ok());
  (void)r->model->parameters()[0].grad();
  expect_refused(graph->replay(), {"zero_grad() was pending", "Reading .grad() after zero_grad()",
                                   "inside the captured step, at its start"});
}

// Eagerly, a training step inside a NoGradGuard fails at backward(); its
// replay trained as if grad mode were on.
TEST(ReplayContractTest, ATrainingGraphReplayedInsideANoGradGuardIsRefused) {
  std::unique_ptr<Rig> r = make_rig();
  absl::StatusOr<Graph> graph = capture([&] { return whole_step(*r); });
  ASSERT_TRUE(graph.ok()) << graph.status();
  const std::vector<unsigned char> before = bits(r->model->parameters()[0]);
  {
    NoGradGuard no_grad;
    EXPECT_THROW(whole_step(*r), Error) << "the eager step fails";
    expect_refused(graph->replay(), {"runs backward", "grad mode is off", "NoGradGuard"});
  }
  EXPECT_EQ(bits(r->model->parameters()[0]), before) << "a refused replay runs nothing";
  EXPECT_TRUE(graph->replay().ok());
  // A forward-only graph replays either way, as its eager step runs either way.
  absl::StatusOr<Graph> eval = capture([&] { return std::vector<Tensor>{r->loss()}; });
  ASSERT_TRUE(eval.ok()) << eval.status();
  NoGradGuard no_grad;
  EXPECT_TRUE(eval->replay().ok());
}

TEST(ReplayContractTest, AMovedFromGraphRefusesInsteadOfCrashing) {
  std::unique_ptr<Rig> r = make_rig();
  absl::StatusOr<Graph> graph = capture([&] { return whole_step(*r); });
  ASSERT_TRUE(graph.ok()) << graph.status();
  Graph moved = *std::move(graph);
  expect_refused(graph->replay(), {"replay: this Graph was moved from"});
  expect_refused(graph->replay({}), {"replay: this Graph was moved from"});
  expect_refused(graph->dump_dot("/dev/null"), {"moved from"});
  testing::expect_error([&] { (void)graph->num_outputs(); }, absl::StatusCode::kFailedPrecondition, {"moved from"});
  EXPECT_TRUE(moved.replay().ok());
}

// NOT seen (include/encore/capture.h, "Not seen"): a module parameter
// rebound to a new tensor while the module's parameter list and the
// optimizer keep the old one. Shadow verification catches it.
TEST(ReplayContractTest, AReboundParameterIsCaughtByVerification) {
  manual_seed(5);
  nn::Linear lin(12, 5);
  optim::SGD opt(lin.parameters(), optim::SgdOptions{.lr = 0.1});
  Tensor x = testing::random_tensor({8, 12}, 3), y = from_vector<int64_t>({0, 1, 2, 3, 4, 0, 1, 2});
  auto step = [&] {
    opt.zero_grad();
    Tensor loss = cross_entropy(lin.forward(x), y);
    loss.backward();
    opt.step();
    return std::vector<Tensor>{loss};
  };
  step();
  absl::StatusOr<Graph> graph = capture(step, {.verify_every = 1});
  ASSERT_TRUE(graph.ok()) << graph.status();
  ASSERT_TRUE(graph->replay().ok());
  lin.weight = zeros({5, 12}).requires_grad_(true);
  const absl::Status s = graph->replay();
  EXPECT_EQ(s.code(), absl::StatusCode::kInternal) << s;
  EXPECT_NE(s.message().find("differs from the eager step"), absl::string_view::npos) << s;
}

TEST(ReplayContractTest, ReplayWithInputsOnAnotherDeviceIsRefused) {
  ENCORE_SKIP_WITHOUT_GPU();
  std::unique_ptr<Rig> r = make_rig();
  absl::StatusOr<Graph> graph = capture([&] { return whole_step(*r); }, {.inputs = {&r->x, &r->y}});
  ASSERT_TRUE(graph.ok()) << graph.status();
  const absl::Status s = graph->replay({r->x.to(Device::cuda(0)), r->y.clone()});
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_NE(s.message().find("cuda"), absl::string_view::npos) << s;
}

}  // namespace
}  // namespace encore
