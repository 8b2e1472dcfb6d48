// encore-launch: the launch-overhead lab. How much does one kernel cost
// eagerly (dispatch, allocation, launch) and replayed from a captured graph,
// and what does capture cost, as the number of kernels N grows?
//
//   encore-launch                                   # N = 1,10,100,1000,10000; table on stdout
//   encore-launch --n=1,100,10000 --json=launch.json --svg=launch.svg
//
// Variants, each a captured step of tiny elementwise kernels on --elements floats:
//   chain  N dependent kernels  t = t + 1 (each reads the previous result)
//   wide   N independent kernels y_i = x + 1 (all read x; all are outputs)
//   mlp    one training step of a small MLP (32-64-10, batch 32, AdamW); N = its kernel count
// For each: eager cost per kernel, capture() cost (warm-ups, record, plan,
// capture run), replay cost per kernel; medians over --reps repetitions with
// min and max, wall time and the thread's CPU time (steadier on a shared
// machine: it leaves out time the thread was not running). Every backend
// --backends names and the machine can run: the CPU, and CUDA when built and
// a GPU answers (each repetition then ends with a synchronize; compare wall
// times). Otherwise it prints why CUDA was not measured (--backends=cuda on a
// machine without a GPU measures nothing there, says so, writes its files and
// exits 1: a script that asked for CUDA figures must not take none as a pass).
// CUDA graph update cost when only a pointer changes: for each CUDA chain
// row, the median ns of one cudaGraphExecKernelNodeSetParams that points the
// chain's first kernel (which reads x) at another buffer of the same size,
// and back (CudaGraph::update_pointer_ns); JSON: graph_update_ns per row and,
// under "cuda", the median over the chain rows (null when not measured).
// Exits 2 on bad flags (a value that does not parse, or is out of the range
// its --help gives), 1 when a measurement or a file write fails (after
// writing what the other backends measured).
// Instantiate against update: for every row, the ms capture() spent making
// the executable from its capture run (CUDA: cudaGraphInstantiate and the
// upload; CPU: resolving the kernel list), against the ms the same graph's
// executable took to be updated when it was captured again into another
// arena (as GraphedStep moves a graph: cudaGraphExecUpdate); medians of
// --capture_reps each. The CPU makes every capture's kernel list anew (its
// instantiation only resolves argument pointers), so CPU rows show the
// instantiation alone. JSON: instantiate_ms and update_ms per row (null when
// no update happened).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <functional>
#include <string>
#include <thread>
#include <utility>

#include <time.h>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/flags/usage_config.h"
#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/match.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "encore/encore.h"
#include "encore/profile.h"
#include "capture/cuda_graph.h"
#include "capture/graph_impl.h"
#include "capture/steps.h"
#include "nlohmann/json.hpp"
#include "planner/svg_text.h"
#include "src/core/atomic_file.h"
#include "src/core/stream.h"
#include "tools/flags.h"
#include "tools/workloads.h"

ABSL_FLAG(std::vector<std::string>, n, std::vector<std::string>({"1", "10", "100", "1000", "10000"}),
          "Comma-separated kernel counts N for the chain and wide variants (each 1..1000000).");
ABSL_FLAG(std::vector<std::string>, variants, std::vector<std::string>({"chain", "wide", "mlp"}),
          "Comma-separated variants to run: chain, wide, mlp.");
ABSL_FLAG(std::vector<std::string>, backends, std::vector<std::string>({"auto"}),
          "Comma-separated backends: cpu, cuda, or auto (the CPU, and CUDA when built and a GPU answers).");
ABSL_FLAG(int64_t, elements, 16,
          "Floats per tensor in the chain and wide kernels (1..2^24; N x elements at most 2^28).");
ABSL_FLAG(int32_t, reps, 21,
          "Repetitions of each eager and replay measurement, 1..10000 (median, min, max reported).");
ABSL_FLAG(int32_t, capture_reps, 5, "Repetitions of each capture() measurement, 1..1000.");
ABSL_FLAG(double, min_rep_ms, 5.0,
          "Each eager or replay repetition runs the step enough times to last at least this long (ms, 0..10000).");
ABSL_FLAG(std::string, json, "", "If set, write every result and the machine description as JSON here.");
ABSL_FLAG(std::string, svg, "", "If set, draw CPU cost per kernel against N (log-log), eager and replayed, here.");

