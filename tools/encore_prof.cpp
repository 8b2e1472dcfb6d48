// encore-prof: the replay profiler. Builds a built-in model's training step,
// profiles it eagerly and captured + replayed, prints a summary of each and
// writes a Chrome trace (Perfetto, chrome://tracing) and a DOT graph, and lists
// the host values the captured graph froze into its kernels (--frozen).
//
//   encore-prof --model=mlp [--hidden=128] [--batch=128] --trace=mlp.json
//   encore-prof --model=gpt --n_layer=2 --n_embd=64 --seq=32 --trace=gpt.json --dot=gpt.dot
//   encore-prof --model=cnn --blocks=3 --channels=16  # the small ResNet of bench/train_step_bench
//   encore-prof --model=block  # the transformer block of bench/peers (B 8, T 64, C 256, 4 heads)
//   encore-prof --device=cuda --model=gpt      # per-node GPU times (CUPTI), GPU idle time
//
// --device=auto (the default) profiles on cuda:0 when a GPU answers, else on
// the CPU, like examples/train_gpt's --device.
// A thin main over include/encore/profile.h; your own program can call the
// same functions around its own captured step. Exits 2 on bad flags (a value
// that does not parse, is out of the range --help gives, or sizes a tensor
// past 2^28 elements), 1 when capture, profiling or writing fails, with a
// one-line message.
#include <cstdio>
#include <map>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/flags/usage_config.h"
#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_format.h"
#include "encore/profile.h"
#include "tools/flags.h"
#include "tools/workloads.h"

ABSL_FLAG(std::string, device, "auto",
          "Where the step runs: cpu, cuda (cuda:0), or auto (cuda when a GPU answers, else cpu).");
ABSL_FLAG(std::string, model, "mlp",
          "Built-in model to profile: mlp (examples/train_mlp), gpt (examples/train_gpt), cnn (a small ResNet\n"
          "on 3x32x32 inputs, SGD momentum: the CNN step of bench/train_step_bench) or block (one pre-norm\n"
          "transformer block, exact GELU, loss mean(out^2), AdamW: the block of bench/peers/torch_cpu_steps).");
ABSL_FLAG(int64_t, batch, 0,
          "Examples per step, 0..65536; 0 = the model's default (mlp 128, gpt 16, cnn 32, block 8).");
ABSL_FLAG(int64_t, hidden, 128, "mlp: hidden width of the 32-hidden-10 MLP, 1..65536.");
ABSL_FLAG(int64_t, seq, 0,
          "gpt, block: positions per sequence (T; gpt: also its block size), 0..4096; 0 = the model's default\n"
          "(gpt 32, block 64).");
ABSL_FLAG(int64_t, n_layer, 2, "gpt: transformer blocks, 1..256.");
ABSL_FLAG(int64_t, n_head, 4, "gpt, block: attention heads per block, 1..1024.");
ABSL_FLAG(int64_t, n_embd, 0,
          "gpt, block: model width (C), 0..16384, dividing by n_head; 0 = the model's default (gpt 64, block 256).");
ABSL_FLAG(int64_t, vocab, 65, "gpt: vocabulary size (token ids are synthetic), 1..1048576.");
ABSL_FLAG(int64_t, blocks, 3, "cnn: residual blocks (two 3x3 convolutions with batch norm each), 0..256.");
ABSL_FLAG(int64_t, channels, 16, "cnn: channels of every convolution, 1..4096.");
ABSL_FLAG(double, dropout, 0.0, "gpt: dropout probability, in [0, 1).");
ABSL_FLAG(double, lr, 3e-3, "Learning rate (AdamW; cnn: SGD with momentum 0.9).");
ABSL_FLAG(uint64_t, seed, 1337, "Seed for the model's initialisation and inputs.");
ABSL_FLAG(int32_t, runs, 20,
          "Timed runs per profile, 1..100000 (node times are medians); as many untimed runs give the step time.");
ABSL_FLAG(int32_t, warmup_runs, 2, "Untimed warm-up runs before each profile, 0..100000.");
ABSL_FLAG(bool, eager, true, "Also profile the step eagerly (kernel times and the dispatch gaps between them).");
ABSL_FLAG(int32_t, top, 10, "Ops listed in each summary, by total time, 0..10000.");
ABSL_FLAG(std::string, trace, "", "If set, write a Chrome trace JSON here (eager and replay as two processes).");
ABSL_FLAG(bool, frozen, true,
          "List the host values the captured graph froze into its kernels (Graph::frozen()), grouped.");
