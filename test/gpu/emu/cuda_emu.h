// Test-only CPU emulation of the CUDA subset our kernels use, so CI can *execute* the real
// kernel sources without a GPU: each block's threads are cooperative user contexts
// (ucontext) on one OS thread, sharing `static` (= __shared__) variables; __syncthreads
// switches to the next thread, and a block advances only when every thread has reached the
// barrier (or returned). A fiber is entered once with swapcontext; every later switch is
// _setjmp/_longjmp, which skips swapcontext's signal-mask system call. Blocks run one after another, which is one legal CUDA schedule.
// Floating point is IEEE float32 without contraction (-ffp-contract=off); expf is the host's
// (docs/gpu.md, "Float arithmetic": the spec's, the emulator's and the kernels' semantics).
#pragma once

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <numeric>
#include <random>
#include <csetjmp>
#include <ucontext.h>
#include <vector>

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __restrict__ __restrict
#define __launch_bounds__(...)
// __shared__ variables are function statics collected in one section, so that every block can
// start with them poisoned (0xFF bytes: NaN floats, -1 integers) as CUDA leaves them undefined;
// a kernel that reads shared memory before writing it then fails instead of reading what the
// previous block left behind.
#define __shared__ static __attribute__((section("emu_shared")))
extern "C" char __start_emu_shared[], __stop_emu_shared[];
inline void emu_poison_shared() {
  std::memset(__start_emu_shared, 0xFF, (size_t)(__stop_emu_shared - __start_emu_shared));
}

struct dim3 {
  unsigned x = 1, y = 1, z = 1;
};
struct float3 {
  float x, y, z;
};
inline float3 make_float3(float x, float y, float z) { return {x, y, z}; }
struct alignas(16) uint4 {
  unsigned x, y, z, w;
};
struct alignas(16) int4 {
  int x, y, z, w;
};

inline dim3 threadIdx, blockIdx, blockDim, gridDim;
inline unsigned emu_linear_tid() {
  return threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
}

struct EmuFiber {
  ucontext_t ctx;
  std::jmp_buf jump;
  std::vector<char> stack;
  bool started = false, done = false;
  unsigned collectives = 0;  // warp collectives this thread has run in its block
};
inline ucontext_t emu_scheduler;
inline std::jmp_buf emu_scheduler_jump;
inline std::vector<EmuFiber> emu_fibers;
inline unsigned emu_current = 0;
inline const std::function<void()>* emu_kernel = nullptr;

inline void __syncthreads() {
  if (_setjmp(emu_fibers[emu_current].jump) == 0) _longjmp(emu_scheduler_jump, 1);
}

// Warp collectives (full mask, uniform control flow, as the kernels call them): each thread
// leaves its value, then yields as at a barrier; when it resumes, every thread of the block has
// run to the same collective, so the warp's values are all there. Two buffers, alternating per
// collective, so a thread that already went on to the next collective never overwrites a value
// a slower lane of its warp has yet to read.
inline unsigned long long emu_collective_values[2][1024];

inline unsigned emu_collective_slot() {
  return emu_fibers[emu_current].collectives++ & 1u;
}
// Leaves this thread's `bits` at its next collective and returns the 32 values its warp left
// there, once every thread of the block has reached it.
inline const unsigned long long* emu_warp_exchange(unsigned long long bits) {
  const unsigned tid = emu_linear_tid(), slot = emu_collective_slot();
  emu_collective_values[slot][tid] = bits;
  __syncthreads();
  return &emu_collective_values[slot][tid - tid % 32];
}
template <typename T>
inline unsigned long long emu_bits(T value) {
  unsigned long long bits = 0;
  std::memcpy(&bits, &value, sizeof(T));
  return bits;
}
inline unsigned __ballot_sync(unsigned mask, int predicate) {
  (void)mask;
  const unsigned long long* warp = emu_warp_exchange(predicate != 0);
  unsigned votes = 0;
  for (unsigned lane = 0; lane < 32; ++lane) votes |= (warp[lane] ? 1u : 0u) << lane;
  return votes;
}
template <typename T>
inline unsigned __match_any_sync(unsigned mask, T value) {
  (void)mask;
  const unsigned long long bits = emu_bits(value);
  const unsigned long long* warp = emu_warp_exchange(bits);
  unsigned same = 0;
  for (unsigned lane = 0; lane < 32; ++lane) same |= (warp[lane] == bits ? 1u : 0u) << lane;
  return same;
}
inline int __popc(unsigned x) { return __builtin_popcount(x); }
inline int __ffs(unsigned x) { return __builtin_ffs((int)x); }
inline int __clz(unsigned x) { return x ? __builtin_clz(x) : 32; }
template <typename T>
inline T __shfl_up_sync(unsigned mask, T value, unsigned delta) {
  (void)mask;
  const unsigned long long* warp = emu_warp_exchange(emu_bits(value));
  const unsigned lane = emu_linear_tid() % 32;
  if (lane < delta) return value;
  T got;
  std::memcpy(&got, &warp[lane - delta], sizeof(T));
  return got;
}

