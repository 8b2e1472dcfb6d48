// The CUDA backend's memory: the caching allocator (reuse, splitting,
// merging, statistics), host<->device transfers of every dtype, copies across
// devices, and host reads of device tensors. Skips without a GPU.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <vector>

#include "encore/encore.h"
#include "src/backends/cuda/runtime.h"
#include "src/core/allocator.h"
#include "tests/backends/cuda_test_util.h"
#include "tests/test_util.h"

namespace encore {
namespace {

const Device kGpu = Device::cuda(0);

TEST(CudaAllocatorTest, FreedBlocksAreReusedAndCounted) {
  ENCORE_SKIP_WITHOUT_GPU();
  Allocator& a = default_allocator(kGpu);
  const AllocatorStats s0 = allocator_stats(kGpu);
  void* p = a.allocate(1000);
  const AllocatorStats s1 = allocator_stats(kGpu);
  EXPECT_EQ(s1.in_use_bytes - s0.in_use_bytes, 1024);   // rounded to 512 bytes
  EXPECT_EQ(s1.allocations - s0.allocations, 1);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % 512, 0u);
  a.deallocate(p, 1000);
  EXPECT_EQ(allocator_stats(kGpu).in_use_bytes, s0.in_use_bytes);
  void* q = a.allocate(1000);
  EXPECT_EQ(q, p);                                        // the cached block comes back
  a.deallocate(q, 1000);
}

TEST(CudaAllocatorTest, SmallBlocksSplitOneSegmentAndMergeWhenFreed) {
  ENCORE_SKIP_WITHOUT_GPU();
  empty_cache(kGpu);
  Allocator& a = default_allocator(kGpu);
  const int64_t reserved0 = allocator_stats(kGpu).reserved_bytes;
  char* x = static_cast<char*>(a.allocate(4096));
  char* y = static_cast<char*>(a.allocate(4096));
  EXPECT_EQ(allocator_stats(kGpu).reserved_bytes - reserved0, 2 << 20);   // one 2 MiB segment
  EXPECT_EQ(y, x + 4096);                                                   // carved from it, in order
  a.deallocate(x, 4096);
  a.deallocate(y, 4096);
  char* z = static_cast<char*>(a.allocate(8192));         // the two freed neighbours merged
  EXPECT_EQ(z, x);
  a.deallocate(z, 8192);
  empty_cache(kGpu);
  EXPECT_EQ(allocator_stats(kGpu).reserved_bytes, reserved0);   // the whole free segment went back
}

TEST(CudaAllocatorTest, PeakTracksTheHighestUse) {
  ENCORE_SKIP_WITHOUT_GPU();
  reset_peak_stats(kGpu);
  const int64_t base = allocator_stats(kGpu).in_use_bytes;
  {
    Tensor big = empty({1 << 20}, kGpu);                  // 4 MiB
  }
  EXPECT_GE(allocator_stats(kGpu).peak_in_use_bytes - base, 4 << 20);
  EXPECT_EQ(allocator_stats(kGpu).in_use_bytes, base);
}

TEST(CudaTransferTest, EveryDtypeRoundTripsBitForBit) {
  ENCORE_SKIP_WITHOUT_GPU();
  for (DType dt : {kFloat32, kFloat16, kBFloat16, kInt32, kInt64}) {
    SCOPED_TRACE(dtype_name(dt));
    Tensor h = (testing::random_tensor({3, 257}, 7) * 100.0).to(dt);
    Tensor d = h.to(kGpu);
    EXPECT_TRUE(d.device().is_cuda());
    EXPECT_EQ(testing::values(d.to(kCPU)), testing::values(h));
  }
  Tensor b = from_vector<bool>({true, false, true}, {3}, kGpu);
  EXPECT_EQ(b.to(kInt32).to_vector<int32_t>(), (std::vector<int32_t>{1, 0, 1}));
}

TEST(CudaTransferTest, LargeTensorsCrossInChunks) {
  ENCORE_SKIP_WITHOUT_GPU();
  Tensor h = arange(0, 9 << 20, 1, kInt32);                // 36 MiB: three staging chunks
  EXPECT_EQ(testing::values(h.to(kGpu).to(kCPU)), testing::values(h));
}

// Host-to-device copies return before the GPU ran them (NOTE [ Staged
// host-to-device copies ]): queued behind long work they leave the stream
// busy, and more copies than there are staging blocks of each size, each host
// source overwritten right after its copy returned, all land intact.
TEST(CudaTransferTest, CopiesQueuedBehindWorkLandIntactWhileTheHostReusesItsBuffers) {
  ENCORE_SKIP_WITHOUT_GPU();
  const cudaStream_t stream = cuda::stream_for(0);
  Tensor a = (testing::random_tensor({2048, 2048}, 5) * (1.0 / 64)).to(kGpu);
  auto keep_busy = [&] {   // tens of ms of f32 GEMMs (TF32 is off), queued without waiting
    Tensor x = a;
    for (int i = 0; i < 40; ++i) x = matmul(x, a);
    return x;
  };
  Tensor h = zeros({1000});
  {   // warm-up: device blocks, cuBLAS workspace and one staging block exist before the measured part,
      // whose calls then cannot synchronize implicitly (cudaMalloc and cudaMallocHost may)
    Tensor w = keep_busy(), d0 = h.to(kGpu);
    synchronize(kGpu);
  }
  std::vector<Tensor> small;
  Tensor busy = keep_busy();
  h.fill_(0);
  small.push_back(h.to(kGpu));
  h.fill_(-1);                                             // the staged copy must not see this
  const cudaError_t queued = cudaStreamQuery(stream);
  (void)cudaGetLastError();   // NotReady must not linger as the next launch's error
  EXPECT_EQ(queued, cudaErrorNotReady) << "the copy waited for the GPU";
  for (int i = 1; i < 20; ++i) {                           // more than the 8 small blocks: reused once their copies ran
    h.fill_(i);
    small.push_back(h.to(kGpu));
    h.fill_(-1);
  }
  std::vector<Tensor> large;
  Tensor big = zeros({3 << 20});                           // 12 MiB: one 16 MiB block each, 4 at most
  busy = keep_busy();
  for (int i = 0; i < 6; ++i) {
    big.fill_(i);
    large.push_back(big.to(kGpu));
    big.fill_(-1);
  }
  Tensor d = zeros({1000}, kGpu);
  for (int i = 0; i < 5; ++i) d.copy_(full({1000}, 100.0 + i));   // the last copy into d wins
  for (int i = 0; i < 20; ++i) EXPECT_EQ(small[i].sum().item<float>(), 1000.0f * i) << "small copy " << i;
  for (int i = 0; i < 6; ++i) {   // max i and sum n * i: every element is i
    EXPECT_EQ(max(large[i]).item<float>(), static_cast<float>(i)) << "large copy " << i;
    EXPECT_EQ(large[i].sum().item<float>(), static_cast<float>((3 << 20) * i)) << "large copy " << i;   // exact
  }
  EXPECT_EQ(d.to(kCPU).to_vector<float>(), std::vector<float>(1000, 104.0f));
  (void)busy;
}

TEST(CudaTransferTest, NonContiguousSourcesAndDestinations) {
  ENCORE_SKIP_WITHOUT_GPU();
  Tensor h = testing::random_tensor({6, 5}, 3);
  Tensor t = h.t();                                        // non-contiguous on the host
  testing::expect_near(t.to(kGpu).to(kCPU), testing::values(t), 0, 0);
  Tensor d = zeros({5, 6}, kGpu);
  d.copy_(t);                                              // host -> device into a dense tensor
  testing::expect_near(d.to(kCPU), testing::values(t), 0, 0);
  Tensor back = zeros({6, 5});
  back.t().copy_(d);                                       // device -> host into a strided view
  testing::expect_near(back, testing::values(h), 0, 0);
  Tensor dt = zeros({5, 6}, kFloat16, kGpu);
  dt.copy_(t);                                             // across devices and dtypes at once
  testing::expect_near(dt.to(kCPU), testing::values(t.to(kFloat16)), 0, 0);
}

TEST(CudaTransferTest, GradientsFlowBackAcrossDevices) {
  ENCORE_SKIP_WITHOUT_GPU();
  Tensor h = testing::random_tensor({4}, 5).requires_grad_();
  Tensor d = h.to(kGpu);
  sum(mul(d, d)).backward();
  testing::expect_near(h.grad(), testing::values(h.detach() * 2.0), 1e-6, 1e-6);
}

TEST(CudaTransferTest, HostReadsOfDeviceTensors) {
  ENCORE_SKIP_WITHOUT_GPU();
  Tensor d = full({2, 2}, 1.5, kFloat32, kGpu);
  EXPECT_EQ(d.sum().item<float>(), 6.0f);
  EXPECT_NE(d.to_string().find("device=cuda:0"), std::string::npos) << d.to_string();
}

TEST(CudaTransferTest, ManualSeedReseedsTheCudaGenerator) {
  ENCORE_SKIP_WITHOUT_GPU();
  manual_seed(11);
  std::vector<float> first = rand({100}, kFloat32, kGpu).to_vector<float>();
  manual_seed(11);
  EXPECT_EQ(rand({100}, kFloat32, kGpu).to_vector<float>(), first);
  EXPECT_NE(rand({100}, kFloat32, kGpu).to_vector<float>(), first);   // the offset advanced
}

}  // namespace
}  // namespace encore
