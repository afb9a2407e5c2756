// Colour overlay of an id raster on the camera frame, run only when ~/overlay has subscribers.
// Same look as compactinst_ros/overlay.py: palette blend of non-zero ids, and an outline on the
// pixels whose 4-neighbourhood holds another id. Output: HxWx3 uint8 RGB.
#include "common.cuh"

using namespace ci;

template <typename Id>
__device__ __forceinline__ void blend(const uint8_t* __restrict__ src, int src_h, int src_w,
                                      int src_step, int encoding, const Id* __restrict__ ids,
                                      const uint8_t* __restrict__ palette, int palette_size,
                                      float alpha, uint8_t* __restrict__ out) {
  const int x = blockIdx.x * blockDim.x + threadIdx.x;
  const int y = blockIdx.y * blockDim.y + threadIdx.y;
  if (x >= src_w || y >= src_h) return;
  const size_t idx = (size_t)y * src_w + x;
  const float3 rgb = fetch_rgb(src + (size_t)y * src_step, x, encoding);
  const long long id = (long long)ids[idx];
  float3 o = rgb;
  if (id != 0) {
    const int p = (int)(id % palette_size);
    const uint8_t* colour = palette + 3 * p;
    bool edge = (x > 0 && ids[idx - 1] != ids[idx]) || (x + 1 < src_w && ids[idx + 1] != ids[idx]) ||
                (y > 0 && ids[idx - src_w] != ids[idx]) ||
                (y + 1 < src_h && ids[idx + src_w] != ids[idx]);
    if (edge) {
      o = make_float3(255.0f, 255.0f, 255.0f);
    } else {
      o = make_float3((1.0f - alpha) * rgb.x + alpha * colour[0],
                      (1.0f - alpha) * rgb.y + alpha * colour[1],
                      (1.0f - alpha) * rgb.z + alpha * colour[2]);
    }
  }
  out[3 * idx] = (uint8_t)__float2int_rn(o.x);
  out[3 * idx + 1] = (uint8_t)__float2int_rn(o.y);
  out[3 * idx + 2] = (uint8_t)__float2int_rn(o.z);
}

extern "C" __global__ void ov_blend_u16(const uint8_t* __restrict__ src, int src_h, int src_w,
                                        int src_step, int encoding,
                                        const uint16_t* __restrict__ ids,
                                        const uint8_t* __restrict__ palette, int palette_size,
                                        float alpha, uint8_t* __restrict__ out) {
  blend(src, src_h, src_w, src_step, encoding, ids, palette, palette_size, alpha, out);
}

extern "C" __global__ void ov_blend_i32(const uint8_t* __restrict__ src, int src_h, int src_w,
                                        int src_step, int encoding, const int* __restrict__ ids,
                                        const uint8_t* __restrict__ palette, int palette_size,
                                        float alpha, uint8_t* __restrict__ out) {
  blend(src, src_h, src_w, src_step, encoding, ids, palette, palette_size, alpha, out);
}