namespace {

using encore::Tensor;

constexpr int64_t kMaxElements = int64_t{1} << 24;     // floats per tensor (64 MiB)
constexpr int64_t kMaxLiveFloats = int64_t{1} << 28;   // N x elements: the wide variant's outputs (1 GiB)
using Step = std::function<std::vector<Tensor>()>;
// --json and --svg: whole or not at all; /dev/stdout and pipes written in place.
constexpr encore::WriteMode kOutput = encore::WriteMode::kAtomicWherePossible;

struct Stat {
  double median = 0, min = 0, max = 0;
};

Stat stat_of(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return {v[v.size() / 2], v.front(), v.back()};
}

nlohmann::json to_json(const Stat& s) { return {{"median", s.median}, {"min", s.min}, {"max", s.max}}; }

struct Row {
  encore::Device device;
  std::string variant;
  int64_t n = 0;          // requested N (mlp: the step's kernel count)
  int64_t kernels = 0;    // nodes in the captured graph
  Stat eager_ns;          // wall ns per kernel
  Stat capture_ms;        // one capture() call, wall
  Stat replay_ns;         // wall ns per kernel
  Stat eager_cpu_ns, replay_cpu_ns;   // thread CPU ns per kernel (steadier on a shared machine)
  double plan_ms = 0, capture_run_ms = 0;   // of the last capture
  int64_t graph_update_ns = -1;             // CUDA chain: one pointer retargeted in the instantiated graph; -1: not measured
  Stat instantiate_ms;                      // making the executable, in capture()
  Stat update_ms;                           // updating it for a capture into another arena
  int updates_refused = 0;                  // recaptures that instantiated anew instead

  // The cost plotted and compared: thread CPU time on the CPU backend (steady
  // on a shared machine), wall time on CUDA (the host thread waits for the GPU).
  double eager_cost() const { return device.is_cpu() ? eager_cpu_ns.median : eager_ns.median; }
  double replay_cost() const { return device.is_cpu() ? replay_cpu_ns.median : replay_ns.median; }
};

double ms_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

double thread_cpu_ns() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) * 1e9 + static_cast<double>(ts.tv_nsec);
}

// Per-repetition cost of fn() in ns per call, wall and thread CPU, each
// repetition looping fn long enough to last min_rep_ms and then waiting for
// `device` (asynchronous backends) inside the timed region.
std::pair<std::vector<double>, std::vector<double>> time_reps(const std::function<void()>& fn, encore::Device device,
                                                              int reps, double min_rep_ms) {
  encore::Stream& stream = encore::current_stream(device);
  // Warm-up for about one repetition; it also sets how many calls a repetition makes.
  auto t0 = std::chrono::steady_clock::now();
  int64_t calls = 0;
  do {
    fn();
    stream.synchronize();
    ++calls;
  } while (ms_since(t0) < min_rep_ms);
  const double once_ms = std::max(ms_since(t0) / static_cast<double>(calls), 1e-6);
  const int64_t inner = std::max<int64_t>(1, static_cast<int64_t>(std::ceil(min_rep_ms / once_ms)));
  std::vector<double> wall, cpu;
  for (int r = 0; r < reps; ++r) {
    t0 = std::chrono::steady_clock::now();
    const double c0 = thread_cpu_ns();
    for (int64_t i = 0; i < inner; ++i) fn();
    stream.synchronize();
    cpu.push_back((thread_cpu_ns() - c0) / static_cast<double>(inner));
    wall.push_back(ms_since(t0) * 1e6 / static_cast<double>(inner));
  }
  return {wall, cpu};
}

std::vector<double> per_kernel(std::vector<double> ns, int64_t kernels) {
  for (double& x : ns) x /= static_cast<double>(std::max<int64_t>(1, kernels));
  return ns;
}

// Called with the captured graph before its replays are timed.
using AfterCapture = std::function<void(encore::Graph&, Row&)>;

