// The GEMM libraries Debian packages, on the GEMM shapes of issue 19's
// training steps: OpenBLAS (what encore calls, as it runs here: its
// DYNAMIC_ARCH core choice, never overridden), oneDNN's dnnl_sgemm (encore
// already links oneDNN) and BLIS (Debian's libblis4-openmp, opened with
// dlopen when installed, so nothing of it is needed to build; its symbols stay
// local, away from OpenBLAS's identically named BLAS ones).
//
//   OMP_WAIT_POLICY=passive build/bench/gemm_libs_bench [--quick]
//
// For each workload (the MLPs of torch_cpu_steps, batch as there, and the
// transformer block B 8 T 64 C 256), every GEMM of one training step: per
// linear layer y = x W^T the forward (x W^T), the input gradient (dY W,
// skipped for a first layer whose input needs none) and the weight gradient
// (dY^T x); the block adds its attention's 32 batched 64 x 64 x 64 products
// (2 forward, 4 backward). Each shape is timed in all libraries in turn
// (row-major f32, alpha 1, beta 0), rounds alternating, median per call; a
// workload's figure is the sum over its GEMMs. Every library's result is
// checked against OpenBLAS's first (max |difference| / max |value|).
// Threads: openblas_set_num_threads, omp_set_num_threads (oneDNN's OpenMP)
// and bli_thread_set_num_threads together, 1 then 2.
#include <dlfcn.h>
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include <cblas.h>
#include <oneapi/dnnl/dnnl.h>

