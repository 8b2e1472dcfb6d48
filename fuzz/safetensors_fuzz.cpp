// libFuzzer target: the safetensors reader (src/io/safetensors.cpp) on
// arbitrary bytes. Every input must give a tensor list or a Status, never a
// crash, a sanitizer report, a leak or an allocation past what the file
// holds (NOTE [ Hostile files ]). Seeds: fuzz/make_corpus.cpp.
//
//   ./run fuzz safetensors_fuzz          # ASan + UBSan, 60 s
#include <cstdint>
#include <cstdlib>

#include "encore/checkpoint.h"
#include "encore/encore.h"
#include "fuzz/fuzz_file.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static encore::fuzz::FuzzFile file;
  const std::string& path = file.write(data, size);
  absl::StatusOr<encore::NamedTensors> all = encore::load_safetensors(path);
  if (all.ok()) {
    for (const auto& [name, t] : *all) {
      if (!t.defined() || t.numel() * encore::dtype_size(t.dtype()) > static_cast<int64_t>(size)) std::abort();
      (void)t.to(encore::kFloat32).sum().item<double>();   // the bytes are usable as values
    }
  }
  (void)encore::load_safetensors_metadata(path);
  // The shapes and dtypes of make_corpus's seed file, so load_into's checks and copies run.
  encore::NamedTensors targets = {{"w", encore::zeros({3, 4})},
                                  {"h", encore::zeros({5}, encore::kBFloat16)},
                                  {"m", encore::zeros({3}, encore::kBool)},
                                  {"step", encore::zeros({}, encore::kInt64)}};
  (void)encore::load_into(path, targets);
  return 0;
}