ABSL_FLAG(std::string, dot, "", "If set, write the captured graph in Graphviz DOT here (nodes by op, data edges).");

namespace {

using encore::tools::Workload;

absl::StatusOr<encore::Device> chosen_device() {
  const std::string d = absl::GetFlag(FLAGS_device);
  if (d != "cpu" && d != "cuda" && d != "auto") {
    return absl::InvalidArgumentError(absl::StrFormat("--device must be cpu, cuda or auto, got '%s'", d));
  }
  if (d == "cuda" && !encore::cuda_available()) {
    return absl::InvalidArgumentError("--device=cuda but no usable GPU (or encore was built without CUDA)");
  }
  return d == "cpu" ? encore::kCPU : d == "cuda" ? encore::Device::cuda(0) : encore::default_device();
}

constexpr int64_t kMaxTensorElements = int64_t{1} << 28;   // 1 GiB of f32: the largest tensor a step may make

// --seq and --n_embd, with 0 standing for the model's default.
int64_t seq_flag() {
  const int64_t v = absl::GetFlag(FLAGS_seq);
  return v != 0 ? v : absl::GetFlag(FLAGS_model) == "block" ? 64 : 32;
}
int64_t n_embd_flag() {
  const int64_t v = absl::GetFlag(FLAGS_n_embd);
  return v != 0 ? v : absl::GetFlag(FLAGS_model) == "block" ? 256 : 64;
}

// Each size flag in its range, and the step's largest tensors (activations,
// logits, attention scores, parameters) at most kMaxTensorElements: a size
// that would exhaust memory is a flag error, not an allocation failure.
absl::Status check_sizes() {
  using encore::tools::in_range;
  const int64_t batch = absl::GetFlag(FLAGS_batch), hidden = absl::GetFlag(FLAGS_hidden);
  const int64_t seq = seq_flag(), n_layer = absl::GetFlag(FLAGS_n_layer);
  const int64_t n_head = absl::GetFlag(FLAGS_n_head), n_embd = n_embd_flag();
  const int64_t vocab = absl::GetFlag(FLAGS_vocab);
  const int64_t blocks = absl::GetFlag(FLAGS_blocks), channels = absl::GetFlag(FLAGS_channels);
  for (absl::Status s : {in_range("--runs", absl::GetFlag(FLAGS_runs), 1, 100000),
                         in_range("--warmup_runs", absl::GetFlag(FLAGS_warmup_runs), 0, 100000),
                         in_range("--top", absl::GetFlag(FLAGS_top), 0, 10000), in_range("--batch", batch, 0, 65536),
                         in_range("--hidden", hidden, 1, 65536), in_range("--seq", absl::GetFlag(FLAGS_seq), 0, 4096),
                         in_range("--n_layer", n_layer, 1, 256), in_range("--n_head", n_head, 1, 1024),
                         in_range("--n_embd", absl::GetFlag(FLAGS_n_embd), 0, 16384),
                         in_range("--vocab", vocab, 1, 1 << 20),
                         in_range("--blocks", blocks, 0, 256), in_range("--channels", channels, 1, 4096)}) {
    if (!s.ok()) return s;
  }
  if (const double p = absl::GetFlag(FLAGS_dropout); !(p >= 0 && p < 1)) {
    return absl::InvalidArgumentError(absl::StrFormat("--dropout must be in [0, 1), got %g", p));
  }
  // Every product below is at most 2^16 * 2^12 * 2^20 = 2^48: no overflow.
  const std::string model = absl::GetFlag(FLAGS_model);
  const bool mlp = model == "mlp", gpt = model == "gpt", cnn = model == "cnn", block = model == "block";
  const bool attention = gpt || block;
  if (attention && n_embd % n_head != 0) {
    return absl::InvalidArgumentError(
        absl::StrFormat("--n_embd (%d) must divide by --n_head (%d)", n_embd, n_head));
  }
  const int64_t b = batch > 0 ? batch : mlp ? 128 : cnn ? 32 : block ? 8 : 16;
  const std::pair<const char*, int64_t> largest[] = {
      {"batch x hidden", mlp ? b * hidden : 0},
      {"batch x seq x vocab (logits)", gpt ? b * seq * vocab : 0},
      {"batch x seq x 4 n_embd (MLP)", attention ? b * seq * 4 * n_embd : 0},
      {"batch x n_head x seq x seq (attention)", attention ? b * n_head * seq * seq : 0},
      {"12 n_layer x n_embd^2 (parameters)", attention ? 12 * (gpt ? n_layer : 1) * n_embd * n_embd : 0},
      {"vocab x n_embd (embedding)", gpt ? vocab * n_embd : 0},
      {"batch x channels x 32 x 32 (activations)", cnn ? b * channels * 32 * 32 : 0},
      {"channels^2 x 9 (convolution weights)", cnn ? channels * channels * 9 : 0}};
  for (const auto& [what, n] : largest) {
    if (n > kMaxTensorElements) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "the sizes make %s = %d elements; at most %d (1 GiB of f32)", what, n, kMaxTensorElements));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<Workload>> build_workload(encore::Device device) {
  const std::string model = absl::GetFlag(FLAGS_model);
  const int64_t batch = absl::GetFlag(FLAGS_batch);
  if (model == "mlp") {
    const int64_t hidden = absl::GetFlag(FLAGS_hidden);
    return encore::tools::make_mlp({.widths = {32, hidden, 10}, .batch = batch > 0 ? batch : 128,
                                    .lr = absl::GetFlag(FLAGS_lr), .seed = absl::GetFlag(FLAGS_seed),
                                    .device = device});
  }
  if (model == "gpt") {
    encore::tools::GptSpec spec{.batch = batch > 0 ? batch : 16, .lr = absl::GetFlag(FLAGS_lr)};
    spec.config = {.vocab_size = absl::GetFlag(FLAGS_vocab), .block_size = seq_flag(),
                   .n_layer = absl::GetFlag(FLAGS_n_layer), .n_head = absl::GetFlag(FLAGS_n_head),
                   .n_embd = n_embd_flag(), .dropout = absl::GetFlag(FLAGS_dropout),
                   .seed = absl::GetFlag(FLAGS_seed), .device = device};
    std::unique_ptr<Workload> w;
    absl::Status s = encore::status_of([&] { w = encore::tools::make_gpt(spec); });   // the model checks its config
    if (!s.ok()) return s;
    return w;
  }
  if (model == "cnn") {
    return encore::tools::make_resnet_cnn({.blocks = absl::GetFlag(FLAGS_blocks),
                                           .channels = absl::GetFlag(FLAGS_channels),
                                           .batch = batch > 0 ? batch : 32, .lr = absl::GetFlag(FLAGS_lr),
                                           .seed = absl::GetFlag(FLAGS_seed), .device = device});
  }
  if (model == "block") {
    return encore::tools::make_block({.batch = batch > 0 ? batch : 8, .seq = seq_flag(), .n_embd = n_embd_flag(),
                                      .n_head = absl::GetFlag(FLAGS_n_head), .lr = absl::GetFlag(FLAGS_lr),
                                      .seed = absl::GetFlag(FLAGS_seed), .device = device});
  }
  return absl::InvalidArgumentError(absl::StrFormat("--model must be mlp, gpt, cnn or block, got '%s'", model));
}

// Graph::frozen(), one line per distinct (op, phase, argument, value): how
// many kernels hold it and the first of them.
void print_frozen(const encore::Graph& graph) {
  struct Group {
    size_t count = 0, first_node = 0;
  };
  std::map<std::tuple<std::string, std::string, std::string, std::string>, Group> groups;
  const std::vector<encore::FrozenValue> frozen = graph.frozen();
  std::set<size_t> holders;   // the kernels whose arguments hold one
  for (const encore::FrozenValue& f : frozen) {
    Group& g = groups[{f.phase, f.op, f.name, f.value}];
    if (g.count++ == 0) g.first_node = f.node;
    holders.insert(f.node);
  }
  absl::PrintF("frozen host values: %d in the arguments of %d of the graph's %d kernels (each replay reuses "
               "them; capture checked them against the warm-up)\n",
               frozen.size(), holders.size(), graph.stats().kernels);
  absl::PrintF("  %-10s %-22s %-12s %-24s %7s %10s\n", "phase", "op", "argument", "value", "kernels", "first");
  for (const auto& [key, g] : groups) {
    const auto& [phase, op, name, value] = key;
    absl::PrintF("  %-10s %-22s %-12s %-24s %7d %10d\n", phase, op, name, value, g.count, g.first_node);
  }
}

absl::Status run(Workload& w) {
  const encore::ProfileOptions options{.warmup_runs = absl::GetFlag(FLAGS_warmup_runs),
                                       .runs = absl::GetFlag(FLAGS_runs)};
  const int top = absl::GetFlag(FLAGS_top);
  auto step = [&w] { return w.step(); };
  std::vector<encore::StepProfile> profiles;
  if (absl::GetFlag(FLAGS_eager)) {
    absl::StatusOr<encore::StepProfile> eager = encore::profile_eager(step, options);
    if (!eager.ok()) return eager.status();
    std::fputs(encore::format_summary(*eager, top).c_str(), stdout);
    profiles.push_back(*std::move(eager));
  }
  absl::StatusOr<encore::Graph> graph = encore::capture(step);
  if (!graph.ok()) return graph.status();
  const encore::CaptureStats& st = graph->stats();
  absl::PrintF("capture: %d kernels, %d temporaries, arena %d bytes, captured in %.1f ms (plan %.1f ms)\n",
               st.kernels, st.temporaries, st.arena_bytes, st.capture_ms, st.plan_ms);
  if (st.planner_stacked > 0) {
    absl::PrintF("capture: the planner's time limit cut its first plan: %d temporaries stacked above it\n",
                 st.planner_stacked);
  }
  if (absl::GetFlag(FLAGS_frozen)) print_frozen(*graph);
  absl::StatusOr<encore::StepProfile> replayed = encore::profile_replay(*graph, options);
  if (!replayed.ok()) return replayed.status();
  std::fputs(encore::format_summary(*replayed, top).c_str(), stdout);
  if (!profiles.empty()) {
    const double ratio = static_cast<double>(profiles[0].step_ns) / std::max<double>(1, replayed->step_ns);
    absl::PrintF("eager / replay step time: %.2fx\n", ratio);
  }
  profiles.push_back(*std::move(replayed));
  // The summaries go through stdio's buffer, a trace or DOT file to
  // /dev/stdout through the descriptor: the summaries first, whole.
  std::fflush(stdout);
  if (const std::string path = absl::GetFlag(FLAGS_trace); !path.empty()) {
    std::vector<const encore::StepProfile*> ptrs;
    for (const encore::StepProfile& p : profiles) ptrs.push_back(&p);
    if (absl::Status s = encore::write_chrome_trace(path, ptrs); !s.ok()) return s;
    absl::PrintF("trace: %s\n", path);
    std::fflush(stdout);
  }
  if (const std::string path = absl::GetFlag(FLAGS_dot); !path.empty()) {
    if (absl::Status s = graph->dump_dot(path); !s.ok()) return s;
    absl::PrintF("dot: %s\n", path);
  }
  return absl::OkStatus();
}

}  // namespace

