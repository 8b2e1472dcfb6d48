#include "tests/backends/cuda_test_util.h"

namespace encore::testing {

void expect_cuda_matches_cpu(const Fn& fn, const std::vector<Tensor>& inputs, double atol, double rtol,
                             bool backward) {
  const Device gpu = Device::cuda(0);
  std::vector<Tensor> cpu_in, gpu_in;
  for (const Tensor& t : inputs) {
    Tensor c = t.detach().clone();
    Tensor g = t.detach().to(gpu);
    if (backward && is_floating(t.dtype())) {
      c.requires_grad_();
      g.requires_grad_();
    }
    cpu_in.push_back(c);
    gpu_in.push_back(g);
  }
  Tensor cpu_out = fn(cpu_in);
  Tensor gpu_out = fn(gpu_in);
  ASSERT_TRUE(gpu_out.device().is_cuda()) << "the op moved its result off the GPU";
  ASSERT_EQ(cpu_out.shape(), gpu_out.shape());
  ASSERT_EQ(cpu_out.dtype(), gpu_out.dtype());
  expect_near(gpu_out.to(kCPU), values(cpu_out), atol, rtol);
  if (!backward) return;
  // A fixed random weight makes every output element's gradient distinct.
  Tensor w = random_tensor(cpu_out.shape(), 12345, cpu_out.dtype());
  sum(mul(cpu_out, w)).backward();
  sum(mul(gpu_out, w.to(gpu))).backward();
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (!cpu_in[i].requires_grad()) continue;
    SCOPED_TRACE(::testing::Message() << "gradient of input " << i);
    ASSERT_TRUE(gpu_in[i].grad().defined());
    expect_near(gpu_in[i].grad().to(kCPU), values(cpu_in[i].grad()), atol, rtol);
  }
}

}  // namespace encore::testing