absl::StatusOr<Row> measure(encore::Device device, const std::string& variant, int64_t n, const Step& step,
                            const AfterCapture& after_capture = nullptr) {
  const int reps = absl::GetFlag(FLAGS_reps);
  const double min_ms = absl::GetFlag(FLAGS_min_rep_ms);
  Row row{.device = device, .variant = variant, .n = n};
  std::vector<double> capture_ms, instantiate_ms, update_ms;
  absl::StatusOr<encore::Graph> graph = absl::UnknownError("no capture ran");
  for (int r = 0; r < absl::GetFlag(FLAGS_capture_reps); ++r) {
    auto t0 = std::chrono::steady_clock::now();
    graph = encore::capture(step);
    capture_ms.push_back(ms_since(t0));
    if (!graph.ok()) return graph.status();
    instantiate_ms.push_back(graph->stats().instantiate_ms);
  }
  row.instantiate_ms = stat_of(instantiate_ms);
  // The same graph captured again, alternately into two other arenas.
  encore::Graph::Impl& g = graph->internals();
  const encore::Ref<encore::Storage> arenas[2] = {encore::Storage::allocate(g.arena->nbytes(), device),
                                                  encore::Storage::allocate(g.arena->nbytes(), device)};
  for (int r = 0; r < absl::GetFlag(FLAGS_capture_reps); ++r) {
    if (absl::Status s = encore::capture_internal::capture_into(step, {}, g, arenas[r % 2]); !s.ok()) return s;
    if (g.stats.updated) {
      update_ms.push_back(g.stats.instantiate_ms);
    } else {
      ++row.updates_refused;
    }
  }
  if (!update_ms.empty()) row.update_ms = stat_of(update_ms);
  row.kernels = graph->stats().kernels;
  row.capture_ms = stat_of(capture_ms);
  row.plan_ms = graph->stats().plan_ms;
  row.capture_run_ms = graph->stats().capture_ms;
  if (after_capture) after_capture(*graph, row);
  absl::Status replay_status;
  auto [replay_wall, replay_cpu] = time_reps([&] { replay_status.Update(graph->replay()); }, device, reps, min_ms);
  if (!replay_status.ok()) return replay_status;
  row.replay_ns = stat_of(per_kernel(replay_wall, row.kernels));
  row.replay_cpu_ns = stat_of(per_kernel(replay_cpu, row.kernels));
  auto [eager_wall, eager_cpu] = time_reps([&] { step(); }, device, reps, min_ms);
  row.eager_ns = stat_of(per_kernel(eager_wall, row.kernels));
  row.eager_cpu_ns = stat_of(per_kernel(eager_cpu, row.kernels));
  return row;
}

// N dependent kernels: t = t + 1.
Step chain_step(const Tensor& x, int64_t n) {
  return [x, n] {
    encore::NoGradGuard no_grad;
    Tensor t = x;
    for (int64_t i = 0; i < n; ++i) t = encore::add(t, 1.0);
    return std::vector<Tensor>{t};
  };
}

// N independent kernels: y_i = x + 1, every y_i an output.
Step wide_step(const Tensor& x, int64_t n) {
  return [x, n] {
    encore::NoGradGuard no_grad;
    std::vector<Tensor> ys;
    ys.reserve(n);
    for (int64_t i = 0; i < n; ++i) ys.push_back(encore::add(x, 1.0));
    return ys;
  };
}

std::string cpu_model() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("model name", 0) == 0) return line.substr(line.find(':') + 2);
  }
  return "unknown CPU";
}

bool cuda_requested() {
  for (const std::string& b : absl::GetFlag(FLAGS_backends)) {
    if (b == "cuda") return true;
  }
  return false;
}

// What happened to CUDA in this run, in one line.
std::string cuda_line(bool measured) {
  const char* asked = cuda_requested() ? " (--backends=cuda asked for it)" : "";
#ifdef ENCORE_HAVE_CUDA
  if (measured) return "cuda: measured (rows on cuda:0)";
  if (encore::cuda_available()) return "cuda: GPU available, not requested (--backends): not measured";
  return absl::StrCat("cuda: backend built, no GPU available: not measured", asked);
#else
  return measured ? "cuda: measured" : absl::StrCat("cuda: not built: not measured", asked);
#endif
}