int main(int argc, char** argv) {
  encore::tools::set_usage(
      "encore-prof", "encore_prof.cpp",
      "Profiles a built-in model's training step eagerly and captured + replayed, on the CPU or a GPU: per-kernel\n"
      "times mapped to ops and phases (forward, backward, optimizer), a summary, a Chrome trace and a DOT graph.\n"
      "Usage: encore-prof [--device=cpu|cuda|auto] [--model=mlp|gpt|cnn|block] [model flags] [--runs=N]\n"
      "       [--trace=FILE.json] [--dot=FILE.dot]");
  std::vector<char*> args = encore::tools::parse_flags(argc, argv, "encore-prof");
  if (args.size() != 1) {
    std::fprintf(stderr, "encore-prof: unexpected argument '%s' (see --help)\n", args[1]);
    return 2;
  }
  if (absl::Status s = check_sizes(); !s.ok()) return encore::tools::flag_error("encore-prof", s);
  absl::StatusOr<encore::Device> device = chosen_device();
  // Flags that size or configure the model (a size whose bytes do not fit,
  // --lr=nan) make the library throw: reported like any other bad flag.
  absl::StatusOr<std::unique_ptr<Workload>> w = absl::UnknownError("no workload");
  const absl::Status built = !device.ok() ? device.status() : encore::status_of([&] { w = build_workload(*device); });
  if (!built.ok()) w = built;
  if (!w.ok()) {
    std::fprintf(stderr, "encore-prof: %s\n", std::string(w.status().message()).c_str());
    return 2;
  }
  absl::Status ran;
  absl::Status thrown = encore::status_of([&] { ran = run(**w); });
  const absl::Status& status = thrown.ok() ? ran : thrown;
  if (!status.ok()) {
    std::fprintf(stderr, "encore-prof: %s\n", std::string(status.message()).c_str());
    return 1;
  }
  return 0;
}
