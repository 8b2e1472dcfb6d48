// make_corpus: writes the seed corpora of the fuzz targets, so every seed is
// made by encore itself (its own writer, its own model, its own planner
// problems) and a fresh checkout needs nothing else.
//
//   build-fuzz/fuzz/make_corpus build-fuzz/fuzz-seeds    # ./run fuzz does this
//
// OUT/<target>/ gets, for each target of fuzz/meson.build:
//   safetensors_fuzz   safetensors files: every dtype, 0-d and empty tensors, metadata
//   checkpoint_fuzz    checkpoints of fuzz/fuzz_corpus_model.h's MLP, before and after a step
//   planner_csv_fuzz   planner CSVs: training-step traces and random problems, with
//                      and without alignment and offsets
//   ops_fuzz           deterministic pseudo-random byte strings
// Exits 1 with a message when a file cannot be written.
#include <sys/stat.h>

#include <cstdio>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "encore/checkpoint.h"
#include "encore/encore.h"
#include "encore/planner.h"
#include "encore/training_checkpoint.h"
#include "fuzz/fuzz_corpus_model.h"
#include "planner/synthetic.h"

namespace {

using encore::NamedTensors;

absl::Status write_text(const std::string& path, const std::string& text) {
  return encore::planner::write_file(path, text);
}

absl::Status safetensors_seeds(const std::string& dir) {
  encore::manual_seed(7);
  const NamedTensors mixed = {{"w", encore::randn({3, 4})},
                              {"h", encore::randn({5}).to(encore::kBFloat16)},
                              {"m", encore::from_vector<bool>({true, false, true})},
                              {"step", encore::scalar_tensor(3, encore::kInt64)}};
  const NamedTensors every_dtype = {{"f32", encore::randn({2, 2})},
                                    {"f16", encore::randn({3}).to(encore::kFloat16)},
                                    {"bf16", encore::randn({1, 3}).to(encore::kBFloat16)},
                                    {"i32", encore::arange(0, 4, 1, encore::kInt32)},
                                    {"i64", encore::arange(-2, 2)},
                                    {"b", encore::from_vector<bool>({false, true})},
                                    {"empty", encore::zeros({0, 2}, encore::kInt32)},
                                    {"scalar", encore::scalar_tensor(0.5)}};
  for (absl::Status s : {encore::save_safetensors(dir + "/mixed.safetensors", mixed, {{"format", "pt"}}),
                         encore::save_safetensors(dir + "/every_dtype.safetensors", every_dtype),
                         encore::save_safetensors(dir + "/none.safetensors", {}, {{"k", "v"}})}) {
    if (!s.ok()) return s;
  }
  return absl::OkStatus();
}

absl::Status checkpoint_seeds(const std::string& dir) {
  encore::manual_seed(1);
  encore::fuzz::CorpusModel run;
  run.opt->init_state();
  if (absl::Status s = encore::save_checkpoint(dir + "/fresh.safetensors", run.model, run.opt.get()); !s.ok()) return s;
  run.step();
  if (absl::Status s = encore::save_checkpoint(dir + "/stepped.safetensors", run.model, run.opt.get()); !s.ok()) return s;
  return encore::save_checkpoint(dir + "/model_only.safetensors", run.model);
}

absl::Status planner_seeds(const std::string& dir) {
  namespace planner = encore::planner;
  int k = 0;
  for (uint64_t seed : {1, 2, 3}) {
    const std::vector<planner::Buffer> trace = planner::training_step_trace({.num_buffers = 24, .seed = seed});
    const std::vector<planner::Buffer> random = planner::random_buffers(16, 4096, 40, seed % 2 == 0, seed);
    for (const std::vector<planner::Buffer>* b : {&trace, &random}) {
      absl::StatusOr<planner::Plan> plan = planner::plan_buffers(*b, {.algorithm = planner::Algorithm::kGreedy});
      if (!plan.ok()) return plan.status();
      for (absl::Status s : {write_text(absl::StrCat(dir, "/problem_", k, ".csv"), planner::format_csv(*b, nullptr, false)),
                             write_text(absl::StrCat(dir, "/aligned_", k, ".csv"), planner::format_csv(*b, nullptr, true)),
                             write_text(absl::StrCat(dir, "/planned_", k, ".csv"), planner::format_csv(*b, &*plan, true))}) {
        if (!s.ok()) return s;
      }
      ++k;
    }
  }
  return write_text(dir + "/example.csv", "id,lower,upper,size\nb1,0,3,4\nb2,3,9,4\nb3,0,9,4\nb4,9,21,4\nb5,0,21,4\n");
}

absl::Status ops_seeds(const std::string& dir) {
  std::mt19937_64 rng(17);
  for (int i = 0; i < 64; ++i) {
    std::string bytes(32 + rng() % 480, '\0');
    for (char& c : bytes) c = static_cast<char>(rng());
    if (absl::Status s = write_text(absl::StrCat(dir, "/random_", i), bytes); !s.ok()) return s;
  }
  return absl::OkStatus();
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: make_corpus OUT_DIR\n");
    return 2;
  }
  const std::string out = argv[1];
  const std::pair<const char*, absl::Status (*)(const std::string&)> targets[] = {
      {"safetensors_fuzz", safetensors_seeds},
      {"checkpoint_fuzz", checkpoint_seeds},
      {"planner_csv_fuzz", planner_seeds},
      {"ops_fuzz", ops_seeds}};
  ::mkdir(out.c_str(), 0755);
  for (const auto& target : targets) {   // NOTE [ No structured bindings in lambdas ]
    const auto make = target.second;
    const std::string dir = absl::StrCat(out, "/", target.first);
    ::mkdir(dir.c_str(), 0755);
    absl::Status s;
    const absl::Status thrown = encore::status_of([&] { s = make(dir); });
    if (!thrown.ok()) s = thrown;
    if (!s.ok()) {
      std::fprintf(stderr, "make_corpus: %s: %s\n", dir.c_str(), std::string(s.message()).c_str());
      return 1;
    }
  }
  return 0;
}