namespace {

struct Gemm {
  bool ta, tb;                 // op(A) = A^T, op(B) = B^T (row-major)
  int64_t m, n, k, count;      // C [m, n] = op(A) [m, k] op(B) [k, n], count times per step
};

struct Workload {
  std::string name;
  std::vector<Gemm> gemms;
};

// The three GEMMs of a linear layer in -> out on a batch of b rows.
void linear(std::vector<Gemm>& g, int64_t b, int64_t in, int64_t out, bool input_grad) {
  g.push_back({false, true, b, out, in, 1});    // y = x W^T
  if (input_grad) g.push_back({false, false, b, in, out, 1});   // dx = dy W
  g.push_back({true, false, out, in, b, 1});    // dW = dy^T x
}

Workload mlp(const std::string& name, std::vector<int64_t> widths, int64_t batch) {
  Workload w{name, {}};
  for (size_t i = 0; i + 1 < widths.size(); ++i) linear(w.gemms, batch, widths[i], widths[i + 1], i > 0);
  return w;
}

Workload block() {
  Workload w{"block_b8_t64_c256_h4", {}};
  const int64_t rows = 8 * 64, c = 256;
  linear(w.gemms, rows, c, 3 * c, true);    // qkv
  linear(w.gemms, rows, c, c, true);        // proj
  linear(w.gemms, rows, c, 4 * c, true);    // fc
  linear(w.gemms, rows, 4 * c, c, true);    // fc2
  const int64_t heads = 8 * 4, t = 64, hd = 64;
  w.gemms.push_back({false, true, t, t, hd, heads});    // q k^T
  w.gemms.push_back({false, false, t, hd, t, heads});   // att v
  w.gemms.push_back({false, true, t, t, hd, heads});    // d att = dy v^T
  w.gemms.push_back({true, false, t, hd, t, heads});    // dv = att^T dy
  w.gemms.push_back({false, false, t, hd, t, heads});   // dq = ds k
  w.gemms.push_back({true, false, t, hd, t, heads});    // dk = ds^T q
  return w;
}

// BLIS's typed API (blis.h: dim_t and inc_t are int64, trans_t an enum,
// BLIS_TRANSPOSE = 8), resolved from the shared library at run time.
using BliSgemm = void (*)(int, int, int64_t, int64_t, int64_t, const float*, const float*, int64_t, int64_t,
                          const float*, int64_t, int64_t, const float*, float*, int64_t, int64_t);
using BliSetThreads = void (*)(int64_t);
constexpr int kBlisTranspose = 8;

struct Blis {
  BliSgemm sgemm = nullptr;
  BliSetThreads set_threads = nullptr;
};

Blis open_blis() {
  Blis b;
  for (const char* path : {"/usr/lib/x86_64-linux-gnu/blis-openmp/libblis.so.4", "libblis.so.4"}) {
    void* h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (h == nullptr) continue;
    b.sgemm = reinterpret_cast<BliSgemm>(dlsym(h, "bli_sgemm"));
    b.set_threads = reinterpret_cast<BliSetThreads>(dlsym(h, "bli_thread_set_num_threads"));
    if (b.sgemm != nullptr && b.set_threads != nullptr) return b;
  }
  return Blis{};
}

enum Lib { kOpenBlas, kOneDnn, kBlis, kLibs };
const char* const kLibNames[kLibs] = {"OpenBLAS", "oneDNN", "BLIS"};

struct Operands {
  std::vector<float> a, b, c;
};

std::string shape_name(const Gemm& g);

// One call of library `lib` on g (one of its `count` batched products).
void call(Lib lib, const Blis& blis, const Gemm& g, Operands& o) {
  const int64_t lda = g.ta ? g.m : g.k, ldb = g.tb ? g.k : g.n, ldc = g.n;
  switch (lib) {
    case kOpenBlas:
      cblas_sgemm(CblasRowMajor, g.ta ? CblasTrans : CblasNoTrans, g.tb ? CblasTrans : CblasNoTrans,
                  static_cast<int>(g.m), static_cast<int>(g.n), static_cast<int>(g.k), 1.0f, o.a.data(),
                  static_cast<int>(lda), o.b.data(), static_cast<int>(ldb), 0.0f, o.c.data(), static_cast<int>(ldc));
      break;
    case kOneDnn:
      // A refused call computes nothing and would time as a very fast one.
      if (const dnnl_status_t st = dnnl_sgemm(g.ta ? 'T' : 'N', g.tb ? 'T' : 'N', g.m, g.n, g.k, 1.0f, o.a.data(), lda,
                                              o.b.data(), ldb, 0.0f, o.c.data(), ldc);
          st != dnnl_success) {
        std::fprintf(stderr, "gemm_libs_bench: dnnl_sgemm refused %s: status %d\n", shape_name(g).c_str(),
                     static_cast<int>(st));
        std::exit(1);
      }
      break;
    case kBlis: {
      const float one = 1.0f, zero = 0.0f;
      // Row-major storage: row stride ld, column stride 1, of the stored (untransposed) matrix.
      blis.sgemm(g.ta ? kBlisTranspose : 0, g.tb ? kBlisTranspose : 0, g.m, g.n, g.k, &one, o.a.data(), lda, 1,
                 o.b.data(), ldb, 1, &zero, o.c.data(), ldc, 1);
      break;
    }
    case kLibs: break;
  }
}

double now_ms() {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

double median(std::vector<double> v) {
  std::nth_element(v.begin(), v.begin() + v.size() / 2, v.end());
  return v[v.size() / 2];
}

std::string fmt(const char* f, double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}

std::string shape_name(const Gemm& g) {
  char buf[96];
  std::snprintf(buf, sizeof buf, "%s%s %lldx%lldx%lld%s", g.ta ? "T" : "N", g.tb ? "T" : "N",
                static_cast<long long>(g.m), static_cast<long long>(g.n), static_cast<long long>(g.k),
                g.count > 1 ? (" x" + std::to_string(g.count)).c_str() : "");
  return buf;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc > 2 || (argc == 2 && std::strcmp(argv[1], "--quick") != 0)) {
    std::fprintf(stderr, "usage: %s [--quick]\n", argv[0]);
    return 2;
  }
  const bool quick = argc == 2;
  const double budget_ms = quick ? 60.0 : 300.0;   // per shape, all libraries together
  const Blis blis = open_blis();
  const int libs = blis.sgemm != nullptr ? kLibs : kBlis;
  if (blis.sgemm == nullptr) std::printf("BLIS not found (apt-get install libblis4-openmp): its column is left out\n");
  std::printf("OpenBLAS core: %s; config: %s\n", openblas_get_corename(), openblas_get_config());
  const std::vector<Workload> workloads = {mlp("mlp_784_128_10_b32", {784, 128, 10}, 32),
                                           mlp("mlp_784_512_512_10_b128", {784, 512, 512, 10}, 128),
                                           mlp("mlp_1024_4096_4096_1024_b64", {1024, 4096, 4096, 1024}, 64),
                                           block()};
  std::mt19937 rng(1);
  std::normal_distribution<float> normal;
  for (int threads : {1, 2}) {
    openblas_set_num_threads(threads);
    omp_set_num_threads(threads);
    if (blis.set_threads != nullptr) blis.set_threads(threads);
    std::printf("\n%d thread%s: ms per call (median), ratio to OpenBLAS; max relative difference from OpenBLAS\n\n",
                threads, threads > 1 ? "s" : "");
    std::printf("| workload | GEMM (op, m x n x k) | OpenBLAS ms | oneDNN ms | BLIS ms | oneDNN / OpenBLAS | "
                "BLIS / OpenBLAS | max rel diff oneDNN, BLIS |\n|---|---|---|---|---|---|---|---|\n");
    for (const Workload& w : workloads) {
      double total[kLibs] = {};
      for (const Gemm& g : w.gemms) {
        Operands o;
        o.a.resize(g.m * g.k);
        o.b.resize(g.k * g.n);
        o.c.assign(g.m * g.n, 0.0f);
        for (float& v : o.a) v = normal(rng);
        for (float& v : o.b) v = normal(rng);
        std::vector<float> ref;
        double diff[kLibs] = {};
        for (int l = 0; l < libs; ++l) {   // warm-up, and the check against OpenBLAS
          // C starts as NaN for every library: one that leaves it unwritten
          // cannot pass the check on OpenBLAS's result left in the buffer.
          std::fill(o.c.begin(), o.c.end(), std::numeric_limits<float>::quiet_NaN());
          call(static_cast<Lib>(l), blis, g, o);
          if (l == kOpenBlas) ref = o.c;
          double dmax = 0, vmax = 0;
          bool finite = true;
          for (size_t i = 0; i < ref.size(); ++i) {
            finite = finite && std::isfinite(o.c[i]);
            dmax = std::max(dmax, static_cast<double>(std::abs(o.c[i] - ref[i])));
            vmax = std::max(vmax, static_cast<double>(std::abs(ref[i])));
          }
          if (!finite) {
            std::fprintf(stderr, "gemm_libs_bench: %s left %s with values that are not finite\n", kLibNames[l],
                         shape_name(g).c_str());
            return 1;
          }
          diff[l] = vmax > 0 ? dmax / vmax : dmax;
        }
        std::vector<double> t[kLibs];
        const double start = now_ms();
        for (int round = 0; round < 5 || (now_ms() - start < budget_ms && round < 5000); ++round) {
          for (int k = 0; k < libs; ++k) {
            const int l = (round + k) % libs;   // each library goes first in turn
            const double t0 = now_ms();
            call(static_cast<Lib>(l), blis, g, o);
            t[l].push_back(now_ms() - t0);
          }
        }
        double med[kLibs] = {};
        for (int l = 0; l < libs; ++l) {
          med[l] = median(t[l]);
          total[l] += med[l] * static_cast<double>(g.count);
        }
        const bool b = libs > kBlis;
        std::printf("| %s | %s | %.4g | %.4g | %s | %.2fx | %s | %.1e, %s |\n", w.name.c_str(), shape_name(g).c_str(),
                    med[kOpenBlas], med[kOneDnn], b ? fmt("%.4g", med[kBlis]).c_str() : "-",
                    med[kOneDnn] / med[kOpenBlas], b ? fmt("%.2fx", med[kBlis] / med[kOpenBlas]).c_str() : "-",
                    diff[kOneDnn], b ? fmt("%.1e", diff[kBlis]).c_str() : "-");
        std::fflush(stdout);
      }
      const bool b = libs > kBlis;
      std::printf("| **%s, one step** | all | **%.4g** | **%.4g** | **%s** | **%.2fx** | **%s** | |\n", w.name.c_str(),
                  total[kOpenBlas], total[kOneDnn], b ? fmt("%.4g", total[kBlis]).c_str() : "-",
                  total[kOneDnn] / total[kOpenBlas], b ? fmt("%.2fx", total[kBlis] / total[kOpenBlas]).c_str() : "-");
      std::fflush(stdout);
    }
  }
  return 0;
}
