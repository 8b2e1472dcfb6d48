// Who runs a CPU GEMM's threads: encore's OpenMP workers (the default; NOTE
// [ One thread pool for GEMMs ] in gemm.cpp) or OpenBLAS's own pthreads (the
// baseline that bench/gemm_threads_bench times in the same process).
//
//   encore::cpu::set_gemm_threading(encore::cpu::GemmThreading::kOpenBlas);
//   ... steps ...
//   encore::cpu::set_gemm_threading(encore::cpu::GemmThreading::kEncore);
//
// Internal: for benchmarks; call it between steps, never while a GEMM runs.
// It also sets OpenBLAS's thread count for the whole process (1 for kEncore,
// omp_get_max_threads() for kOpenBlas); under kEncore every GEMM sets it back
// to 1 if something raised it.
#pragma once

namespace encore::cpu {

enum class GemmThreading {
  kEncore,    // OpenBLAS on the calling thread; bands or batch items over the worker threads (workers.h)
  kOpenBlas,  // big GEMMs whole to OpenBLAS's threads, small batches over the worker threads
};

void set_gemm_threading(GemmThreading threading);

}  // namespace encore::cpu
