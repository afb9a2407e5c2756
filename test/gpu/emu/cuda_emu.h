// Test-only CPU emulation of the CUDA subset our kernels use, so CI can *execute* the real
// kernel sources without a GPU: each block runs as blockDim host threads sharing `static`
// (= __shared__) variables, __syncthreads is a std::barrier, atomics are std::atomic_ref.
// Blocks run one after another, which is one legal CUDA schedule. Floating point is IEEE
// float32 without contraction (-ffp-contract=off); expf is the host's, not CUDA's.
#pragma once

#include <algorithm>
#include <atomic>
#include <barrier>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <thread>
#include <vector>

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __restrict__ __restrict
#define __shared__ static

struct dim3 {
  unsigned x = 1, y = 1, z = 1;
};
struct float3 {
  float x, y, z;
};
inline float3 make_float3(float x, float y, float z) { return {x, y, z}; }

inline thread_local dim3 threadIdx, blockIdx;
inline dim3 blockDim, gridDim;
inline thread_local std::barrier<>* emu_barrier = nullptr;

inline void __syncthreads() { emu_barrier->arrive_and_wait(); }
template <typename T>
inline T __ldg(const T* p) { return *p; }
inline float __fadd_rn(float a, float b) { return a + b; }
inline float __fsub_rn(float a, float b) { return a - b; }
inline float __fmul_rn(float a, float b) { return a * b; }
inline int __float_as_int(float f) {
  int i;
  std::memcpy(&i, &f, 4);
  return i;
}
inline float __int_as_float(int i) {
  float f;
  std::memcpy(&f, &i, 4);
  return f;
}
inline int __float2int_rn(float f) { return (int)std::lrintf(f); }
using std::max;
using std::min;

template <typename T>
inline T atomicAdd(T* p, T v) { return std::atomic_ref<T>(*p).fetch_add(v); }
template <typename T>
inline T atomicMin(T* p, T v) {
  std::atomic_ref<T> a(*p);
  T old = a.load();
  while (v < old && !a.compare_exchange_weak(old, v)) {
  }
  return old;
}
template <typename T>
inline T atomicMax(T* p, T v) {
  std::atomic_ref<T> a(*p);
  T old = a.load();
  while (v > old && !a.compare_exchange_weak(old, v)) {
  }
  return old;
}

// Run `kernel` over the grid: blockDim host threads step through the blocks in order, with a
// barrier between blocks (so `static` shared memory is handed from block to block safely).
inline void emu_launch(dim3 grid, dim3 block, const std::function<void()>& kernel) {
  gridDim = grid;
  blockDim = block;
  const unsigned n = block.x * block.y * block.z;
  std::barrier<> bar((std::ptrdiff_t)n);
  std::vector<std::thread> threads;
  threads.reserve(n);
  for (unsigned t = 0; t < n; ++t) {
    threads.emplace_back([&, t] {
      threadIdx = dim3{t % block.x, (t / block.x) % block.y, t / (block.x * block.y)};
      emu_barrier = &bar;
      for (unsigned by = 0; by < grid.y; ++by) {
        for (unsigned bx = 0; bx < grid.x; ++bx) {
          blockIdx = dim3{bx, by, 1};
          kernel();
          bar.arrive_and_wait();
        }
      }
    });
  }
  for (auto& th : threads) th.join();
}
