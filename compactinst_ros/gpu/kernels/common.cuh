// Shared device helpers for the CompactInst kernels (pre-processing, post-processing, overlay).
//
// Every float operation is rounded on its own, as the numpy twin (gpu/twin.py) and the spec
// compute: the images are built with --fmad=false, and the interpolation also spells it out
// with round-to-nearest intrinsics (docs/gpu.md, "Float arithmetic").
#pragma once

#ifdef __CUDACC_RTC__
// NVRTC (which builds the shipped kernel images) has no host headers: the fixed-width types
// the kernels use, as <stdint.h> defines them on every CUDA platform.
typedef unsigned char uint8_t;
typedef unsigned short uint16_t;
#else
#include <stdint.h>
#endif

namespace ci {

// Post-processing capacity: queries per frame and foreground classes. The host checks the
// bundle against these and refuses larger models with a clear message.
constexpr int kMaxQueries = 256;
constexpr int kMaxClasses = 256;
constexpr int kTile = 16;  // camera pixels per tile side = thread block side
constexpr float kBoundEps = 1e-4f;  // footprint bound margin, see gpu/constants.py BOUND_EPS
constexpr float kSemanticVoid = 0.05f;

// Camera image encodings, numbered as in gpu/constants.py ENCODING_CODES.
enum Encoding : int {
  kRGB8 = 0,
  kBGR8 = 1,
  kRGBA8 = 2,
  kBGRA8 = 3,
  kMono8 = 4,
  kUYVY = 5,
  kYUYV = 6,
};

__device__ __forceinline__ float lerp_rn(float a, float b, float w) {
  return __fadd_rn(a, __fmul_rn(__fsub_rn(b, a), w));
}

// +inf without <math.h>'s INFINITY, which NVRTC lacks.
__device__ __forceinline__ float infinity() { return __int_as_float(0x7f800000); }

#ifdef __CUDACC__
// float -> binary16 bits, to nearest even (PTX cvt.rn.f16.f32): what a Cast to FP16 writes in
// TensorRT and ONNX Runtime. The instruction itself, as NVRTC has no cuda_fp16.h without the
// toolkit's include folder; the CPU emulator (test/gpu/emu/cuda_emu.h) defines its own.
__device__ __forceinline__ uint16_t cvt_rn_f16(float x) {
  uint16_t h;
  asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(x));
  return h;
}
#endif

__device__ __forceinline__ float sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }

// Bilinear taps of one camera pixel, precomputed per axis on the host (float64 positions,
// identical to postprocess.resample.bilinear_taps) and uploaded once per frame geometry.
struct Taps {
  int y0, y1, x0, x1;
  float wy, wx;
};

__device__ __forceinline__ Taps load_taps(const int* __restrict__ row_i0,
                                          const int* __restrict__ row_i1,
                                          const float* __restrict__ row_w,
                                          const int* __restrict__ col_i0,
                                          const int* __restrict__ col_i1,
                                          const float* __restrict__ col_w, int y, int x) {
  Taps t;
  t.y0 = __ldg(row_i0 + y);
  t.y1 = __ldg(row_i1 + y);
  t.wy = __ldg(row_w + y);
  t.x0 = __ldg(col_i0 + x);
  t.x1 = __ldg(col_i1 + x);
  t.wx = __ldg(col_w + x);
  return t;
}

// Rows first, then columns: the reference's Resampler.sample order.
__device__ __forceinline__ float sample(const float* __restrict__ grid, int w, const Taps& t) {
  const float* r0 = grid + t.y0 * w;
  const float* r1 = grid + t.y1 * w;
  float left = lerp_rn(__ldg(r0 + t.x0), __ldg(r1 + t.x0), t.wy);
  float right = lerp_rn(__ldg(r0 + t.x1), __ldg(r1 + t.x1), t.wy);
  return lerp_rn(left, right, t.wx);
}

// Order-preserving float <-> int mapping so atomicMax on int gives the float maximum.
__device__ __forceinline__ int float_to_ordered(float f) {
  int i = __float_as_int(f);
  return i >= 0 ? i : i ^ 0x7FFFFFFF;
}

__device__ __forceinline__ float ordered_to_float(int i) {
  return __int_as_float(i >= 0 ? i : i ^ 0x7FFFFFFF);
}

// One camera pixel as RGB floats 0..255 from any supported encoding (BT.601 video range for
// YUV 4:2:2, OpenCV's coefficients). `row` points at the start of the pixel's image row.
__device__ __forceinline__ float3 fetch_rgb(const uint8_t* __restrict__ row, int x, int enc) {
  switch (enc) {
    case kRGB8:
    case kBGR8:
    case kRGBA8:
    case kBGRA8: {  // packed 3- or 4-byte pixels, red first or blue first (alpha ignored)
      const uint8_t* p = row + (enc >= kRGBA8 ? 4 : 3) * x;
      const int red = (enc == kBGR8 || enc == kBGRA8) ? 2 : 0;
      return make_float3(p[red], p[1], p[2 - red]);
    }
    case kMono8: {
      float v = row[x];
      return make_float3(v, v, v);
    }
    default: {
      const uint8_t* p = row + 4 * (x >> 1);
      int odd = x & 1;
      float yy, u, v;
      if (enc == kUYVY) {
        u = p[0];
        yy = p[1 + 2 * odd];
        v = p[2];
      } else {
        yy = p[2 * odd];
        u = p[1];
        v = p[3];
      }
      float luma = fmaxf(yy - 16.0f, 0.0f) * 1.164f;
      u -= 128.0f;
      v -= 128.0f;
      float r = luma + 1.596f * v;
      float g = luma - 0.813f * v - 0.391f * u;
      float b = luma + 2.018f * u;
      return make_float3(fminf(fmaxf(r, 0.0f), 255.0f), fminf(fmaxf(g, 0.0f), 255.0f),
                         fminf(fmaxf(b, 0.0f), 255.0f));
    }
  }
}

}  // namespace ci
