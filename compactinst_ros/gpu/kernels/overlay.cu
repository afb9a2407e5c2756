// Colour overlay of an id raster on the camera frame, for ~/overlay when it has subscribers.
// Same pixels as compactinst_ros/overlay.py without the captions: ids map to an index (instance
// ids directly; panoptic ids by binary search in the sorted segment ids), index > 0 blends the
// index's LUT colour (cv2.addWeighted rounding), and foreground pixels whose 4-neighbourhood
// holds another index are outlined white. Output: HxWx3 uint8 RGB. Twin: gpu/twin.py `overlay`.
#include "common.cuh"

using namespace ci;

__device__ __forceinline__ int panoptic_index(int id, const int* __restrict__ sorted_ids, int n) {
  int lo = 0, hi = n;
  while (lo < hi) {
    const int mid = (lo + hi) >> 1;
    if (sorted_ids[mid] < id) {
      lo = mid + 1;
    } else {
      hi = mid;
    }
  }
  return (lo < n && sorted_ids[lo] == id) ? lo + 1 : 0;
}

template <typename Index>
__device__ __forceinline__ void blend(const uint8_t* __restrict__ src, int src_h, int src_w,
                                      int src_step, int encoding, Index index,
                                      const uint8_t* __restrict__ lut, float w_image,
                                      float w_colour, uint8_t* __restrict__ out) {
  const int x = blockIdx.x * blockDim.x + threadIdx.x;
  const int y = blockIdx.y * blockDim.y + threadIdx.y;
  if (x >= src_w || y >= src_h) return;
  const size_t idx = (size_t)y * src_w + x;
  const float3 rgb = fetch_rgb(src + (size_t)y * src_step, x, encoding);
  const int me = index(idx);
  float3 o = rgb;
  if (me != 0) {
    const bool edge = (x > 0 && index(idx - 1) != me) || (x + 1 < src_w && index(idx + 1) != me) ||
                      (y > 0 && index(idx - src_w) != me) ||
                      (y + 1 < src_h && index(idx + src_w) != me);
    if (edge) {
      o = make_float3(255.0f, 255.0f, 255.0f);
    } else {
      const uint8_t* c = lut + 3 * me;
      o = make_float3(__fadd_rn(__fmul_rn(rgb.x, w_image), __fmul_rn(c[0], w_colour)),
                      __fadd_rn(__fmul_rn(rgb.y, w_image), __fmul_rn(c[1], w_colour)),
                      __fadd_rn(__fmul_rn(rgb.z, w_image), __fmul_rn(c[2], w_colour)));
    }
  }
  out[3 * idx] = (uint8_t)min(max(__float2int_rn(o.x), 0), 255);
  out[3 * idx + 1] = (uint8_t)min(max(__float2int_rn(o.y), 0), 255);
  out[3 * idx + 2] = (uint8_t)min(max(__float2int_rn(o.z), 0), 255);
}

struct InstanceIndex {
  const uint16_t* ids;
  int n_lut;
  __device__ int operator()(size_t i) const {
    const int id = ids[i];
    return id < n_lut ? id : 0;
  }
};

struct PanopticIndex {
  const int* ids;
  const int* sorted_ids;
  int n;
  __device__ int operator()(size_t i) const { return panoptic_index(ids[i], sorted_ids, n); }
};

// Instance raster: id i uses LUT row i (rows 0..n_lut-1, row 0 unused).
extern "C" __global__ void ov_instance(const uint8_t* __restrict__ src, int src_h, int src_w,
                                       int src_step, int encoding,
                                       const uint16_t* __restrict__ ids, int n_lut,
                                       const uint8_t* __restrict__ lut, float w_image,
                                       float w_colour, uint8_t* __restrict__ out) {
  blend(src, src_h, src_w, src_step, encoding, InstanceIndex{ids, n_lut}, lut, w_image,
        w_colour, out);
}

// Panoptic raster: segment ids sorted ascending; id sorted_ids[j] uses LUT row j + 1.
extern "C" __global__ void ov_panoptic(const uint8_t* __restrict__ src, int src_h, int src_w,
                                       int src_step, int encoding, const int* __restrict__ ids,
                                       const int* __restrict__ sorted_ids, int n_segments,
                                       const uint8_t* __restrict__ lut, float w_image,
                                       float w_colour, uint8_t* __restrict__ out) {
  blend(src, src_h, src_w, src_step, encoding, PanopticIndex{ids, sorted_ids, n_segments}, lut,
        w_image, w_colour, out);
}
