// The profiling API (include/encore/profile.h): a profiled replay computes
// exactly what plain replays compute, nodes map to ops and phases, the arena
// counter equals the plan's bytes in use, and the Chrome trace is well formed.
// The Cuda* tests do the same on cuda:0 (skipped without a GPU; they fail
// with ENCORE_REQUIRE_GPU=1), where nodes are CUDA graph nodes timed by CUPTI.
// The ProfileNesting tests put a profiler inside a capture and a capture
// inside a profiler.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <set>
#include <string_view>

#include "capture/cuda_graph.h"
#include "capture/graph_impl.h"
#include "encore/profile.h"
#include "nlohmann/json.hpp"
#include "src/core/stream.h"
#include "tests/backends/cuda_test_util.h"
#include "tools/workloads.h"

namespace encore {
namespace {

using tools::Workload;

std::unique_ptr<Workload> mlp_on(Device device) {
  return tools::make_mlp({.widths = {12, 16, 5}, .batch = 8, .seed = 3, .device = device});
}
std::unique_ptr<Workload> small_mlp() { return mlp_on(kCPU); }
std::unique_ptr<Workload> cuda_mlp() { return mlp_on(Device::cuda(0)); }

// Dropout draws from the RNG offset advanced inside the graph: a profiled
// replay that skipped or repeated a kernel would change every later step.
std::unique_ptr<Workload> gpt_on(Device device) {
  return tools::make_gpt({.config = {.vocab_size = 13, .block_size = 8, .n_layer = 1, .n_head = 2, .n_embd = 16,
                                     .dropout = 0.1, .seed = 5, .device = device},
                          .batch = 2});
}
std::unique_ptr<Workload> small_gpt() { return gpt_on(kCPU); }
std::unique_ptr<Workload> cuda_gpt() { return gpt_on(Device::cuda(0)); }

std::vector<std::vector<float>> snapshot(const Workload& w) {
  std::vector<std::vector<float>> out;
  for (const Tensor& p : w.model->parameters()) out.push_back(p.to_vector<float>());
  return out;
}

bool same_bits(const std::vector<std::vector<float>>& a, const std::vector<std::vector<float>>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i].size() != b[i].size() || std::memcmp(a[i].data(), b[i].data(), a[i].size() * sizeof(float)) != 0) {
      return false;
    }
  }
  return true;
}

Graph capture_or_die(Workload& w) {
  absl::StatusOr<Graph> g = capture([&w] { return w.step(); });
  EXPECT_TRUE(g.ok()) << g.status();
  return *std::move(g);
}

struct Result {
  std::vector<std::vector<float>> params;
  float loss = 0;
};

// Builds a fresh workload (reseeding the default generator that dropout
// shares), captures it, and either profiles it or replays it `replays` times.
// Runs one at a time: workloads share the process's default generator.
Result train(std::unique_ptr<Workload> (*make)(), const ProfileOptions* profile, int replays) {
  std::unique_ptr<Workload> w = make();
  Graph g = capture_or_die(*w);
  if (profile != nullptr) {
    absl::StatusOr<StepProfile> p = profile_replay(g, *profile);
    EXPECT_TRUE(p.ok()) << p.status();
  }
  for (int i = 0; i < replays; ++i) EXPECT_TRUE(g.replay().ok());
  return {snapshot(*w), g.output(0).item<float>()};
}

// A profiled replay trains exactly like as many plain replays.
void expect_profiled_replays_equal_plain_ones(std::unique_ptr<Workload> (*make)()) {
  const ProfileOptions options{.warmup_runs = 1, .runs = 3};
  const int replays = options.warmup_runs + 2 * options.runs;   // as profile.h documents
  const Result profiled = train(make, &options, 0);
  const Result plain = train(make, nullptr, replays);
  EXPECT_TRUE(same_bits(profiled.params, plain.params));
  EXPECT_EQ(std::memcmp(&profiled.loss, &plain.loss, sizeof(float)), 0) << profiled.loss << " vs " << plain.loss;
  // One replay more must differ (the comparison can fail).
  const Result more = train(make, nullptr, replays + 1);
  EXPECT_FALSE(same_bits(profiled.params, more.params));
}

class ProfileEquivalenceTest : public ::testing::TestWithParam<std::unique_ptr<Workload> (*)()> {};

TEST_P(ProfileEquivalenceTest, ProfiledReplayEqualsPlainReplaysBitForBit) {
  expect_profiled_replays_equal_plain_ones(GetParam());
}

INSTANTIATE_TEST_SUITE_P(Models, ProfileEquivalenceTest, ::testing::Values(&small_mlp, &small_gpt));

// The same on cuda:0: the timed replays run a profiling copy of the CUDA graph.
class CudaProfileEquivalenceTest : public ProfileEquivalenceTest {};

TEST_P(CudaProfileEquivalenceTest, ProfiledReplayEqualsPlainReplaysBitForBit) {
  ENCORE_SKIP_WITHOUT_GPU();
  expect_profiled_replays_equal_plain_ones(GetParam());
}

INSTANTIATE_TEST_SUITE_P(Models, CudaProfileEquivalenceTest, ::testing::Values(&cuda_mlp, &cuda_gpt));

// Profiled eager steps train exactly like plain ones: same parameters after
// the same number of steps (and one more step changes them).
void expect_profiled_eager_steps_equal_plain_ones(std::unique_ptr<Workload> (*make)()) {
  const ProfileOptions options{.warmup_runs = 1, .runs = 2};
  std::unique_ptr<Workload> profiled = make();
  absl::StatusOr<StepProfile> p = profile_eager([&] { return profiled->step(); }, options);
  ASSERT_TRUE(p.ok()) << p.status();
  const auto after_profile = snapshot(*profiled);
  std::unique_ptr<Workload> plain = make();
  for (int i = 0; i < options.warmup_runs + 2 * options.runs; ++i) plain->step();
  EXPECT_TRUE(same_bits(after_profile, snapshot(*plain)));
  plain->step();
  EXPECT_FALSE(same_bits(after_profile, snapshot(*plain)));
}

