// The libtorch half of torch_cpu_steps: steps built in their own file, so
// that libtorch's headers and encore's never meet in one translation unit.
#pragma once

#include <functional>
#include <string>

namespace peers {

// One training step of workload `name` (the names of kWorkloads in
// torch_cpu_steps.cpp) in libtorch, on fixed inputs.
std::function<void()> torch_step(const std::string& name);
void torch_set_threads(int n);   // torch::set_num_threads

}  // namespace peers
