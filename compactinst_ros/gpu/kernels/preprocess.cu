// Camera image -> encoder input in one kernel: colour conversion, letterbox bilinear resize
// (OpenCV INTER_LINEAR geometry, half-pixel centres), mean-colour padding, NCHW RGB 0..255
// (normalisation lives inside the encoder graph), as float32 or, for the FP16 engines, which
// take the image in half, as float16 rounded to nearest even (what the Cast those graphs had at
// their input did). The raw frame is uploaded once, in its own encoding; numpy twin:
// gpu/twin.py `letterbox`.
#include "common.cuh"

using namespace ci;

__device__ __forceinline__ void store(float* __restrict__ dst, size_t i, float v) { dst[i] = v; }
__device__ __forceinline__ void store(uint16_t* __restrict__ dst, size_t i, float v) {
  dst[i] = cvt_rn_f16(v);
}

// One thread per model-input pixel. The image sits at the top-left (resized_h x resized_w);
// the rest is padding. `scale_y/scale_x` = src / resized, as OpenCV's inverse scale. Every value
// is computed in float; only the store differs between the two element types.
template <typename T>
__device__ __forceinline__ void letterbox(const uint8_t* __restrict__ src, int src_h, int src_w,
                                          int src_step, int encoding, int resized_h,
                                          int resized_w, float scale_y, float scale_x,
                                          float pad_r, float pad_g, float pad_b, int input_h,
                                          int input_w, T* __restrict__ dst) {
  const int x = blockIdx.x * blockDim.x + threadIdx.x;
  const int y = blockIdx.y * blockDim.y + threadIdx.y;
  if (x >= input_w || y >= input_h) return;
  const size_t plane = (size_t)input_h * input_w;
  const size_t idx = (size_t)y * input_w + x;
  if (x >= resized_w || y >= resized_h) {
    store(dst, idx, pad_r);
    store(dst, plane + idx, pad_g);
    store(dst, 2 * plane + idx, pad_b);
    return;
  }
  float3 rgb;
  if (resized_h == src_h && resized_w == src_w) {
    rgb = fetch_rgb(src + (size_t)y * src_step, x, encoding);
  } else {
    // OpenCV: f = (d + 0.5) * scale - 0.5, i = floor(f); below 0 -> (0, 0); at or past the last
    // texel -> (last, 0).
    float fy = (y + 0.5f) * scale_y - 0.5f;
    float fx = (x + 0.5f) * scale_x - 0.5f;
    int y0 = (int)floorf(fy), x0 = (int)floorf(fx);
    fy -= y0;
    fx -= x0;
    if (y0 < 0) {
      y0 = 0;
      fy = 0.0f;
    }
    if (x0 < 0) {
      x0 = 0;
      fx = 0.0f;
    }
    if (y0 >= src_h - 1) {
      y0 = src_h - 1;
      fy = 0.0f;
    }
    if (x0 >= src_w - 1) {
      x0 = src_w - 1;
      fx = 0.0f;
    }
    const int y1 = min(y0 + 1, src_h - 1), x1 = min(x0 + 1, src_w - 1);
    const uint8_t* r0 = src + (size_t)y0 * src_step;
    const uint8_t* r1 = src + (size_t)y1 * src_step;
    const float3 a = fetch_rgb(r0, x0, encoding), b = fetch_rgb(r0, x1, encoding);
    const float3 c = fetch_rgb(r1, x0, encoding), d = fetch_rgb(r1, x1, encoding);
    const float wa = (1.0f - fx) * (1.0f - fy), wb = fx * (1.0f - fy);
    const float wc = (1.0f - fx) * fy, wd = fx * fy;
    rgb = make_float3(wa * a.x + wb * b.x + wc * c.x + wd * d.x,
                      wa * a.y + wb * b.y + wc * c.y + wd * d.y,
                      wa * a.z + wb * b.z + wc * c.z + wd * d.z);
  }
  store(dst, idx, rgb.x);
  store(dst, plane + idx, rgb.y);
  store(dst, 2 * plane + idx, rgb.z);
}

extern "C" __global__ void pre_letterbox(const uint8_t* __restrict__ src, int src_h, int src_w,
                                         int src_step, int encoding, int resized_h,
                                         int resized_w, float scale_y, float scale_x,
                                         float pad_r, float pad_g, float pad_b, int input_h,
                                         int input_w, float* __restrict__ dst) {
  letterbox(src, src_h, src_w, src_step, encoding, resized_h, resized_w, scale_y, scale_x, pad_r,
            pad_g, pad_b, input_h, input_w, dst);
}

// The same, for an encoder that takes the image in half: binary16 bits.
extern "C" __global__ void pre_letterbox_half(const uint8_t* __restrict__ src, int src_h,
                                              int src_w, int src_step, int encoding,
                                              int resized_h, int resized_w, float scale_y,
                                              float scale_x, float pad_r, float pad_g,
                                              float pad_b, int input_h, int input_w,
                                              uint16_t* __restrict__ dst) {
  letterbox(src, src_h, src_w, src_step, encoding, resized_h, resized_w, scale_y, scale_x, pad_r,
            pad_g, pad_b, input_h, input_w, dst);
}