TEST(ProfileTest, ProfiledEagerStepsEqualPlainEagerStepsBitForBit) {
  expect_profiled_eager_steps_equal_plain_ones(&small_gpt);
}

TEST(ProfileTest, ReplayTimedStampsEveryNode) {
  std::unique_ptr<Workload> w = small_mlp();
  Graph g = capture_or_die(*w);
  std::vector<int64_t> stamps;
  ASSERT_TRUE(g.internals().replay_timed(stamps).ok());
  ASSERT_EQ(stamps.size(), static_cast<size_t>(g.stats().kernels) + 1);
  for (size_t i = 1; i < stamps.size(); ++i) EXPECT_LE(stamps[i - 1], stamps[i]);
}

TEST(ProfileTest, NodesMapToOpsAndPhases) {
  std::unique_ptr<Workload> w = small_mlp();
  Graph g = capture_or_die(*w);
  absl::StatusOr<StepProfile> p = profile_replay(g, {.warmup_runs = 0, .runs = 2});
  ASSERT_TRUE(p.ok()) << p.status();
  ASSERT_EQ(p->nodes.size(), static_cast<size_t>(g.stats().kernels));
  std::map<std::string, std::set<std::string>> ops_by_phase;
  for (size_t i = 0; i < p->nodes.size(); ++i) {
    const NodeTiming& n = p->nodes[i];
    EXPECT_EQ(n.node, static_cast<int64_t>(i));
    EXPECT_STREQ(n.op, g.internals().node_op(i));
    EXPECT_GE(n.duration_ns, 0);
    EXPECT_GE(n.median_ns, 0);
    EXPECT_FALSE(n.write_bytes.empty()) << n.op << " writes nothing?";
    ops_by_phase[n.phase].insert(n.op);
  }
  // AdamW's update is optimizer; zero_grad launches nothing (NOTE [ Lazy zero_grad ]) and linear's
  // backward writes the weight and bias gradients straight into .grad() (NOTE [ Gradients written in
  // place ]): no fill, no copy. The matmuls run in both passes.
  EXPECT_FALSE(ops_by_phase["optimizer"].count("fill"));
  EXPECT_FALSE(ops_by_phase["backward"].count("copy"));
  EXPECT_TRUE(ops_by_phase["optimizer"].count("adamw"));
  EXPECT_TRUE(ops_by_phase["forward"].count("gemm"));
  EXPECT_TRUE(ops_by_phase["backward"].count("gemm"));
  EXPECT_FALSE(ops_by_phase["forward"].count("adamw"));
  EXPECT_EQ(ops_by_phase.size(), 3u);
}

TEST(ProfileTest, EagerProfileSeesTheSameKernelsAsTheGraph) {
  std::unique_ptr<Workload> w = small_mlp();
  absl::StatusOr<StepProfile> eager = profile_eager([&] { return w->step(); }, {.warmup_runs = 1, .runs = 2});
  ASSERT_TRUE(eager.ok()) << eager.status();
  Graph g = capture_or_die(*w);
  ASSERT_EQ(eager->nodes.size(), static_cast<size_t>(g.stats().kernels));
  for (size_t i = 0; i < eager->nodes.size(); ++i) {
    EXPECT_STREQ(eager->nodes[i].op, g.internals().node_op(i)) << "node " << i;
    EXPECT_STREQ(eager->nodes[i].phase, g.internals().node_phase(i)) << "node " << i;
    if (i > 0) {
      EXPECT_GE(eager->nodes[i].start_ns, eager->nodes[i - 1].start_ns + eager->nodes[i - 1].duration_ns);
    }
  }
  EXPECT_TRUE(eager->arena_in_use_bytes.empty());
}

TEST(ProfileTest, ArenaInUseEqualsThePlansLiveBytes) {
  std::unique_ptr<Workload> w = small_gpt();
  Graph g = capture_or_die(*w);
  const std::vector<int64_t> in_use = arena_bytes_in_use(g);
  ASSERT_EQ(in_use.size(), static_cast<size_t>(g.stats().kernels) + 1);
  int64_t peak = 0;
  for (size_t t = 0; t < in_use.size(); ++t) {
    int64_t live = 0;   // brute force over the buffers
    for (const planner::Buffer& b : g.buffers()) live += (b.lower <= int64_t(t) && int64_t(t) < b.upper) ? b.size : 0;
    EXPECT_EQ(in_use[t], live) << "at node " << t;
    peak = std::max(peak, live);
  }
  EXPECT_LE(peak, planner::lower_bound(g.buffers()));   // the bound rounds sizes up to the alignment
  EXPECT_GT(peak, 0);
  EXPECT_GT(in_use.back(), 0) << "the loss output lives to the end";
}