inline void emu_fiber_main() {
  (*emu_kernel)();
  emu_fibers[emu_current].done = true;
  _longjmp(emu_scheduler_jump, 1);
}
template <typename T>
inline T __ldg(const T* p) { return *p; }
// One memory, no caches: a load past L1 is a load, and a fence orders what one OS thread does.
template <typename T>
inline T __ldcg(const T* p) { return *p; }
inline void __threadfence() { std::atomic_thread_fence(std::memory_order_seq_cst); }
inline float __fadd_rn(float a, float b) { return a + b; }
inline float __fsub_rn(float a, float b) { return a - b; }
inline float __fmul_rn(float a, float b) { return a * b; }
inline float __fdiv_rn(float a, float b) { return a / b; }
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
// PTX cvt.rn.f16.f32 (common.cuh's cvt_rn_f16 on the device): GCC's _Float16 conversion is
// IEEE's, to nearest even, overflow to infinity, NaN kept.
inline uint16_t cvt_rn_f16(float x) {
  const _Float16 h = (_Float16)x;
  uint16_t bits;
  std::memcpy(&bits, &h, 2);
  return bits;
}
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

// Thread and block order, to expose races that one fixed order hides: 0 = index order,
// 1 = blocks and threads reversed, 2 = a fresh pseudo-random permutation of the blocks and of
// the threads in every barrier round. Race-free kernels give identical results under all three.
inline int emu_schedule = 0;
inline std::mt19937 emu_rng{1};

inline std::vector<unsigned> emu_order(unsigned n) {
  std::vector<unsigned> order(n);
  std::iota(order.begin(), order.end(), 0u);
  if (emu_schedule == 1) std::reverse(order.begin(), order.end());
  if (emu_schedule == 2) std::shuffle(order.begin(), order.end(), emu_rng);
  return order;
}

// Run `kernel` over the grid. Per block: start blockDim fibers, then resume them round-robin
// (in emu_order); a fiber runs until its next __syncthreads or its end, so every round is one
// barrier phase.
inline void emu_launch(dim3 grid, dim3 block, const std::function<void()>& kernel) {
  gridDim = grid;
  blockDim = block;
  emu_kernel = &kernel;
  const unsigned n = block.x * block.y * block.z;
  emu_fibers.resize(n);
  for (auto& fiber : emu_fibers) fiber.stack.resize(1 << 16);
  ucontext_t blank;
  getcontext(&blank);
  for (unsigned b : emu_order(grid.x * grid.y)) {
    blockIdx = dim3{b % grid.x, b / grid.x, 1};
    emu_poison_shared();
    for (unsigned t = 0; t < n; ++t) {
      EmuFiber& fiber = emu_fibers[t];
      fiber.started = fiber.done = false;
      fiber.collectives = 0;
      fiber.ctx = blank;
      fiber.ctx.uc_stack.ss_sp = fiber.stack.data();
      fiber.ctx.uc_stack.ss_size = fiber.stack.size();
      makecontext(&fiber.ctx, emu_fiber_main, 0);
    }
    bool running = true;
    while (running) {
      running = false;
      for (unsigned t : emu_order(n)) {
        if (emu_fibers[t].done) continue;
        emu_current = t;
        threadIdx = dim3{t % block.x, (t / block.x) % block.y, t / (block.x * block.y)};
        EmuFiber& fiber = emu_fibers[t];
        if (_setjmp(emu_scheduler_jump) == 0) {
          if (fiber.started) _longjmp(fiber.jump, 1);
          fiber.started = true;
          swapcontext(&emu_scheduler, &fiber.ctx);
        }
        running = true;
      }
    }
  }
}
