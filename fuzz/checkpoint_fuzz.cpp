// libFuzzer target: the training-checkpoint loader (load_checkpoint, over
// load_into) on arbitrary bytes, into a small MLP and its AdamW state. Every
// input must load or give a Status; a failed load leaves the model and
// optimizer untouched, and a successful one leaves them usable (a step runs).
// Seeds: fuzz/make_corpus.cpp writes checkpoints of this very model.
//
//   ./run fuzz checkpoint_fuzz
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "encore/encore.h"
#include "fuzz/fuzz_corpus_model.h"
#include "fuzz/fuzz_file.h"

namespace {

// The parameters' bytes (not values: a loaded NaN must compare equal to itself).
std::string snapshot(const encore::nn::Module& m) {
  std::string out;
  for (const encore::Tensor& p : m.parameters()) {
    const std::vector<float> v = p.to_vector<float>();
    out.append(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(float));
  }
  return out;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static encore::fuzz::FuzzFile file;
  static encore::fuzz::CorpusModel run;   // reused: every load is checked against its state before it
  const std::string before = snapshot(run.model);
  const absl::Status s = encore::load_checkpoint(file.write(data, size), run.model, run.opt.get());
  if (!s.ok()) {
    if (snapshot(run.model) != before) std::abort();   // load_into: on error no target changes
    return 0;
  }
  run.step();   // whatever values loaded (NaN included), a step must run
  return 0;
}