TEST(ProfileTest, ChromeTraceIsWellFormed) {
  std::unique_ptr<Workload> w = small_mlp();
  absl::StatusOr<StepProfile> eager = profile_eager([&] { return w->step(); }, {.warmup_runs = 0, .runs = 2});
  ASSERT_TRUE(eager.ok()) << eager.status();
  Graph g = capture_or_die(*w);
  absl::StatusOr<StepProfile> replayed = profile_replay(g, {.warmup_runs = 0, .runs = 2});
  ASSERT_TRUE(replayed.ok()) << replayed.status();
  const nlohmann::json trace = nlohmann::json::parse(chrome_trace_json({&*eager, &*replayed}));   // throws if invalid
  ASSERT_TRUE(trace.at("traceEvents").is_array());
  std::map<std::pair<int, int>, std::vector<nlohmann::json>> tracks;   // kernel slices per (pid, tid)
  std::map<int, std::vector<nlohmann::json>> phase_slices, op_slices;   // per pid
  std::map<int64_t, std::vector<nlohmann::json>> flows;                 // id -> its "s" and "f"
  std::vector<int64_t> counter;
  std::set<std::string> names;
  int thread_names = 0;
  for (const nlohmann::json& e : trace["traceEvents"]) {
    // The trace event format's fields: every event has ph, pid, tid and
    // name; all but metadata a ts; "X" a dur; flows an id.
    for (const char* field : {"ph", "pid", "tid", "name"}) ASSERT_TRUE(e.contains(field)) << field << " in " << e;
    ASSERT_TRUE(e.at("pid").is_number_integer() && e.at("tid").is_number_integer()) << e;
    ASSERT_TRUE(e.at("name").is_string()) << e;
    const std::string ph = e.at("ph");
    if (ph != "M") {
      ASSERT_TRUE(e.contains("ts") && e.at("ts").is_number()) << e;
      EXPECT_GE(e.at("ts").get<double>(), 0.0);
    }
    if (ph == "M") {
      const std::string what = e.at("name");
      if (what == "thread_sort_index") {
        EXPECT_TRUE(e.at("args").at("sort_index").is_number_integer()) << e;
        continue;
      }
      EXPECT_FALSE(e.at("args").at("name").get<std::string>().empty());
      thread_names += what == "thread_name";
    } else if (ph == "X") {
      ASSERT_TRUE(e.contains("dur") && e.at("dur").is_number()) << e;
      EXPECT_GE(e.at("dur").get<double>(), 0.0);
      const std::string phase = e.at("args").at("phase");
      EXPECT_TRUE(phase == "forward" || phase == "backward" || phase == "optimizer") << phase;
      const int pid = e.at("pid").get<int>();
      if (e.at("cat") == "phase") {
        EXPECT_EQ(e.at("name"), phase);
        phase_slices[pid].push_back(e);
      } else if (e.at("cat") == "op") {
        op_slices[pid].push_back(e);
      } else {
        names.insert(e.at("name").get<std::string>());
        tracks[{pid, e.at("tid").get<int>()}].push_back(e);
      }
    } else if (ph == "s" || ph == "f") {
      ASSERT_TRUE(e.contains("id") && e.at("id").is_number_integer()) << e;
      EXPECT_EQ(e.at("cat"), "dependency");
      flows[e.at("id").get<int64_t>()].push_back(e);
    } else {
      ASSERT_EQ(ph, "C");
      EXPECT_EQ(e.at("pid").get<int>(), 2) << "only the replay has an arena";
      counter.push_back(e.at("args").at("bytes").get<int64_t>());
    }
  }
  EXPECT_EQ(thread_names, 6);   // two processes: phases, ops and one stream each
  ASSERT_EQ(tracks.size(), 2u);
  for (const auto& [track, events] : tracks) {
    EXPECT_EQ(events.size(), static_cast<size_t>(g.stats().kernels));
    for (size_t i = 0; i < events.size(); ++i) {
      EXPECT_EQ(events[i]["name"], g.internals().node_op(i));
      EXPECT_EQ(events[i]["args"]["node"].get<int64_t>(), static_cast<int64_t>(i));
      if (i == 0) continue;
      const double prev_end = events[i - 1]["ts"].get<double>() + events[i - 1]["dur"].get<double>();
      EXPECT_LE(prev_end, events[i]["ts"].get<double>() + 1e-3) << "overlap on track pid " << track.first;   // 1 ns
    }
    // Phase slices: forward, backward, optimizer in order, on their own
    // track above the kernels, together spanning every kernel slice.
    const std::vector<nlohmann::json>& phases = phase_slices[track.first];
    ASSERT_EQ(phases.size(), 3u) << "pid " << track.first;
    EXPECT_EQ(phases[0]["name"], "forward");
    EXPECT_EQ(phases[1]["name"], "backward");
    EXPECT_EQ(phases[2]["name"], "optimizer");
    for (const nlohmann::json& ph : phases) EXPECT_LT(ph["tid"].get<int>(), track.second);
    EXPECT_LE(phases[0]["ts"].get<double>(), events.front()["ts"].get<double>());
    EXPECT_GE(phases[2]["ts"].get<double>() + phases[2]["dur"].get<double>() + 1e-3,
              events.back()["ts"].get<double>() + events.back()["dur"].get<double>());
    const std::vector<nlohmann::json>& ops = op_slices[track.first];
    ASSERT_EQ(ops.size(), events.size()) << "one op slice per launch on the CPU";
    for (const nlohmann::json& op : ops) EXPECT_LT(op["tid"].get<int>(), track.second);
  }
  // Flows: an "s" and an "f" per id, the "s" no later than its "f"; the
  // optimizer reads what backward wrote, so some flow goes from backward
  // into the optimizer.
  ASSERT_FALSE(flows.empty());
  for (const auto& [id, pair] : flows) {
    ASSERT_EQ(pair.size(), 2u) << "flow " << id;
    EXPECT_EQ(pair[0]["ph"], "s");
    EXPECT_EQ(pair[1]["ph"], "f");
    EXPECT_EQ(pair[1]["bp"], "e");
    EXPECT_LE(pair[0]["ts"].get<double>(), pair[1]["ts"].get<double>());
  }
  for (const StepProfile* p : {&*eager, &*replayed}) {
    bool backward_to_optimizer = false;
    for (const NodeTiming& n : p->nodes) {
      for (int64_t from : n.reads_from) {
        ASSERT_LT(from, n.launch);
        backward_to_optimizer |= std::string_view(p->nodes[from].phase) == "backward" &&
                                 std::string_view(n.phase) == "optimizer";
      }
    }
    EXPECT_TRUE(backward_to_optimizer) << p->mode;
  }
  EXPECT_EQ(eager->nodes.size(), replayed->nodes.size());
  for (size_t i = 0; i < eager->nodes.size(); ++i) {
    EXPECT_EQ(eager->nodes[i].reads_from, replayed->nodes[i].reads_from) << "node " << i;
  }
  EXPECT_TRUE(names.count("gemm") && names.count("adamw") && names.count("cross_entropy"));
  EXPECT_EQ(counter, arena_bytes_in_use(g));
}

