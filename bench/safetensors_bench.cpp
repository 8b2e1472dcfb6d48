// Loading a safetensors file whose header lists many small tensors: the time
// per entry must stay flat as the entry count grows (NOTE [ Linear header
// parsing ] in src/io/safetensors.cpp; issue 17 measured 28 s for 60,000
// entries with the old parse callback).
//
//   build/bench/safetensors_bench --benchmark_repetitions=3 --benchmark_report_aggregates_only=true
//
// The counter per_entry (seconds per entry, an inverted rate: the console
// prints it with an SI prefix, 6.56u = 6.56 us; the JSON holds 6.56e-06) is the
// figure to compare across sizes in one run: the smallest size is the
// baseline, linear parsing keeps the others near it.
#include <benchmark/benchmark.h>

#include <cstdio>
#include <string>

#include "absl/strings/str_cat.h"
#include <map>

#include "encore/checkpoint.h"
#include "encore/encore.h"

namespace encore {
namespace {

// A file of `n` one-element f32 tensors, written once per size with encore's
// own writer (Google Benchmark calls each function several times) and
// removed at exit; "" when it could not be written.
const std::string& file_with_entries(int64_t n) {
  struct Files {
    std::map<int64_t, std::string> paths;
    ~Files() {
      for (const auto& [count, path] : paths) std::remove(path.c_str());
    }
  };
  static Files files;
  auto [it, fresh] = files.paths.emplace(n, absl::StrCat("/tmp/encore_safetensors_bench_", n, ".safetensors"));
  if (!fresh) return it->second;
  NamedTensors tensors;
  for (int64_t i = 0; i < n; ++i) tensors.emplace_back(absl::StrCat("t", i), full({1}, static_cast<double>(i)));
  if (absl::Status s = save_safetensors(it->second, tensors); !s.ok()) {
    std::fprintf(stderr, "safetensors_bench: %s\n", std::string(s.message()).c_str());
    it->second.clear();
  }
  return it->second;
}

// Times read(path) on a file of state.range(0) entries; `read` returns
// whether it succeeded. Counter per_entry: seconds per entry.
template <typename Read>
void time_per_entry(benchmark::State& state, Read&& read) {
  const int64_t n = state.range(0);
  const std::string& path = file_with_entries(n);
  if (path.empty()) {
    state.SkipWithError("could not write the file");
    return;
  }
  for (auto _ : state) {
    if (!read(path, n)) state.SkipWithError("the file was refused");
  }
  state.counters["per_entry"] =
      benchmark::Counter(static_cast<double>(n) * state.iterations(), benchmark::Counter::kIsRate |
                                                                           benchmark::Counter::kInvert);
}

void BM_LoadManyEntries(benchmark::State& state) {
  time_per_entry(state, [](const std::string& path, int64_t n) {
    absl::StatusOr<NamedTensors> loaded = load_safetensors(path);
    benchmark::DoNotOptimize(loaded);
    return loaded.ok() && static_cast<int64_t>(loaded->size()) == n;
  });
}

// Header parsing and validation alone (load_safetensors_metadata reads and
// checks the whole header as load_safetensors does, and makes no tensor).
void BM_ParseHeaderManyEntries(benchmark::State& state) {
  time_per_entry(state, [](const std::string& path, int64_t) {
    absl::StatusOr<std::map<std::string, std::string>> metadata = load_safetensors_metadata(path);
    benchmark::DoNotOptimize(metadata);
    return metadata.ok();
  });
}
BENCHMARK(BM_ParseHeaderManyEntries)->Arg(10000)->Arg(100000)->Unit(benchmark::kMillisecond);

BENCHMARK(BM_LoadManyEntries)->Arg(10000)->Arg(60000)->Arg(100000)->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace encore

BENCHMARK_MAIN();
