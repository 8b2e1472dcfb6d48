// The main() of an example program: its flags parsed and checked the way the
// tools check theirs (tools/flags.h: a value that does not parse or is out
// of range is one line on stderr and exit status 2, never an abort), then
// the program run, an encore::Error it lets escape reported as one line and
// exit status 1.
//
//   absl::Status check_flags() { return tools::in_range("--steps", absl::GetFlag(FLAGS_steps), 1, 1000); }
//   int run() { ...; return ok ? 0 : 1; }
//   int main(int argc, char** argv) { return examples::example_main("train_x", argc, argv, check_flags, run); }
#pragma once

#include <cstdio>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "encore/encore.h"
#include "tools/flags.h"

namespace encore::examples {

// OK for "cpu", and for "cuda" when a GPU answers; the flag's message otherwise.
inline absl::Status check_device_flag(const std::string& device) {
  if (device != "cpu" && device != "cuda") {
    return absl::InvalidArgumentError("--device must be cpu or cuda, got '" + device + "'");
  }
  if (device == "cuda" && !cuda_available()) {
    return absl::InvalidArgumentError("--device=cuda but no usable GPU (or encore was built without CUDA)");
  }
  return absl::OkStatus();
}

// True when a and b have the same shape, dtype and bytes (read on the CPU):
// an eager and a replayed run compared bit for bit.
inline bool same_bits(const Tensor& a, const Tensor& b) {
  const Tensor x = a.to(kCPU).contiguous(), y = b.to(kCPU).contiguous();
  return x.shape() == y.shape() && x.dtype() == y.dtype() &&
         std::memcmp(x.data_ptr(), y.data_ptr(), static_cast<size_t>(x.numel() * dtype_size(x.dtype()))) == 0;
}

// The same for two lists of named tensors (a model's state_tensors(), an
// optimizer's state()): the same names in the same order, each same_bits.
inline bool same_bits(const std::vector<std::pair<std::string, Tensor>>& a,
                      const std::vector<std::pair<std::string, Tensor>>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i].first != b[i].first || !same_bits(a[i].second, b[i].second)) return false;
  }
  return true;
}

template <typename Check, typename Run>
int example_main(const char* program, int argc, char** argv, Check check_flags, Run run) {
  if (tools::parse_flags(argc, argv, program).size() != 1) {
    std::fprintf(stderr, "%s: unexpected arguments (see --help)\n", program);
    return 2;
  }
  if (absl::Status s = check_flags(); !s.ok()) return tools::flag_error(program, s);
  try {
    return run();
  } catch (const Error& e) {   // a failure of the library (a device error, a refused op)
    std::fprintf(stderr, "%s: %s\n", program, e.what());
    return 1;
  }
}

}  // namespace encore::examples