TEST(ProfileTest, SummaryAddsUp) {
  std::unique_ptr<Workload> w = small_mlp();
  Graph g = capture_or_die(*w);
  absl::StatusOr<StepProfile> p = profile_replay(g, {.warmup_runs = 0, .runs = 3});
  ASSERT_TRUE(p.ok()) << p.status();
  const ProfileSummary s = summarize(*p, 3);
  int64_t phases = 0, nodes = 0;
  for (const auto& [name, ns] : s.phase_ns) phases += ns;
  for (const NodeTiming& n : p->nodes) nodes += n.median_ns;
  EXPECT_EQ(phases, s.kernel_ns);
  EXPECT_EQ(nodes, s.kernel_ns);
  ASSERT_EQ(s.top_ops.size(), 3u);
  EXPECT_GE(s.top_ops[0].total_ns, s.top_ops[1].total_ns);
  EXPECT_GE(s.top_ops[1].total_ns, s.top_ops[2].total_ns);
  EXPECT_GT(p->step_ns, 0);
  EXPECT_LE(p->step_min_ns, p->step_ns);
  EXPECT_GE(p->step_max_ns, p->step_ns);
  const std::string text = format_summary(*p);
  EXPECT_NE(text.find("backward"), std::string::npos);
  EXPECT_NE(text.find("cuda:"), std::string::npos);
}

// A median of an even count is the mean of the two middle values: with two
// runs, step_ns lies halfway between step_min_ns and step_max_ns (it was the
// slower run's time, step_max_ns).
TEST(ProfileTest, MedianOfTwoRunsIsTheirMean) {
  std::unique_ptr<Workload> w = small_mlp();
  const ProfileOptions two{.warmup_runs = 0, .runs = 2};
  absl::StatusOr<StepProfile> eager = profile_eager([&] { return w->step(); }, two);
  ASSERT_TRUE(eager.ok()) << eager.status();
  Graph g = capture_or_die(*w);
  absl::StatusOr<StepProfile> replayed = profile_replay(g, two);
  ASSERT_TRUE(replayed.ok()) << replayed.status();
  for (const StepProfile* p : {&*eager, &*replayed}) {
    EXPECT_EQ(p->step_ns, p->step_min_ns + (p->step_max_ns - p->step_min_ns) / 2) << p->mode;
    if (p->step_min_ns == p->step_max_ns) continue;   // equal clocks: nothing to tell apart
    EXPECT_LT(p->step_ns, p->step_max_ns) << p->mode;
  }
}

// CUDA nodes whose launch is unknown (launch marks that do not match) have
// the phase "unknown": the summary lists it, so that the phases still add
// up to the kernel time and their percentages to 100.
TEST(ProfileTest, UnmappedNodesHaveTheirOwnPhaseInTheSummary) {
  StepProfile p{.mode = "replay", .device = "cuda:0", .streams = {"cuda:0 stream"}, .runs = 1};
  p.nodes.push_back({.node = 0, .launch = 0, .op = "gemm", .phase = "forward", .duration_ns = 300, .median_ns = 300});
  p.nodes.push_back({.node = 1, .launch = -1, .op = "(unmapped)", .phase = "unknown", .start_ns = 300,
                     .duration_ns = 100, .median_ns = 100});
  const ProfileSummary s = summarize(p);
  int64_t phases = 0;
  for (const auto& [name, ns] : s.phase_ns) phases += ns;
  EXPECT_EQ(phases, s.kernel_ns);
  ASSERT_EQ(s.phase_ns.size(), 4u);
  EXPECT_EQ(s.phase_ns[3], (std::pair<std::string, int64_t>{"unknown", 100}));
  EXPECT_NE(format_summary(p).find("unknown         100 ns   25.0%"), std::string::npos) << format_summary(p);
  const nlohmann::json trace = nlohmann::json::parse(chrome_trace_json({&p}));
  EXPECT_EQ(trace.at("otherData").at("encore").at(0).at("phase_ns").at("unknown"), 100);
}

// Sums of node times that pass INT64_MAX nanoseconds stay at INT64_MAX:
// they wrapped to negative totals and percentages.
TEST(ProfileTest, SummarySumsDoNotOverflow) {
  constexpr int64_t kBig = std::numeric_limits<int64_t>::max() / 2;
  StepProfile p{.mode = "replay", .device = "cpu", .streams = {"cpu stream"}, .runs = 1};
  for (int64_t i = 0; i < 3; ++i) {
    p.nodes.push_back({.node = i, .launch = i, .op = "gemm", .duration_ns = kBig, .median_ns = kBig});
  }
  const ProfileSummary s = summarize(p);
  EXPECT_EQ(s.kernel_ns, std::numeric_limits<int64_t>::max());
  EXPECT_EQ(s.phase_ns[0].second, std::numeric_limits<int64_t>::max());
  ASSERT_EQ(s.top_ops.size(), 1u);
  EXPECT_EQ(s.top_ops[0].total_ns, std::numeric_limits<int64_t>::max());
  EXPECT_EQ(s.outside_kernels_ns, 0);
  EXPECT_EQ(format_summary(p).find('-'), std::string::npos) << format_summary(p);
}