// The median of the CUDA chain rows' graph update costs (ns), or -1.
int64_t graph_update_median(const std::vector<Row>& rows) {
  std::vector<int64_t> v;
  for (const Row& r : rows) {
    if (r.graph_update_ns >= 0) v.push_back(r.graph_update_ns);
  }
  if (v.empty()) return -1;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// The devices --backends names that this build and machine can run.
absl::StatusOr<std::vector<encore::Device>> chosen_devices() {
  std::vector<encore::Device> out;
  auto add = [&](encore::Device d) {
    if (std::find(out.begin(), out.end(), d) == out.end()) out.push_back(d);
  };
  for (const std::string& b : absl::GetFlag(FLAGS_backends)) {
    if (b == "cpu" || b == "auto") add(encore::kCPU);
    if ((b == "cuda" || b == "auto") && encore::cuda_available()) add(encore::Device::cuda(0));
    if (b != "cpu" && b != "cuda" && b != "auto") {
      return absl::InvalidArgumentError(absl::StrFormat("--backends: unknown backend '%s' (cpu, cuda, auto)", b));
    }
  }
  return out;
}

absl::StatusOr<std::vector<int64_t>> parse_counts() {
  std::vector<int64_t> out;
  for (const std::string& s : absl::GetFlag(FLAGS_n)) {
    int64_t v = 0;
    if (!absl::SimpleAtoi(s, &v) || v < 1 || v > 1000000) {
      return absl::InvalidArgumentError(absl::StrFormat("--n: '%s' is not a kernel count in 1..1000000", s));
    }
    out.push_back(v);
  }
  if (out.empty()) return absl::InvalidArgumentError("--n: give at least one kernel count");
  return out;
}

absl::Status check_flags(const std::vector<int64_t>& counts) {
  // An empty list ("--variants=") would measure nothing and exit 0 as if it had.
  if (absl::GetFlag(FLAGS_backends).empty()) {
    return absl::InvalidArgumentError("--backends: give at least one backend (cpu, cuda, auto)");
  }
  if (absl::GetFlag(FLAGS_variants).empty()) {
    return absl::InvalidArgumentError("--variants: give at least one variant (chain, wide, mlp)");
  }
  if (absl::StatusOr<std::vector<encore::Device>> d = chosen_devices(); !d.ok()) return d.status();
  for (const std::string& v : absl::GetFlag(FLAGS_variants)) {
    if (v != "chain" && v != "wide" && v != "mlp") {
      return absl::InvalidArgumentError(absl::StrFormat("--variants: unknown variant '%s' (chain, wide, mlp)", v));
    }
  }
  using encore::tools::in_range;
  const int64_t elements = absl::GetFlag(FLAGS_elements);
  for (absl::Status s : {in_range("--elements", elements, 1, kMaxElements),
                         in_range("--reps", absl::GetFlag(FLAGS_reps), 1, 10000),
                         in_range("--capture_reps", absl::GetFlag(FLAGS_capture_reps), 1, 1000),
                         encore::tools::finite_in_range("--min_rep_ms", absl::GetFlag(FLAGS_min_rep_ms), 0, 10000)}) {
    if (!s.ok()) return s;
  }
  // The wide variant keeps N outputs of --elements floats alive.
  for (int64_t n : counts) {
    if (n * elements > kMaxLiveFloats) {   // both at most 10^6 and 2^24: no overflow
      return absl::InvalidArgumentError(absl::StrFormat(
          "--n=%d with --elements=%d keeps %d floats alive in the wide variant; at most %d (1 GiB)", n, elements,
          n * elements, kMaxLiveFloats));
    }
  }
  return absl::OkStatus();
}

bool wants(const std::string& variant) {
  const std::vector<std::string> v = absl::GetFlag(FLAGS_variants);
  return std::find(v.begin(), v.end(), variant) != v.end();
}

void print_row(const Row& r) {
  absl::PrintF("%-6s %-6s %6d %6d  ", r.device.str(), r.variant, r.n, r.kernels);
  absl::PrintF("%7.1f [%6.1f, %7.1f] %7.1f  ", r.eager_ns.median, r.eager_ns.min, r.eager_ns.max,
               r.eager_cpu_ns.median);
  absl::PrintF("%9.3f [%8.3f, %8.3f]  ", r.capture_ms.median, r.capture_ms.min, r.capture_ms.max);
  absl::PrintF("%6.1f [%6.1f, %6.1f] %6.1f  ", r.replay_ns.median, r.replay_ns.min, r.replay_ns.max,
               r.replay_cpu_ns.median);
  absl::PrintF("%6.1fx\n", r.eager_cost() / std::max(r.replay_cost(), 1e-9));
}

// ---- SVG: median thread CPU ns per kernel against N, both log scale ----

using encore::planner::svg_text_width;

// Plot area and decade ranges of a log-log plot. The canvas and margins are
// sized from the text they hold (NOTE [ Text extents ] in
// planner/svg_text.h): the title sets the least width, the widest y label
// the left margin, the widest legend entry the right one, the legend's
// length the least height.
struct LogLogPlot {
  static constexpr double kT = 40, kB = 50, kPad = 10, kFont = 12, kTitleFont = 14, kPointFont = 10;
  static constexpr double kSwatch = 30, kLegendRow = 18;
  double lx0, lx1, ly0, ly1;                   // log10 ranges, whole decades
  double width = 720, height = 480, left = 70, right = 170;   // canvas and side margins (pixels), set by fit()

  double px(double x) const { return left + (std::log10(x) - lx0) / (lx1 - lx0) * (width - left - right); }
  double py(double y) const {
    return height - kB - (std::log10(std::max(y, 0.1)) - ly0) / (ly1 - ly0) * (height - kT - kB);
  }
  static std::string y_label(double e) { return absl::StrFormat("%g ns", std::pow(10, e)); }

  void fit(const std::string& title, const std::vector<std::string>& legend) {
    double widest_y = 0, widest_entry = 0;
    for (double e = ly0; e <= ly1; ++e) widest_y = std::max(widest_y, svg_text_width(y_label(e), kFont));
    for (const std::string& l : legend) widest_entry = std::max(widest_entry, svg_text_width(l, kFont));
    left = std::max(left, kPad + widest_y + 6);
    right = std::max(right, 10 + kSwatch + 6 + widest_entry + kPad);
    width = std::max({width, 2 * kPad + svg_text_width(title, kTitleFont), left + right + 300});
    height = std::max(height, kT + 20 + kLegendRow * static_cast<double>(legend.size()) + kB);
  }

  // Decade grid lines with labels, and the x-axis title.
  void axes(std::string& s) const {
    for (double e = lx0; e <= lx1; ++e) {
      const double x = px(std::pow(10, e));
      absl::StrAppendFormat(&s, "<line x1=\"%.1f\" y1=\"%g\" x2=\"%.1f\" y2=\"%g\" stroke=\"#ddd\"/>"
                                "<text x=\"%.1f\" y=\"%g\" text-anchor=\"middle\">1e%d</text>\n",
                            x, kT, x, height - kB, x, height - kB + 16, static_cast<int>(e));
    }
    for (double e = ly0; e <= ly1; ++e) {
      const double y = py(std::pow(10, e));
      absl::StrAppendFormat(&s, "<line x1=\"%g\" y1=\"%.1f\" x2=\"%g\" y2=\"%.1f\" stroke=\"#ddd\"/>"
                                "<text x=\"%g\" y=\"%.1f\" text-anchor=\"end\">%s</text>\n",
                            left, y, width - right, y, left - 6, y + 4, y_label(e));
    }
    absl::StrAppendFormat(&s, "<text x=\"%g\" y=\"%g\" text-anchor=\"middle\">kernels per step (N)</text>\n",
                          (left + width - right) / 2, height - 12);
  }

  // One series: points labelled with their cost, a line through them
  // (dashed when replayed) and a legend entry.
  void series(std::string& s, const std::vector<const Row*>& pts, bool eager, const char* color, int slot,
              const std::string& label) const {
    const char* dash = eager ? "" : " stroke-dasharray=\"6,4\"";
    std::string line;
    for (const Row* r : pts) {
      const double cost = eager ? r->eager_cost() : r->replay_cost();
      const double x = px(static_cast<double>(r->kernels)), y = py(cost);
      absl::StrAppendFormat(&line, "%.1f,%.1f ", x, y);
      absl::StrAppendFormat(&s, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"3\" fill=\"%s\"><title>%s, N=%d: %.1f ns per "
                                "kernel</title></circle>\n",
                            x, y, color, label, r->kernels, cost);
      // Eager labels above their point, replayed ones below, so a pair at one N stays apart.
      absl::StrAppendFormat(&s,
                            "<text x=\"%.1f\" y=\"%.1f\" font-size=\"%g\" text-anchor=\"middle\" fill=\"%s\">"
                            "%.3g</text>\n",
                            x, eager ? y - 6 : y + 6 + kPointFont, kPointFont, color, cost);
    }
    absl::StrAppendFormat(&s, "<polyline points=\"%s\" fill=\"none\" stroke=\"%s\" stroke-width=\"2\"%s/>\n", line,
                          color, dash);
    const double ly = kT + 20 + kLegendRow * slot;
    absl::StrAppendFormat(&s, "<line x1=\"%g\" y1=\"%g\" x2=\"%g\" y2=\"%g\" stroke=\"%s\" stroke-width=\"2\"%s/>"
                              "<text x=\"%g\" y=\"%g\">%s</text>\n",
                          width - right + 10, ly, width - right + 10 + kSwatch, ly, color, dash,
                          width - right + 16 + kSwatch, ly + 4, label);
  }
};

LogLogPlot plot_for(const std::vector<Row>& rows) {
  double xmin = 1e300, xmax = 1, ymin = 1e300, ymax = 1;
  for (const Row& r : rows) {
    xmin = std::min<double>(xmin, r.kernels), xmax = std::max<double>(xmax, r.kernels);
    for (double y : {r.eager_cost(), r.replay_cost()}) ymin = std::min(ymin, y), ymax = std::max(ymax, y);
  }
  const double lx0 = std::floor(std::log10(std::max(xmin, 1.0))), ly0 = std::floor(std::log10(std::max(ymin, 0.1)));
  return {lx0, std::max(lx0 + 1, std::ceil(std::log10(xmax))), ly0, std::max(ly0 + 1, std::ceil(std::log10(ymax)))};
}

std::string render_svg(const std::vector<Row>& rows, const std::string& title) {
  std::vector<std::pair<std::string, std::string>> series;   // (device, variant), in row order
  for (const Row& r : rows) {
    std::pair<std::string, std::string> key{r.device.str(), r.variant};
    if (std::find(series.begin(), series.end(), key) == series.end()) series.push_back(key);
  }
  std::vector<std::string> legend;   // two entries per series: eager, then replayed
  for (const auto& [device, variant] : series) {
    for (const char* how : {" eager", " replayed"}) legend.push_back(absl::StrCat(device, " ", variant, how));
  }
  LogLogPlot plot = plot_for(rows);
  plot.fit(title, legend);
  std::string s = absl::StrFormat(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%g\" height=\"%g\" viewBox=\"0 0 %g %g\" "
      "font-family=\"sans-serif\" font-size=\"%g\">\n<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n"
      "<text x=\"%g\" y=\"22\" font-size=\"%g\">%s</text>\n",
      plot.width, plot.height, plot.width, plot.height, LogLogPlot::kFont, LogLogPlot::kPad, LogLogPlot::kTitleFont,
      title);
  plot.axes(s);
  const char* colors[] = {"#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b"};
  int slot = 0;
  for (const auto& [device, variant] : series) {
    std::vector<const Row*> pts;
    for (const Row& r : rows) {
      if (r.device.str() == device && r.variant == variant) pts.push_back(&r);
    }
    const char* color = colors[(slot / 2) % 6];
    for (bool eager : {true, false}) {
      plot.series(s, pts, eager, color, slot, legend[slot]);
      ++slot;
    }
  }
  s += "</svg>\n";
  return s;
}

nlohmann::json results_json(const std::vector<Row>& rows, const std::string& machine, bool cuda_measured,
                            const std::string& update_line) {
  nlohmann::json results = nlohmann::json::array();
  for (const Row& r : rows) {
    results.push_back({{"variant", r.variant}, {"backend", r.device.str()}, {"n", r.n}, {"kernels", r.kernels},
                       {"eager_ns_per_kernel", to_json(r.eager_ns)}, {"capture_ms", to_json(r.capture_ms)},
                       {"replay_ns_per_kernel", to_json(r.replay_ns)},
                       {"eager_cpu_ns_per_kernel", to_json(r.eager_cpu_ns)},
                       {"replay_cpu_ns_per_kernel", to_json(r.replay_cpu_ns)}, {"plan_ms", r.plan_ms},
                       {"capture_run_ms", r.capture_run_ms},
                       {"instantiate_ms", to_json(r.instantiate_ms)},
                       {"update_ms", r.updates_refused < absl::GetFlag(FLAGS_capture_reps) ? to_json(r.update_ms)
                                                                                            : nlohmann::json()},
                       {"graph_update_ns", r.graph_update_ns >= 0 ? nlohmann::json(r.graph_update_ns) : nullptr}});
  }
  const int64_t update = graph_update_median(rows);
  return {{"machine", {{"cpu", machine}, {"hardware_threads", std::thread::hardware_concurrency()},
                       {"gpu", encore::cuda_available() ? "present" : "none"}}},
          {"elements", absl::GetFlag(FLAGS_elements)}, {"reps", absl::GetFlag(FLAGS_reps)},
          {"capture_reps", absl::GetFlag(FLAGS_capture_reps)},
          {"cuda", {{"status", cuda_line(cuda_measured)}, {"graph_update_ns", update >= 0 ? nlohmann::json(update) : nullptr},
                    {"graph_update", update_line}}},
          {"results", results}};
}

// Measures CudaGraph::update_pointer_ns on a CUDA chain's graph: its first
// kernel retargeted from x to x2 and back. Failures go to `why` (the row stays).
AfterCapture graph_update(const Tensor& x, const Tensor& x2, std::string& why) {
  return [&x, &x2, &why](encore::Graph& graph, Row& row) {
    const encore::capture_internal::CudaGraph* cuda = graph.internals().cuda_graph();
    if (cuda == nullptr) return;
    absl::StatusOr<int64_t> ns = cuda->update_pointer_ns(x.data_ptr(), x2.data_ptr(), absl::GetFlag(FLAGS_reps));
    if (ns.ok()) {
      row.graph_update_ns = *ns;
    } else if (why.empty()) {
      why = std::string(ns.status().message());
    }
  };
}

// Every chosen variant on `device`, appended to rows (and printed).
absl::Status measure_device(encore::Device device, const std::vector<int64_t>& counts, std::vector<Row>& rows,
                            std::string& update_why, encore::Progress& progress, int64_t& points) {
  auto add = [&](absl::StatusOr<Row> row) -> absl::Status {
    if (!row.ok()) return row.status();
    print_row(*row);
    std::fflush(stdout);
    rows.push_back(*std::move(row));
    progress.update(++points, 1);
    return absl::OkStatus();
  };
  const Tensor x = encore::randn({absl::GetFlag(FLAGS_elements)}).to(device);
  const Tensor x2 = encore::randn({absl::GetFlag(FLAGS_elements)}).to(device);   // the chain's other input
  for (const std::string variant : {"chain", "wide"}) {
    if (!wants(variant)) continue;
    const bool chain = variant == std::string("chain");
    for (int64_t n : counts) {
      const Step step = chain ? chain_step(x, n) : wide_step(x, n);
      const AfterCapture after = chain && device.is_cuda() ? graph_update(x, x2, update_why) : nullptr;
      if (absl::Status s = add(measure(device, variant, n, step, after)); !s.ok()) return s;
    }
  }
  if (!wants("mlp")) return absl::OkStatus();
  std::unique_ptr<encore::tools::Workload> w =
      encore::tools::make_mlp({.widths = {32, 64, 10}, .batch = 32, .device = device});
  absl::StatusOr<Row> row = measure(device, "mlp", 0, [&w] { return w->step(); });
  if (row.ok()) row->n = row->kernels;
  return add(std::move(row));
}

// One line on the CUDA graph update cost: each chain row's, or why none.
std::string update_summary(const std::vector<Row>& rows, bool cuda_measured, const std::string& why) {
  std::string line = "cuda graph update (one pointer changed, cudaGraphExecKernelNodeSetParams): ";
  if (!cuda_measured) return line + (encore::cuda_available() ? "not measured: CUDA not requested" : "not measured: no GPU");
  if (graph_update_median(rows) < 0) return absl::StrCat(line, "not measured: ", why.empty() ? "no chain rows" : why);
  std::vector<std::string> parts;
  for (const Row& r : rows) {
    if (r.graph_update_ns >= 0) parts.push_back(absl::StrFormat("N=%d %d ns", r.n, r.graph_update_ns));
  }
  return absl::StrCat(line, "median ", graph_update_median(rows), " ns (", absl::StrJoin(parts, ", "), ")");
}

// Instantiate against update, one line a row.
void print_instantiate_table(const std::vector<Row>& rows) {
  absl::PrintF("\nexecutable made at capture vs updated at a capture into another arena (ms, median [min, max] "
               "of --capture_reps)\n%-6s %-6s %6s %6s  %-30s  %-30s  %s\n",
               "device", "var", "N", "nodes", "instantiate", "update", "instantiate/update");
  for (const Row& r : rows) {
    absl::PrintF("%-6s %-6s %6d %6d  %9.4f [%8.4f, %8.4f]  ", r.device.str(), r.variant, r.n, r.kernels,
                 r.instantiate_ms.median, r.instantiate_ms.min, r.instantiate_ms.max);
    if (r.updates_refused == absl::GetFlag(FLAGS_capture_reps)) {
      absl::PrintF("%-30s  -\n", r.device.is_cpu() ? "- (CPU: always made anew)" : "refused: instantiated anew");
      continue;
    }
    absl::PrintF("%9.4f [%8.4f, %8.4f]  %6.1fx%s\n", r.update_ms.median, r.update_ms.min, r.update_ms.max,
                 r.instantiate_ms.median / std::max(r.update_ms.median, 1e-9),
                 r.updates_refused > 0 ? absl::StrFormat(" (%d refused)", r.updates_refused) : "");
  }
}

absl::Status run(const std::vector<int64_t>& counts, const std::vector<encore::Device>& devices) {
  const std::string machine = cpu_model();
  absl::PrintF("machine: %s, %d hardware threads; GPU: %s\n", machine, std::thread::hardware_concurrency(),
               encore::cuda_available() ? "present" : "none");
  absl::PrintF("%-6s %-6s %6s %6s  %-32s  %-30s  %-29s  %s\n", "device", "var", "N", "nodes",
               "eager ns/kernel [min, max] cpu", "capture ms [min, max]", "replay ns/kernel [min,max] cpu",
               "eager/replay");
  std::vector<Row> rows;
  bool cuda_measured = false;
  std::string update_why;   // why the CUDA graph update was not measured
  absl::Status failed;   // the first backend that failed; later backends and the files still go ahead
  // Points to measure: each count of chain and wide, and one mlp row, per device. On a terminal
  // stderr shows how far the sweep is (redrawn in place); into a pipe one line at the end.
  const int64_t per_device = static_cast<int64_t>(counts.size()) * (wants("chain") + wants("wide")) + wants("mlp");
  const int64_t total = per_device * static_cast<int64_t>(devices.size());
  encore::Progress progress(
      {.total = total, .every = std::max<int64_t>(1, total), .unit = "points", .label = "encore-launch", .out = stderr});
  int64_t points = 0;
  for (encore::Device device : devices) {
    absl::Status ran;
    const absl::Status thrown =
        encore::status_of([&] { ran = measure_device(device, counts, rows, update_why, progress, points); });
    const absl::Status& s = thrown.ok() ? ran : thrown;
    if (!s.ok()) {
      failed.Update(absl::Status(s.code(), absl::StrCat(device.str(), ": ", s.message())));
      continue;
    }
    cuda_measured = cuda_measured || device.is_cuda();
  }
  const std::string update_line = update_summary(rows, cuda_measured, update_why);
  absl::PrintF("%s\n%s\n", cuda_line(cuda_measured), update_line);
  print_instantiate_table(rows);
  if (const std::string path = absl::GetFlag(FLAGS_json); !path.empty()) {
    const std::string json = results_json(rows, machine, cuda_measured, update_line).dump(1) + "\n";
    if (absl::Status s = encore::write_file_atomically("--json", path, json, kOutput); !s.ok()) return s;
  }
  if (const std::string path = absl::GetFlag(FLAGS_svg); !path.empty()) {
    const std::string title = absl::StrCat("encore-launch: ns per kernel (median; CPU backend: thread CPU time, ",
                                           "CUDA: wall), eager vs replayed (", machine, ")");
    if (absl::Status s = encore::write_file_atomically("--svg", path, render_svg(rows, title), kOutput); !s.ok()) {
      return s;
    }
  }
  if (failed.ok() && cuda_requested() && !cuda_measured) {
    return absl::FailedPreconditionError(
        "--backends=cuda asked for CUDA figures, but this build or machine has no usable GPU: none measured");
  }
  return failed;
}

}  // namespace

