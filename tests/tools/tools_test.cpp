// encore-prof and encore-launch, run as a user would: exit status, messages,
// --help, the Chrome trace, the DOT graph, the launch lab's JSON and SVG.
// The tools find the GPU themselves; tests that need one ask the tool
// (--device=cuda) and skip when it has none, or fail with ENCORE_REQUIRE_GPU=1.
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <regex>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/gpu_required.h"
#include "tests/svg_test_util.h"
#include "tests/tool_run.h"

namespace encore {
namespace {

using ::testing::HasSubstr;

using testing::gpu_required;
using testing::slurp;
using testing::ToolRun;

std::string temp_path(const std::string& name) { return testing::temp_path("encore_tools_", name); }

// The built tools: their paths in the build folder, or $ENCORE_PROF_BIN /
// $ENCORE_LAUNCH_BIN (a build folder moved to another machine, bench/gpu-check).
ToolRun prof(const std::string& args) {
  return testing::run_tool(testing::tool_path("ENCORE_PROF_BIN", ENCORE_PROF_PATH), args, "encore_tools_");
}
ToolRun launch(const std::string& args) {
  return testing::run_tool(testing::tool_path("ENCORE_LAUNCH_BIN", ENCORE_LAUNCH_PATH), args, "encore_tools_");
}

void expect_flag_error(const ToolRun& run, const std::string& what) {
  EXPECT_EQ(run.exit_code, 2) << run.out << run.err;
  EXPECT_THAT(run.err, HasSubstr(what));
  EXPECT_EQ(run.err.find('\n'), run.err.size() - 1) << "not one line: " << run.err;
}

TEST(EncoreProfTest, ProfilesTheMlpAndWritesTraceAndDot) {
  const std::string trace = temp_path("mlp_trace.json"), dot = temp_path("mlp.dot");
  std::remove(trace.c_str());
  std::remove(dot.c_str());
  const ToolRun run = prof("--device=cpu --model=mlp --hidden=16 --batch=8 --runs=2 --warmup_runs=1 --trace=" + trace +
                           " --dot=" + dot);
  ASSERT_EQ(run.exit_code, 0) << run.err;
  EXPECT_THAT(run.out, HasSubstr("eager (cpu)"));
  EXPECT_THAT(run.out, HasSubstr("replay (cpu)"));
  EXPECT_THAT(run.out, HasSubstr("optimizer"));
  EXPECT_THAT(run.out, HasSubstr("gemm"));
  EXPECT_THAT(run.out, HasSubstr("cuda:"));
  const nlohmann::json t = nlohmann::json::parse(slurp(trace));   // throws (fails the test) if invalid
  int x_events = 0, counters = 0;
  for (const nlohmann::json& e : t.at("traceEvents")) {
    x_events += e.at("ph") == "X";
    counters += e.at("ph") == "C";
  }
  EXPECT_GT(x_events, 20);
  EXPECT_GT(counters, 10);
  EXPECT_EQ(t.at("otherData").at("encore").size(), 2u);   // eager and replay
  EXPECT_THAT(slurp(dot), HasSubstr("digraph encore"));
  EXPECT_THAT(slurp(dot), HasSubstr(": gemm"));
}

TEST(EncoreProfTest, ProfilesTheGpt) {
  const ToolRun run = prof("--device=cpu --model=gpt --n_layer=1 --n_embd=16 --n_head=2 --seq=8 --vocab=11 --batch=2 "
                           "--runs=1 --warmup_runs=0 --eager=false --top=3");
  ASSERT_EQ(run.exit_code, 0) << run.err;
  EXPECT_THAT(run.out, HasSubstr("replay (cpu)"));
  EXPECT_THAT(run.out, HasSubstr("top 3 ops"));
  EXPECT_THAT(run.out, ::testing::Not(HasSubstr("eager (cpu)")));
}

TEST(EncoreProfTest, ProfilesTheCnn) {
  const ToolRun run = prof("--device=cpu --model=cnn --blocks=1 --channels=4 --batch=2 --runs=1 --warmup_runs=0 --top=40");
  ASSERT_EQ(run.exit_code, 0) << run.err;
  EXPECT_THAT(run.out, HasSubstr("replay (cpu)"));
  EXPECT_THAT(run.out, HasSubstr("conv2d"));
  EXPECT_THAT(run.out, HasSubstr("batch_norm"));
}

// The transformer block of bench/peers: GELU, non-causal softmax (no
// masked_fill), loss mean(out^2).
TEST(EncoreProfTest, ProfilesTheTransformerBlock) {
  const ToolRun run = prof("--device=cpu --model=block --batch=2 --seq=8 --n_embd=16 --n_head=2 --runs=1 "
                           "--warmup_runs=0 --top=40");
  ASSERT_EQ(run.exit_code, 0) << run.err;
  EXPECT_THAT(run.out, HasSubstr("replay (cpu)"));
  EXPECT_THAT(run.out, HasSubstr("gelu_backward"));
  EXPECT_THAT(run.out, HasSubstr("pow_backward"));
  EXPECT_THAT(run.out, ::testing::Not(HasSubstr("masked_fill")));
}

// Graph::frozen(), grouped: AdamW's constants and dropout's p are host values baked into kernels.
TEST(EncoreProfTest, ListsTheHostValuesTheGraphFroze) {
  const std::string flags = "--device=cpu --model=gpt --n_layer=1 --n_embd=16 --n_head=2 --seq=8 --vocab=11 "
                            "--batch=2 --dropout=0.25 --runs=1 --warmup_runs=0 --eager=false";
  const ToolRun run = prof(flags);
  ASSERT_EQ(run.exit_code, 0) << run.err;
  EXPECT_THAT(run.out, HasSubstr("frozen host values: "));
  // The kernels that hold one, of all the graph's (it said every kernel held one).
  EXPECT_THAT(run.out, ::testing::ContainsRegex("frozen host values: [0-9]+ in the arguments of [0-9]+ of the "
                                                "graph's [0-9]+ kernels"));
  EXPECT_THAT(run.out, ::testing::ContainsRegex("forward +dropout +p +0.25 "));
  EXPECT_THAT(run.out, ::testing::ContainsRegex("optimizer +adamw +beta1 +0.899999976 +1 "));
  const ToolRun quiet = prof(flags + " --frozen=false");
  ASSERT_EQ(quiet.exit_code, 0) << quiet.err;
  EXPECT_THAT(quiet.out, ::testing::Not(HasSubstr("frozen host values")));
}

TEST(EncoreProfTest, ProfilesOnCudaWhenAGpuAnswers) {
  const std::string trace = temp_path("cuda_trace.json");
  std::remove(trace.c_str());
  const ToolRun run = prof("--device=cuda --model=gpt --n_layer=1 --n_embd=16 --n_head=2 --seq=8 --vocab=11 "
                           "--batch=2 --runs=2 --warmup_runs=1 --trace=" + trace);
  if (run.exit_code == 2 && run.err.find("no usable GPU") != std::string::npos) {
    if (gpu_required()) FAIL() << "ENCORE_REQUIRE_GPU=1 but encore-prof found no GPU: " << run.err;
    GTEST_SKIP() << "no usable GPU";
  }
  ASSERT_EQ(run.exit_code, 0) << run.out << run.err;
  EXPECT_THAT(run.out, HasSubstr("eager (cuda:0)"));
  EXPECT_THAT(run.out, HasSubstr("replay (cuda:0)"));
  EXPECT_THAT(run.out, HasSubstr("optimizer"));
  const nlohmann::json t = nlohmann::json::parse(slurp(trace));
  const nlohmann::json& summaries = t.at("otherData").at("encore");
  ASSERT_EQ(summaries.size(), 2u);
  EXPECT_EQ(summaries[1].at("device"), "cuda:0");
  // CUPTI gave per-node times (a note may still add a caveat, e.g. nodes
  // matched to records by order); otherwise the note says why not.
  if (summaries[1].at("gpu_idle_ns").get<int64_t>() >= 0) {
    EXPECT_THAT(run.out, HasSubstr("gpu idle"));
    EXPECT_GE(summaries[1].at("gpu_idle_ns").get<int64_t>(), 0);
    int replay_events = 0;
    for (const nlohmann::json& e : t.at("traceEvents")) replay_events += e.at("ph") == "X" && e.at("pid") == 2;
    EXPECT_GT(replay_events, 20);
  } else {
    EXPECT_THAT(run.out, HasSubstr("note: "));
  }
}

TEST(EncoreProfTest, FlagErrors) {
  expect_flag_error(prof("--model=resnet"), "--model must be mlp, gpt, cnn or block, got 'resnet'");
  expect_flag_error(prof("--device=tpu"), "--device must be cpu, cuda or auto, got 'tpu'");
  expect_flag_error(prof("--runs=0"), "--runs must be in 1..100000, got 0");
  expect_flag_error(prof("--model=mlp --hidden=0"), "--hidden must be in 1..65536, got 0");
  expect_flag_error(prof("stray"), "unexpected argument 'stray'");
  // Unknown flags and --no forms that do not apply: exit 2 like any bad flag, not Abseil's exit 1.
  expect_flag_error(prof("--modle=gpt"), "encore-prof: unknown flag '--modle' (see --help)");
  expect_flag_error(prof("--noruns"), "--noruns: only a true/false flag has a --no form (--runs takes a value)");
  expect_flag_error(prof("--noeager=true"), "--noeager takes no value (write --eager=false)");
  // A config the model refuses (width not divisible by heads) is a flag error with the model's message.
  expect_flag_error(prof("--model=gpt --n_embd=10 --n_head=4"), "n_head");
  expect_flag_error(prof("--model=block --n_embd=10 --n_head=4"), "--n_embd (10) must divide by --n_head (4)");
  expect_flag_error(prof("--model=block --seq=-1"), "--seq must be in 0..4096");
  expect_flag_error(prof("--model=block --seq=4096 --n_head=64 --batch=16"), "batch x n_head x seq x seq (attention)");
  // Values the library refuses while building the model: a message and exit 2, never an abort (issue #17).
  expect_flag_error(prof("--model=mlp --lr=nan"), "lr must be finite");
}

// Every flag that sizes something, with values that do not parse, are
// negative, nan, inf or huge: one line and exit 2, never an abort or an
// allocation that exhausts memory (issue #17).
TEST(EncoreProfTest, SizeFlagsRefuseHostileValues) {
  expect_flag_error(prof("--hidden=abc"), "--hidden: cannot parse 'abc' as a 64-bit integer");
  expect_flag_error(prof("--batch=1e3"), "--batch: cannot parse '1e3' as a 64-bit integer");
  expect_flag_error(prof("--runs=99999999999"), "--runs: cannot parse '99999999999' as a 32-bit integer");
  expect_flag_error(prof("--seed=-1"), "--seed: cannot parse '-1' as an unsigned 64-bit integer");
  expect_flag_error(prof("--eager=maybe"), "--eager: cannot parse 'maybe' as true or false");
  expect_flag_error(prof("--lr=fast"), "--lr: cannot parse 'fast' as a number");
  expect_flag_error(prof("--batch=-1"), "--batch must be in 0..65536, got -1");
  expect_flag_error(prof("--model=mlp --hidden=4611686018427387904"), "--hidden must be in 1..65536");
  expect_flag_error(prof("--warmup_runs=-1"), "--warmup_runs must be in 0..100000, got -1");
  expect_flag_error(prof("--top=-1"), "--top must be in 0..10000, got -1");
  for (const char* flag : {"--n_layer", "--n_head", "--vocab"}) {
    expect_flag_error(prof(std::string("--model=gpt ") + flag + "=0"), std::string(flag) + " must be in 1..");
    expect_flag_error(prof(std::string("--model=gpt ") + flag + "=9223372036854775807"),
                      std::string(flag) + " must be in 1..");
  }
  for (const char* flag : {"--seq", "--n_embd"}) {   // 0: the model's default
    expect_flag_error(prof(std::string("--model=gpt ") + flag + "=-1"), std::string(flag) + " must be in 0..");
    expect_flag_error(prof(std::string("--model=gpt ") + flag + "=9223372036854775807"),
                      std::string(flag) + " must be in 0..");
  }
  expect_flag_error(prof("--model=gpt --seq=4096 --batch=65536"), "batch x seq x vocab (logits) = 17448304640");
  expect_flag_error(prof("--model=gpt --seq=4096 --n_head=64 --batch=16"), "batch x n_head x seq x seq (attention)");
  expect_flag_error(prof("--model=gpt --n_embd=16384 --n_layer=2"), "12 n_layer x n_embd^2 (parameters)");
  expect_flag_error(prof("--model=mlp --hidden=65536 --batch=65536"), "batch x hidden = 4294967296");
  expect_flag_error(prof("--model=cnn --channels=4096 --batch=65536"), "batch x channels x 32 x 32 (activations)");
  expect_flag_error(prof("--model=cnn --blocks=257"), "--blocks must be in 0..256, got 257");
  expect_flag_error(prof("--model=cnn --channels=0"), "--channels must be in 1..4096, got 0");
  for (const char* p : {"nan", "inf", "-0.5", "1"}) {
    expect_flag_error(prof(std::string("--model=gpt --dropout=") + p), "--dropout must be in [0, 1)");
  }
  expect_flag_error(prof("--lr=inf"), "lr must be finite");
}

// Values given as the next argument ("--runs abc") are checked as
// "--runs=abc" is: one line and exit 2, never Abseil's exit 1; so is a
// value missing at the end.
TEST(EncoreProfTest, FlagValuesInTheNextArgumentAreCheckedToo) {
  expect_flag_error(prof("--runs abc"), "--runs: cannot parse 'abc' as a 32-bit integer");
  expect_flag_error(prof("--lr fast"), "--lr: cannot parse 'fast' as a number");
  expect_flag_error(prof("--seed -1"), "--seed: cannot parse '-1' as an unsigned 64-bit integer");
  expect_flag_error(prof("--model=mlp --runs"), "--runs: missing value");
  expect_flag_error(prof("--model=mlp --hidden 0"), "--hidden must be in 1..65536, got 0");
  expect_flag_error(launch("--elements abc"), "--elements: cannot parse 'abc' as a 64-bit integer");
  expect_flag_error(launch("--min_rep_ms soon"), "--min_rep_ms: cannot parse 'soon' as a number");
  // A bool does not take the next argument: "maybe" is an argument the tool refuses.
  expect_flag_error(prof("--eager maybe"), "unexpected argument 'maybe'");
}

// A trace or graph that cannot be written (a full disk, a missing
// directory): exit 1 with the cause, after profiling (issue #17).
TEST(EncoreProfTest, WriteFailuresAreReported) {
  const std::string small = "--device=cpu --model=mlp --hidden=8 --batch=4 --runs=1 --warmup_runs=0 ";
  if (std::ifstream("/dev/full").good()) {
    ToolRun run = prof(small + "--trace=/dev/full");
    EXPECT_EQ(run.exit_code, 1) << run.err;
    EXPECT_THAT(run.err, HasSubstr("write_chrome_trace: cannot write /dev/full: No space left on device"));
    run = prof(small + "--dot=/dev/full");
    EXPECT_EQ(run.exit_code, 1) << run.err;
    EXPECT_THAT(run.err, HasSubstr("dump_dot: cannot write /dev/full: No space left on device"));
  }
  ToolRun run = prof(small + "--trace=/nonexistent/dir/t.json");
  EXPECT_EQ(run.exit_code, 1) << run.err;
  EXPECT_THAT(run.err, HasSubstr("write_chrome_trace: cannot write /nonexistent/dir/t.json: cannot create"));
  EXPECT_THAT(run.err, HasSubstr("No such file or directory"));
  run = prof(small + "--dot=/nonexistent/dir/g.dot");
  EXPECT_EQ(run.exit_code, 1) << run.err;
  EXPECT_THAT(run.err, HasSubstr("dump_dot: cannot write /nonexistent/dir/g.dot: cannot create"));
  EXPECT_THAT(run.err, HasSubstr("No such file or directory"));
}

// An output whose write fails part way (a file size limit of 1 KiB, as a
// full disk; each output is larger) leaves the previous file as it was, not
// half of one, and no temporary beside it (src/core/atomic_file.h).
TEST(EncoreToolsTest, AFailedWriteKeepsThePreviousFile) {
  namespace fs = std::filesystem;
  const std::string prof_bin = testing::tool_path("ENCORE_PROF_BIN", ENCORE_PROF_PATH);
  const std::string launch_bin = testing::tool_path("ENCORE_LAUNCH_BIN", ENCORE_LAUNCH_PATH);
  const std::string prof_args = "--device=cpu --model=mlp --hidden=8 --batch=4 --runs=1 --warmup_runs=0 --frozen=false ";
  const std::string launch_args = "--backends=cpu --n=1,10 --reps=1 --capture_reps=1 --min_rep_ms=0 ";
  struct Case {
    const std::string& bin;
    const std::string& args;
    const char* flag;
    const char* op;   // what the message starts with
  };
  for (const Case& c : {Case{prof_bin, prof_args, "--trace", "write_chrome_trace"},
                        Case{prof_bin, prof_args, "--dot", "dump_dot"},
                        Case{launch_bin, launch_args, "--json", "--json"},
                        Case{launch_bin, launch_args, "--svg", "--svg"}}) {
    const fs::path dir = temp_path("partial_output");
    fs::remove_all(dir);
    fs::create_directories(dir);
    const std::string out = (dir / "out").string();
    std::ofstream(out) << "previous\n";
    // The shell ignores SIGXFSZ so that the write fails with EFBIG instead of killing the tool.
    const ToolRun run = testing::run_tool("trap '' XFSZ; ulimit -f 1; " + c.bin,
                                          c.args + c.flag + "=" + out, "encore_tools_");
    EXPECT_EQ(run.exit_code, 1) << c.flag << run.out << run.err;
    EXPECT_THAT(run.err, HasSubstr(std::string(c.op) + ": cannot write " + out + ".tmp.")) << c.flag;
    EXPECT_THAT(run.err, HasSubstr("File too large")) << c.flag;
    EXPECT_EQ(slurp(out), "previous\n") << c.flag;
    std::vector<std::string> files;
    for (const fs::directory_entry& e : fs::directory_iterator(dir)) files.push_back(e.path().filename().string());
    EXPECT_EQ(files, std::vector<std::string>{"out"}) << c.flag;
    fs::remove_all(dir);
  }
  // Without the limit the same command replaces a trace with a whole one.
  const std::string trace = temp_path("whole_trace.json");
  std::ofstream(trace) << "previous\n";
  const ToolRun ok = prof(prof_args + "--trace=" + trace);
  ASSERT_EQ(ok.exit_code, 0) << ok.err;
  EXPECT_TRUE(nlohmann::json::parse(slurp(trace)).contains("traceEvents"));
  std::remove(trace.c_str());
}

// /dev/stdout into a pipe is written in place, as before outputs became
// atomic: there is no file to keep, and a rename would replace the node.
TEST(EncoreToolsTest, OutputsToDevStdoutGoDownThePipe) {
  const std::string small = "--device=cpu --model=mlp --hidden=8 --batch=4 --runs=1 --warmup_runs=0 --frozen=false ";
  const std::string launch_small = "--backends=cpu --n=1 --variants=chain --reps=1 --capture_reps=1 --min_rep_ms=0 ";
  // ( tool args; echo exit=$?; ) 2>&1 | cat: the tool's stdout is a pipe.
  auto piped = [](const std::string& bin, const std::string& args) {
    return testing::run_tool("( " + bin, args + "; echo exit=$?; ) 2>&1 | cat", "encore_tools_");
  };
  const std::string prof_bin = testing::tool_path("ENCORE_PROF_BIN", ENCORE_PROF_PATH);
  const std::string launch_bin = testing::tool_path("ENCORE_LAUNCH_BIN", ENCORE_LAUNCH_PATH);
  for (const auto& [run, expected] : {std::pair{piped(prof_bin, small + "--dot=/dev/stdout"), "digraph encore {"},
                                      std::pair{piped(prof_bin, small + "--trace=/dev/stdout"), "\"traceEvents\""},
                                      std::pair{piped(launch_bin, launch_small + "--svg=/dev/stdout"), "</svg>"}}) {
    EXPECT_THAT(run.out, HasSubstr("exit=0"));
    EXPECT_THAT(run.out, HasSubstr(expected));
  }
  // The text a tool prints comes whole, before the file: the summaries
  // were spliced around the trace (stdio's buffer flushed at exit).
  const ToolRun both = piped(prof_bin, small + "--trace=/dev/stdout --dot=/dev/stdout");
  const size_t summary = both.out.find("capture: "), json = both.out.find("{\n"), dot = both.out.find("digraph");
  ASSERT_NE(json, std::string::npos) << both.out;
  EXPECT_LT(summary, json) << both.out;
  EXPECT_LT(both.out.find("trace: /dev/stdout"), dot) << both.out;
  const size_t json_end = both.out.find("\ntrace: /dev/stdout");
  ASSERT_NE(json_end, std::string::npos) << both.out;
  EXPECT_TRUE(nlohmann::json::accept(both.out.substr(json, json_end - json))) << both.out;
}

TEST(EncoreProfTest, HelpDescribesEveryFlag) {
  const ToolRun run = prof("--help");
  // The usage line names every model --model accepts.
  EXPECT_THAT(run.out + run.err, HasSubstr("[--model=mlp|gpt|cnn|block]"));
  for (const char* flag : {"--device", "--model", "--batch", "--hidden", "--seq", "--n_layer", "--n_head", "--n_embd", "--vocab",
                           "--blocks", "--channels", "--dropout", "--lr", "--seed", "--runs", "--warmup_runs", "--eager", "--top", "--trace",
                           "--dot"}) {
    EXPECT_THAT(run.out + run.err, HasSubstr(std::string(flag) + " (")) << flag;
  }
}

TEST(EncoreLaunchTest, SmallRunWritesJsonAndSvg) {
  const std::string json = temp_path("launch.json"), svg = temp_path("launch.svg");
  const ToolRun run = launch("--n=1,10 --reps=3 --capture_reps=1 --min_rep_ms=0.05 --json=" + json + " --svg=" + svg);
  ASSERT_EQ(run.exit_code, 0) << run.err;
  EXPECT_THAT(run.out, HasSubstr("machine:"));
  EXPECT_THAT(run.out, HasSubstr("cuda"));
  const nlohmann::json j = nlohmann::json::parse(slurp(json));
  EXPECT_FALSE(j.at("machine").at("cpu").get<std::string>().empty());
  EXPECT_THAT(j.at("cuda").at("status").get<std::string>(), HasSubstr("cuda"));
  const nlohmann::json& results = j.at("results");
  const bool gpu = j.at("machine").at("gpu") == "present";   // --backends=auto measures it too
  if (gpu_required()) {
    EXPECT_TRUE(gpu) << "ENCORE_REQUIRE_GPU=1 but encore-launch found no GPU";
  }
  ASSERT_EQ(results.size(), gpu ? 10u : 5u);   // per backend: chain 1, 10; wide 1, 10; mlp
  for (const nlohmann::json& r : results) {
    const std::string variant = r.at("variant");
    const bool cuda_chain = variant == "chain" && r.at("backend") == "cuda:0";
    EXPECT_EQ(r.at("graph_update_ns").is_null(), !cuda_chain) << variant << " " << r.at("backend");
    if (variant != "mlp") {
      EXPECT_EQ(r.at("kernels"), r.at("n")) << variant << " " << r.at("n");
    }
    EXPECT_GT(r.at("kernels").get<int64_t>(), 0);
    for (const char* key : {"eager_ns_per_kernel", "capture_ms", "replay_ns_per_kernel"}) {
      const nlohmann::json& s = r.at(key);
      EXPECT_GT(s.at("median").get<double>(), 0.0) << variant << " " << key;
      EXPECT_LE(s.at("min").get<double>(), s.at("median").get<double>());
      EXPECT_LE(s.at("median").get<double>(), s.at("max").get<double>());
    }
  }
  const std::string picture = slurp(svg);
  EXPECT_THAT(picture, HasSubstr("<svg"));
  EXPECT_THAT(picture, HasSubstr("</svg>"));
  // Nothing clipped: the long title, tick and legend texts all fit the view.
  EXPECT_THAT(encore::testing::svg_text_outside_view(picture), ::testing::IsEmpty());
  // A legend entry for every plotted series, and a label at every point.
  std::string texts;
  std::string error;
  for (const encore::testing::SvgText& t : encore::testing::svg_texts(picture, &error)) texts += t.text + "\n";
  ASSERT_EQ(error, "");
  for (const nlohmann::json& r : results) {
    for (const char* how : {"eager", "replayed"}) {
      const std::string entry =
          r.at("backend").get<std::string>() + " " + r.at("variant").get<std::string>() + " " + how;
      EXPECT_THAT(texts, HasSubstr(entry + "\n")) << texts;
    }
  }
  const std::regex circle(R"re(<circle cx="([\d.]+)" cy="([\d.]+)")re");
  int points = 0;
  for (auto it = std::sregex_iterator(picture.begin(), picture.end(), circle); it != std::sregex_iterator(); ++it) {
    ++points;
    const std::regex label("<text x=\"" + (*it)[1].str() + "\" y=\"[0-9.]+\" font-size=\"10\"");
    EXPECT_TRUE(std::regex_search(picture, label)) << "point at x " << (*it)[1] << " has no label";
  }
  EXPECT_EQ(points, 2 * static_cast<int>(results.size()));   // each result eager and replayed
}

// --backends=cuda: without a GPU, nothing measured, said so, the JSON still
// written, exit 1 (CUDA figures were asked for); with one, only CUDA rows,
// and the graph update cost of the chain.
TEST(EncoreLaunchTest, CudaBackendAlone) {
  const std::string json = temp_path("launch_cuda.json");
  const ToolRun run = launch("--backends=cuda --n=1,10 --reps=3 --capture_reps=1 --min_rep_ms=0 --json=" + json);
  const nlohmann::json j = nlohmann::json::parse(slurp(json));
  const nlohmann::json& cuda = j.at("cuda");
  if (j.at("machine").at("gpu") == "none") {
    if (gpu_required()) FAIL() << "ENCORE_REQUIRE_GPU=1 but encore-launch found no GPU";
    EXPECT_EQ(run.exit_code, 1) << run.out;
    EXPECT_THAT(run.err, HasSubstr("--backends=cuda asked for CUDA figures"));
    EXPECT_THAT(cuda.at("status").get<std::string>(), HasSubstr("not measured"));
    EXPECT_THAT(cuda.at("status").get<std::string>(), HasSubstr("--backends=cuda asked for it"));
    EXPECT_THAT(run.out, HasSubstr("cuda graph update (one pointer changed, cudaGraphExecKernelNodeSetParams): "
                                   "not measured: no GPU"));
    EXPECT_TRUE(j.at("results").empty());
    EXPECT_TRUE(cuda.at("graph_update_ns").is_null());
    return;
  }
  ASSERT_EQ(run.exit_code, 0) << run.err;
  EXPECT_THAT(cuda.at("status").get<std::string>(), HasSubstr("cuda: measured"));
  ASSERT_EQ(j.at("results").size(), 5u);
  for (const nlohmann::json& r : j.at("results")) EXPECT_EQ(r.at("backend"), "cuda:0");
  ASSERT_FALSE(cuda.at("graph_update_ns").is_null()) << cuda.at("graph_update");
  EXPECT_GT(cuda.at("graph_update_ns").get<int64_t>(), 0);
  EXPECT_THAT(run.out, HasSubstr("cuda graph update (one pointer changed, cudaGraphExecKernelNodeSetParams): median"));
}

TEST(EncoreLaunchTest, FlagErrors) {
  expect_flag_error(launch("--n=1,abc"), "--n: 'abc' is not a kernel count");
  expect_flag_error(launch("--n=0"), "--n: '0' is not a kernel count");
  expect_flag_error(launch("--variants=chain,deep"), "unknown variant 'deep'");
  expect_flag_error(launch("--reps=0"), "--reps must be in 1..10000, got 0");
  expect_flag_error(launch("--backends=cpu,tpu"), "unknown backend 'tpu'");
  // An empty list measured nothing and exited 0.
  expect_flag_error(launch("--variants="), "--variants: give at least one variant");
  expect_flag_error(launch("--backends="), "--backends: give at least one backend");
  expect_flag_error(launch("--rep=3"), "encore-launch: unknown flag '--rep' (see --help)");
}

// Hostile values of the flags that size something (issue #17): one line,
// exit 2, nothing allocated.
TEST(EncoreLaunchTest, SizeFlagsRefuseHostileValues) {
  expect_flag_error(launch("--elements=abc"), "--elements: cannot parse 'abc' as a 64-bit integer");
  expect_flag_error(launch("--elements=99999999999999999999"), "--elements: cannot parse");
  expect_flag_error(launch("--elements=0"), "--elements must be in 1..16777216, got 0");
  expect_flag_error(launch("--elements=-5"), "--elements must be in 1..16777216, got -5");
  expect_flag_error(launch("--elements=4611686018427387904"), "--elements must be in 1..16777216");
  expect_flag_error(launch("--n=1000000 --elements=1000"), "keeps 1000000000 floats alive");
  expect_flag_error(launch("--n=-3"), "--n: '-3' is not a kernel count");
  expect_flag_error(launch("--n=1e3"), "--n: '1e3' is not a kernel count");
  expect_flag_error(launch("--reps=2147483647"), "--reps must be in 1..10000");
  expect_flag_error(launch("--reps=nan"), "--reps: cannot parse 'nan' as a 32-bit integer");
  expect_flag_error(launch("--capture_reps=0"), "--capture_reps must be in 1..1000, got 0");
  for (const char* v : {"nan", "inf", "-1", "1e300"}) {
    expect_flag_error(launch(std::string("--min_rep_ms=") + v), "--min_rep_ms must be a finite number in [0, 10000]");
  }
  expect_flag_error(launch("--min_rep_ms=soon"), "--min_rep_ms: cannot parse 'soon' as a number");
}

// A JSON or SVG that cannot be written: exit 1 with the cause (issue #17).
TEST(EncoreLaunchTest, WriteFailuresAreReported) {
  const std::string small = "--backends=cpu --n=1 --variants=chain --reps=1 --capture_reps=1 --min_rep_ms=0 ";
  for (const char* flag : {"--json", "--svg"}) {
    if (std::ifstream("/dev/full").good()) {
      const ToolRun run = launch(small + flag + "=/dev/full");
      EXPECT_EQ(run.exit_code, 1) << run.err;
      EXPECT_THAT(run.err, HasSubstr(std::string(flag) + ": cannot write /dev/full: No space left on device")) << flag;
    }
    const ToolRun run = launch(small + flag + "=/nonexistent/dir/out");
    EXPECT_EQ(run.exit_code, 1) << run.err;
    EXPECT_THAT(run.err, HasSubstr(std::string(flag) + ": cannot write /nonexistent/dir/out: cannot create")) << flag;
  }
}

// --version names the tool and encore's version, not how the system's
// Abseil was built ("Debug build (NDEBUG not #defined)" in a release build).
TEST(EncoreToolsTest, VersionNamesTheToolAndEncoresVersion) {
  for (const ToolRun& run : {prof("--version"), launch("--version")}) {
    EXPECT_EQ(run.exit_code, 0);
    EXPECT_THAT(run.out, ::testing::MatchesRegex("encore-(prof|launch) [0-9]+\\.[0-9]+\\.[0-9]+\n"));
    EXPECT_THAT(run.out + run.err, ::testing::Not(HasSubstr("Debug build")));
  }
}

TEST(EncoreLaunchTest, HelpDescribesEveryFlag) {
  const ToolRun run = launch("--help");
  for (const char* flag : {"--n", "--variants", "--backends", "--elements", "--reps", "--capture_reps", "--min_rep_ms",
                           "--json", "--svg"}) {
    EXPECT_THAT(run.out + run.err, HasSubstr(std::string(flag) + " (")) << flag;
  }
}

}  // namespace
}  // namespace encore