TEST(ProfileTest, EagerStepThatThrowsGivesAStatusAndUninstallsTheTimer) {
  std::unique_ptr<Workload> w = small_mlp();
  int calls = 0;
  auto step = [&] {
    if (++calls == 2) throw Error(absl::InvalidArgumentError("boom in step"));   // the first timed run
    return w->step();
  };
  absl::StatusOr<StepProfile> p = profile_eager(step, {.warmup_runs = 0, .runs = 1});
  EXPECT_EQ(p.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(p.status().message().find("boom"), std::string::npos);
  EXPECT_EQ(current_stream(kCPU).observer(), nullptr);
  EXPECT_TRUE(capture([&] { return w->step(); }).ok());
}

// The workloads encore-prof profiles take their seed (--seed): the same seed
// gives the same parameters and input, another seed others (review finding,
// 2026-12-06: the block and the CNN had manual_seed(1) hard-coded).
TEST(ProfileTest, WorkloadsFollowTheirSeed) {
  using Make = std::function<std::unique_ptr<Workload>(uint64_t)>;
  const std::vector<std::pair<std::string, Make>> makers = {
      {"mlp", [](uint64_t seed) { return tools::make_mlp({.widths = {4, 3}, .batch = 2, .seed = seed}); }},
      {"block", [](uint64_t seed) { return tools::make_block({.batch = 1, .seq = 2, .n_embd = 8, .n_head = 2,
                                                              .seed = seed}); }},
      {"cnn", [](uint64_t seed) { return tools::make_resnet_cnn({.blocks = 1, .channels = 2, .batch = 1,
                                                                 .seed = seed}); }},
  };
  auto weights = [](const Workload& w) {
    std::vector<float> all;
    for (const Tensor& p : w.model->parameters()) {
      const std::vector<float> v = p.to_vector<float>();
      all.insert(all.end(), v.begin(), v.end());
    }
    return all;
  };
  for (const auto& [name, make] : makers) {
    SCOPED_TRACE(name);
    std::unique_ptr<Workload> a = make(7), b = make(7), c = make(8);
    EXPECT_EQ(weights(*a), weights(*b));
    EXPECT_EQ(a->x.to_vector<float>(), b->x.to_vector<float>());
    EXPECT_NE(weights(*a), weights(*c));
    EXPECT_NE(a->x.to_vector<float>(), c->x.to_vector<float>());
  }
}

TEST(ProfileTest, BadOptionsAreRefused) {
  std::unique_ptr<Workload> w = small_mlp();
  Graph g = capture_or_die(*w);
  EXPECT_EQ(profile_replay(g, {.runs = 0}).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(profile_eager([&] { return w->step(); }, {.warmup_runs = -1}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_FALSE(write_chrome_trace("/nonexistent-dir/trace.json", {}).ok());
}

// Write failures reach the caller with their cause (issue #17).
TEST(ProfileTest, TraceWriteFailuresAreReturned) {
  const absl::Status missing = write_chrome_trace("/nonexistent-dir/trace.json", {});
  EXPECT_EQ(missing.code(), absl::StatusCode::kNotFound) << missing;
  EXPECT_NE(missing.message().find("/nonexistent-dir/trace.json"), absl::string_view::npos) << missing;
  if (std::ifstream("/dev/full").good()) {   // every write fails: a full disk
    const absl::Status full = write_chrome_trace("/dev/full", {});
    EXPECT_EQ(full.code(), absl::StatusCode::kResourceExhausted) << full;
    EXPECT_NE(full.message().find("No space left on device"), absl::string_view::npos) << full;
  }
}

// A trace replacing a file keeps that file's permission bits (a private
// 0600 trace stays private) and a link to it, as writing in place would
// (NOTE [ Writing a file atomically ] in src/core/atomic_file.cpp).
TEST(ProfileTest, ATraceReplacingAFileKeepsItsPermissionsAndLinks) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::path(::testing::TempDir()) / "encore_trace_kept";
  fs::remove_all(dir);
  fs::create_directories(dir);
  const std::string trace = (dir / "t.json").string();
  std::ofstream(trace) << "previous";
  ASSERT_EQ(::chmod(trace.c_str(), 0600), 0);
  fs::create_symlink("t.json", dir / "latest.json");
  const absl::Status s = write_chrome_trace((dir / "latest.json").string(), {});
  ASSERT_TRUE(s.ok()) << s;
  EXPECT_TRUE(fs::is_symlink(dir / "latest.json"));
  EXPECT_TRUE(nlohmann::json::parse(std::ifstream(trace)).contains("traceEvents"));
  struct stat st {};
  ASSERT_EQ(::stat(trace.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  fs::remove_all(dir);
}

// ---- nesting: each StepObserverScope restores what was installed before it ----

// Profiling inside a step that capture() records or captures cannot work (it
// would time kernels that the capture run only takes): profile_eager refuses
// there, and the capture's observer, still installed, sees the rest of the
// step: the graph is the one of the step alone and trains the same bits.
TEST(ProfileNestingTest, ProfilingInsideACapturedStepIsRefusedAndTheCaptureSeesTheStep) {
  std::unique_ptr<Workload> alone = small_mlp();
  Graph plain = capture_or_die(*alone);
  ASSERT_TRUE(plain.replay().ok());
  std::unique_ptr<Workload> w = small_mlp(), inner = small_mlp();
  std::vector<absl::Status> profiled;
  absl::StatusOr<Graph> g = capture([&] {
    profiled.push_back(profile_eager([&] { return inner->step(); }, {.warmup_runs = 0, .runs = 1}).status());
    return w->step();
  });
  ASSERT_TRUE(g.ok()) << g.status();
  ASSERT_EQ(profiled.size(), 3u);   // two warm-ups and the capture run
  EXPECT_TRUE(profiled[0].ok()) << profiled[0];   // the first warm-up is not watched
  for (size_t i = 1; i < profiled.size(); ++i) {
    EXPECT_EQ(profiled[i].code(), absl::StatusCode::kFailedPrecondition) << profiled[i];
    EXPECT_NE(profiled[i].message().find("already has an observer (inside capture?)"), std::string::npos)
        << profiled[i];
  }
  EXPECT_EQ(current_stream(kCPU).observer(), nullptr);
  ASSERT_EQ(g->stats().kernels, plain.stats().kernels);
  for (int64_t i = 0; i < plain.stats().kernels; ++i) {
    EXPECT_STREQ(g->internals().node_op(i), plain.internals().node_op(i)) << "node " << i;
  }
  ASSERT_TRUE(g->replay().ok());
  const float a = g->output(0).item<float>(), b = plain.output(0).item<float>();
  EXPECT_EQ(std::memcmp(&a, &b, sizeof(float)), 0) << a << " vs " << b;
  EXPECT_TRUE(same_bits(snapshot(*w), snapshot(*alone)));
}

// A capture inside a profiled step: the capture's scopes take over for its
// recorded and capture runs and hand back to the profiler's timer, which sees
// the capture's first warm-up (an eager step of the model) and the launch
// after the capture, and nothing of the runs the capture watched.
TEST(ProfileNestingTest, ACaptureInsideAProfiledStepHandsBackToTheProfiler) {
  std::unique_ptr<Workload> w = small_mlp();
  Tensor x = full({4}, 1.0);
  std::vector<Graph> graphs;   // one per run of the profiled step
  auto step = [&] {
    absl::StatusOr<Graph> g = capture([&] { return w->step(); });
    if (!g.ok()) throw Error(g.status());
    graphs.push_back(*std::move(g));
    return std::vector<Tensor>{x + 1.0};   // after the capture: the profiler must see it
  };
  absl::StatusOr<StepProfile> p = profile_eager(step, {.warmup_runs = 0, .runs = 1});
  ASSERT_TRUE(p.ok()) << p.status();
  ASSERT_EQ(graphs.size(), 2u);   // one untimed run, one timed
  const Graph& timed = graphs[1];
  const size_t kernels = static_cast<size_t>(timed.stats().kernels);
  ASSERT_EQ(p->nodes.size(), kernels + 1);
  for (size_t i = 0; i < kernels; ++i) {
    EXPECT_STREQ(p->nodes[i].op, timed.internals().node_op(i)) << "node " << i;
    EXPECT_STREQ(p->nodes[i].phase, timed.internals().node_phase(i)) << "node " << i;
  }
  EXPECT_STREQ(p->nodes.back().op, "add_scalar");
  EXPECT_EQ(current_stream(kCPU).observer(), nullptr);
  for (Graph& g : graphs) EXPECT_TRUE(g.replay().ok());
}

// ---- CUDA ----

// Skips when CUPTI refused to collect (another profiler holding it, a
// sandbox refusing it): the fallback must still give wall times and say why.
// No per-node times for any other reason is a failure.
#define ENCORE_SKIP_WITHOUT_NODE_TIMES(p)                                                            \
  do {                                                                                               \
    if ((p).nodes.empty()) {                                                                         \
      EXPECT_GT((p).timed_step_ns, 0);                                                               \
      EXPECT_EQ((p).gpu_idle_ns, -1);                                                                \
      if ((p).note.find("cuptiActivityEnable") == std::string::npos &&                               \
          (p).note.find("cuptiActivityRegisterCallbacks") == std::string::npos) {                    \
        FAIL() << "no per-node CUDA times, and not because CUPTI refused: '" << (p).note << "'";     \
      }                                                                                              \
      GTEST_SKIP() << "CUPTI unavailable here: " << (p).note;                                        \
    }                                                                                                \
  } while (0)

TEST(CudaProfileTest, ReplayNodesMapToLaunchesOpsAndPhases) {
  ENCORE_SKIP_WITHOUT_GPU();
  std::unique_ptr<Workload> w = cuda_mlp();
  Graph g = capture_or_die(*w);
  ASSERT_NE(g.internals().cuda_graph(), nullptr);
  absl::StatusOr<StepProfile> p = profile_replay(g, {.warmup_runs = 1, .runs = 3});
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->device, "cuda:0");
  ASSERT_EQ(p->streams.size(), 1u);
  EXPECT_GT(p->step_ns, 0);
  ENCORE_SKIP_WITHOUT_NODE_TIMES(*p);
  EXPECT_TRUE(p->note.empty()) << p->note;
  const int64_t launches = g.stats().kernels;
  EXPECT_GE(static_cast<int64_t>(p->nodes.size()), launches) << "every launch is at least one node";
  std::map<std::string, std::set<std::string>> ops_by_phase;
  std::set<int64_t> seen_nodes;
  int64_t prev_launch = 0, prev_start = 0;
  for (const NodeTiming& n : p->nodes) {
    ASSERT_GE(n.launch, 0) << "node " << n.node << " maps to no launch";
    ASSERT_LT(n.launch, launches);
    EXPECT_STREQ(n.op, g.internals().node_op(n.launch)) << "node " << n.node;
    EXPECT_STREQ(n.phase, g.internals().node_phase(n.launch)) << "node " << n.node;
    EXPECT_EQ(n.read_bytes, g.internals().node_read_bytes(n.launch));
    EXPECT_TRUE(seen_nodes.insert(n.node).second) << "node " << n.node << " twice in one replay";
    EXPECT_GE(n.start_ns, 0);
    EXPECT_GE(n.duration_ns, 0);
    EXPECT_GE(n.median_ns, 0);
    // One stream captured as a chain: nodes start in launch order. (They may
    // overlap a little: a cuBLAS kernel may use programmatic dependent launch
    // on sm_90, which lets the next kernel start before it ends.)
    EXPECT_GE(n.launch, prev_launch) << "node " << n.node << " (" << n.op << ") runs before an earlier launch's";
    EXPECT_GE(n.start_ns, prev_start) << "node " << n.node << " starts before the one before";
    prev_launch = n.launch;
    prev_start = n.start_ns;
    ops_by_phase[n.phase].insert(n.op);
  }
  EXPECT_TRUE(ops_by_phase["optimizer"].count("adamw"));
  EXPECT_TRUE(ops_by_phase["forward"].count("gemm"));
  EXPECT_TRUE(ops_by_phase["backward"].count("gemm"));
  EXPECT_EQ(ops_by_phase.size(), 3u);
  EXPECT_GE(p->gpu_idle_ns, 0);
  EXPECT_LE(p->gpu_idle_ns, p->timed_step_ns);
  EXPECT_EQ(p->arena_in_use_bytes, arena_bytes_in_use(g));
  const std::string text = format_summary(*p);
  EXPECT_NE(text.find("replay (cuda:0)"), std::string::npos) << text;
  EXPECT_NE(text.find("gpu idle"), std::string::npos) << text;
}

TEST(CudaProfileTest, EagerLaunchesAreTimedWithEventsInLaunchOrder) {
  ENCORE_SKIP_WITHOUT_GPU();
  std::unique_ptr<Workload> w = cuda_mlp();
  absl::StatusOr<StepProfile> eager = profile_eager([&] { return w->step(); }, {.warmup_runs = 1, .runs = 2});
  ASSERT_TRUE(eager.ok()) << eager.status();
  EXPECT_EQ(eager->device, "cuda:0");
  Graph g = capture_or_die(*w);
  ASSERT_EQ(eager->nodes.size(), static_cast<size_t>(g.stats().kernels));
  for (size_t i = 0; i < eager->nodes.size(); ++i) {
    const NodeTiming& n = eager->nodes[i];
    EXPECT_STREQ(n.op, g.internals().node_op(i)) << "node " << i;
    EXPECT_STREQ(n.phase, g.internals().node_phase(i)) << "node " << i;
    EXPECT_EQ(n.stream, 0);
    EXPECT_GE(n.duration_ns, 0);
    if (i > 0) {   // events on one stream complete in order
      EXPECT_GE(n.start_ns, eager->nodes[i - 1].start_ns + eager->nodes[i - 1].duration_ns) << "node " << i;
    }
  }
  EXPECT_GE(eager->timed_step_ns, eager->nodes.back().start_ns - eager->nodes.front().start_ns);
}

TEST(CudaProfileTest, ProfiledEagerStepsEqualPlainEagerStepsBitForBit) {
  ENCORE_SKIP_WITHOUT_GPU();
  expect_profiled_eager_steps_equal_plain_ones(&cuda_gpt);
}

TEST(CudaProfileTest, ChromeTraceIsWellFormedWithGpuIdle) {
  ENCORE_SKIP_WITHOUT_GPU();
  std::unique_ptr<Workload> w = cuda_gpt();
  absl::StatusOr<StepProfile> eager = profile_eager([&] { return w->step(); }, {.warmup_runs = 0, .runs = 1});
  ASSERT_TRUE(eager.ok()) << eager.status();
  Graph g = capture_or_die(*w);
  absl::StatusOr<StepProfile> replayed = profile_replay(g, {.warmup_runs = 0, .runs = 2});
  ASSERT_TRUE(replayed.ok()) << replayed.status();
  ENCORE_SKIP_WITHOUT_NODE_TIMES(*replayed);
  const nlohmann::json trace = nlohmann::json::parse(chrome_trace_json({&*eager, &*replayed}));   // throws if invalid
  std::map<int, size_t> x_events;
  std::vector<int64_t> counter;
  for (const nlohmann::json& e : trace.at("traceEvents")) {
    const std::string ph = e.at("ph");
    if (ph == "X") {
      if (e.at("cat") != "phase" && e.at("cat") != "op") ++x_events[e.at("pid").get<int>()];   // kernel slices
      EXPECT_GE(e.at("ts").get<double>(), 0.0);
      EXPECT_GE(e.at("dur").get<double>(), 0.0);
      const std::string phase = e.at("args").at("phase");
      EXPECT_TRUE(phase == "forward" || phase == "backward" || phase == "optimizer") << phase;
      EXPECT_FALSE(e.at("name").get<std::string>().empty());
    } else if (ph == "C") {
      EXPECT_EQ(e.at("pid").get<int>(), 2) << "only the replay has an arena";
      counter.push_back(e.at("args").at("bytes").get<int64_t>());
    }
  }
  EXPECT_EQ(x_events[1], static_cast<size_t>(g.stats().kernels));   // eager: one per launch
  EXPECT_EQ(x_events[2], replayed->nodes.size());                     // replay: one per CUDA node
  // One counter value per launch (at its first node) and one after the last node.
  EXPECT_EQ(counter, arena_bytes_in_use(g));
  const nlohmann::json& summaries = trace.at("otherData").at("encore");
  ASSERT_EQ(summaries.size(), 2u);
  EXPECT_EQ(summaries[1].at("device"), "cuda:0");
  EXPECT_GE(summaries[1].at("gpu_idle_ns").get<int64_t>(), 0);
  EXPECT_EQ(summaries[0].at("gpu_idle_ns").get<int64_t>(), -1);
}

TEST(CudaProfileTest, GraphUpdateRetargetsOnePointer) {
  ENCORE_SKIP_WITHOUT_GPU();
  const Device gpu = Device::cuda(0);
  Tensor x = zeros({16}, kFloat32, gpu), other = full({16}, 5.0, kFloat32, gpu);
  auto step = [&] {
    NoGradGuard no_grad;
    Tensor t = x;
    for (int i = 0; i < 3; ++i) t = add(t, 1.0);
    return std::vector<Tensor>{t};
  };
  absl::StatusOr<Graph> g = capture(step);
  ASSERT_TRUE(g.ok()) << g.status();
  absl::StatusOr<int64_t> ns = g->internals().cuda_graph()->update_pointer_ns(x.data_ptr(), other.data_ptr(), 5);
  ASSERT_TRUE(ns.ok()) << ns.status();
  EXPECT_GT(*ns, 0);
  // The graph keeps its own parameters: it still reads x (0 + 3), not `other` (5 + 3).
  ASSERT_TRUE(g->replay().ok());
  EXPECT_EQ(g->output(0).to_vector<float>(), std::vector<float>(16, 3.0f));
  EXPECT_EQ(g->internals().cuda_graph()->update_pointer_ns(&ns, other.data_ptr(), 1).status().code(),
            absl::StatusCode::kNotFound);
}

TEST(ProfileTest, DurationsReadInTheirUnit) {
  EXPECT_EQ(duration_str(850), "850 ns");
  EXPECT_EQ(duration_str(12345), "12.3 \u00b5s");
  EXPECT_EQ(duration_str(999949), "999.9 \u00b5s");
  EXPECT_EQ(duration_str(1234567), "1.235 ms");
}

// A duration that rounds up to a whole unit is written in that unit: never
// "1000.0 µs" (review finding, 2026-12-07: 999,950 to 999,999 ns read so).
TEST(ProfileTest, DurationsThatRoundUpChangeUnit) {
  EXPECT_EQ(duration_str(999950), "1.000 ms");
  EXPECT_EQ(duration_str(999999), "1.000 ms");
  EXPECT_EQ(duration_str(1000000), "1.000 ms");
}

// Names, notes and stream names with quotes, backslashes, control characters
// or bytes that are not UTF-8 still make a trace that parses (review
// finding, 2026-12-07: a note with a stray byte made chrome_trace_json throw
// nlohmann's type_error out of write_chrome_trace, a Status function).
TEST(ProfileTest, ChromeTraceOfOddStringsIsValidJson) {
  StepProfile p{.mode = "replay \"quoted\"", .device = "cpu\\0", .streams = {"tab\there\x01"}};
  p.nodes.push_back({.op = "op\"with\\quote\n", .phase = "forward", .duration_ns = 5, .median_ns = 5});
  p.note = "half a character \xc3 and a stray byte \xff";
  std::string text;
  ASSERT_NO_THROW(text = chrome_trace_json({&p}));
  nlohmann::json trace;
  ASSERT_NO_THROW(trace = nlohmann::json::parse(text));
  bool found_op = false;
  for (const nlohmann::json& e : trace.at("traceEvents")) {
    found_op = found_op || (e.at("ph") == "X" && e.at("name") == "op\"with\\quote\n");
  }
  EXPECT_TRUE(found_op);
  const std::string note = trace.at("otherData").at("encore").at(0).at("note").get<std::string>();
  EXPECT_EQ(note.rfind("half a character ", 0), 0u) << note;
  EXPECT_NE(note.find("stray byte"), std::string::npos) << note;
  const std::string path = ::testing::TempDir() + "odd_strings_trace.json";
  absl::Status written;
  ASSERT_NO_THROW(written = write_chrome_trace(path, {&p}));
  EXPECT_TRUE(written.ok()) << written;
}

// Shadow verification (CaptureOptions::verify_every) runs the step eagerly
// beside a replay; the profiler times replays, so it pauses verification
// while it replays and says so (review finding, 2026-12-07: with
// verify_every = 1 every untimed replay also ran the eager step, and step_ns
// reported that sum as the replay's time). Verification resumes afterwards.
TEST(ProfileTest, ReplayProfileOfAVerifiedGraphTimesReplaysOnly) {
  std::unique_ptr<Workload> w = small_mlp();
  int eager_steps = 0;
  absl::StatusOr<Graph> g = capture(
      [&] {
        ++eager_steps;
        return w->step();
      },
      {.verify_every = 1});
  ASSERT_TRUE(g.ok()) << g.status();
  const int before = eager_steps;
  absl::StatusOr<StepProfile> p = profile_replay(*g, {.warmup_runs = 1, .runs = 3});
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(eager_steps, before) << "profiled replays ran the step eagerly";
  EXPECT_NE(p->note.find("verify_every = 1"), std::string::npos) << p->note;
  EXPECT_EQ(g->internals().verify_every, 1);
  ASSERT_TRUE(g->replay().ok());
  EXPECT_EQ(eager_steps, before + 1) << "verification did not resume after the profile";
}

}  // namespace
}  // namespace encore