int main(int argc, char** argv) {
  encore::tools::set_usage(
      "encore-launch", "encore_launch.cpp",
      "The launch-overhead lab: N tiny kernels eager vs captured and replayed; eager cost per kernel,\n"
      "capture cost and replay cost per kernel as N grows (CPU; CUDA when built and captured).\n"
      "Usage: encore-launch [--n=1,10,100,1000,10000] [--variants=chain,wide,mlp] [--json=FILE] [--svg=FILE]");
  std::vector<char*> args = encore::tools::parse_flags(argc, argv, "encore-launch");
  if (args.size() != 1) {
    std::fprintf(stderr, "encore-launch: unexpected argument '%s' (see --help)\n", args[1]);
    return 2;
  }
  absl::StatusOr<std::vector<int64_t>> counts = parse_counts();
  absl::Status flags = counts.ok() ? check_flags(*counts) : counts.status();
  if (!flags.ok()) return encore::tools::flag_error("encore-launch", flags);
  absl::Status ran;
  absl::Status thrown = encore::status_of([&] { ran = run(*counts, *chosen_devices()); });
  const absl::Status& status = thrown.ok() ? ran : thrown;
  if (!status.ok()) {
    std::fprintf(stderr, "encore-launch: %s\n", std::string(status.message()).c_str());
    return 1;
  }
  return 0;
}
