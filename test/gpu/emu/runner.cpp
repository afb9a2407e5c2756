// Test-only: runs the real kernel sources on the CPU emulator, in the same order and with the
// same launch shapes as the launchers in compactinst_ros/gpu (emu_postprocess and friends), or
// launched by that host code itself through pycuda_emu.py (emu_launch_packed). Built by
// pycuda_emu.build_library.
#include "cuda_emu.h"

#include <stdexcept>
#include <string_view>
#include <tuple>

#include "postprocess.cu"
#include "preprocess.cu"
#include "overlay.cu"
#include "lift.cu"

static unsigned cdiv(int a, int b) { return (unsigned)((a + b - 1) / b); }

extern "C" size_t emu_tables_size() { return sizeof(PPTables); }

extern "C" void emu_set_schedule(int mode, unsigned seed) {
  emu_schedule = mode;
  emu_rng.seed(seed);
}

extern "C" void emu_postprocess(const float* cls, const float* masks, int q, int k1, int h, int w,
                                const uint8_t* isthing, const int* label_ids, int vh, int vw,
                                float threshold, float score_thr, float obj_thr, int max_inst,
                                double overlap, int min_area, int src_h, int src_w,
                                const int* ri0,
                                const int* ri1, const float* rw, const int* ci0, const int* ci1,
                                const float* cw, int want, void* tables_out, uint16_t* inst,
                                int* pan, void* sem_out, int sem_u16) {
  PPTables* t = static_cast<PPTables*>(tables_out);
  t->stats_done = t->tiles_done = 0;  // as the host's one zeroing of a new arena
  const int k = k1 - 1, hw = h * w;
  std::vector<float> prob((size_t)q * k1), sem((size_t)std::max(1, k) * hw);
  const int sem_cols = (int)cdiv(hw, kBlock);
  const unsigned sem_blocks = (want & kWantSemantic) ? sem_cols * cdiv(k, kSemChunk) : 0;
  emu_launch({(unsigned)q + sem_blocks, 1, 1}, {kBlock, 1, 1}, [&] {
    pp_stats(masks, cls, q, k1, h, w, vh, vw, threshold, isthing, score_thr, obj_thr, max_inst,
             sem_cols, prob.data(), sem.data(), t);
  });
  emu_launch({cdiv(src_w, kTile), cdiv(src_h, kTile), 1}, {kTile, kTile, 1}, [&] {
    pp_tiles(want, masks, sem.data(), h, w, k, src_h, src_w, ri0, ri1, rw, ci0, ci1, cw,
             threshold, label_ids, isthing, overlap, min_area, t, inst, pan, sem_out, sem_u16);
  });
  if (want & (kWantInstance | kWantPanoptic)) {
    const int n = src_h * src_w;
    emu_launch({cdiv(cdiv(n, kRemapPixels), kBlock), 1, 1}, {kBlock, 1, 1},
               [&] { pp_remap(want, n, t, inst, pan); });
  }
}

extern "C" void emu_preprocess(const uint8_t* src, int src_h, int src_w, int step, int enc,
                               int rh, int rw, float sy, float sx, float pr, float pg, float pb,
                               int in_h, int in_w, float* dst) {
  emu_launch({cdiv(in_w, 32), cdiv(in_h, 8), 1}, {32, 8, 1}, [&] {
    pre_letterbox(src, src_h, src_w, step, enc, rh, rw, sy, sx, pr, pg, pb, in_h, in_w, dst);
  });
}

extern "C" void emu_preprocess_half(const uint8_t* src, int src_h, int src_w, int step, int enc,
                                    int rh, int rw, float sy, float sx, float pr, float pg,
                                    float pb, int in_h, int in_w, uint16_t* dst) {
  emu_launch({cdiv(in_w, 32), cdiv(in_h, 8), 1}, {32, 8, 1}, [&] {
    pre_letterbox_half(src, src_h, src_w, step, enc, rh, rw, sy, sx, pr, pg, pb, in_h, in_w,
                       dst);
  });
}

// binary16 bits of each of n floats, as the device's cvt.rn.f16.f32 (cuda_emu.h cvt_rn_f16).
extern "C" void emu_to_half(const float* x, size_t n, uint16_t* out) {
  for (size_t i = 0; i < n; ++i) out[i] = cvt_rn_f16(x[i]);
}

extern "C" void emu_overlay(const uint8_t* src, int h, int w, int step, int enc,
                            const void* ids, const int* sorted_ids, int n_sorted,
                            const uint8_t* lut, int n_lut, float wi, float wc, uint8_t* out) {
  emu_launch({cdiv(w, 32), cdiv(h, 8), 1}, {32, 8, 1}, [&] {
    if (sorted_ids == nullptr) {
      ov_instance(src, h, w, step, enc, static_cast<const uint16_t*>(ids), n_lut, lut, wi, wc, out);
    } else {
      ov_panoptic(src, h, w, step, enc, static_cast<const int*>(ids), sorted_ids, n_sorted, lut,
                  wi, wc, out);
    }
  });
}

// pycuda's launch path, for test/gpu/emu/pycuda_emu.py: prepared_async_call packs the arguments
// with struct.pack(<prepare string>) (native alignment) and CUDA reads that parameter buffer
// through the kernel's own signature; emu_read does the same with each C++ parameter type.
template <typename T>
static T emu_read(const char* buf, size_t& offset) {
  offset = (offset + alignof(T) - 1) / alignof(T) * alignof(T);
  T value;
  std::memcpy(&value, buf + offset, sizeof(T));
  offset += sizeof(T);
  return value;
}

template <typename... A>
static void emu_call_packed(void (*kernel)(A...), dim3 grid, dim3 block, const char* buf,
                            size_t size) {
  size_t offset = 0;
  std::tuple<A...> args{emu_read<A>(buf, offset)...};  // braced init: evaluated in order
  if (offset != size) throw std::runtime_error("parameter buffer size != kernel signature");
  emu_launch(grid, block, [&] { std::apply(kernel, args); });
}

// 0: launched; 1: unknown kernel; 2: the buffer does not match the kernel's parameters.
extern "C" int emu_launch_packed(const char* name, unsigned gx, unsigned gy, unsigned bx,
                                 unsigned by, unsigned bz, const char* buf, size_t size) {
  const dim3 grid{gx, gy, 1}, block{bx, by, bz};
  const std::string_view kernel(name);
  try {
    if (kernel == "pp_stats") emu_call_packed(pp_stats, grid, block, buf, size);
    else if (kernel == "pp_tiles") emu_call_packed(pp_tiles, grid, block, buf, size);
    else if (kernel == "pp_remap") emu_call_packed(pp_remap, grid, block, buf, size);
    else if (kernel == "pre_letterbox") emu_call_packed(pre_letterbox, grid, block, buf, size);
    else if (kernel == "pre_letterbox_half")
      emu_call_packed(pre_letterbox_half, grid, block, buf, size);
    else if (kernel == "ov_instance") emu_call_packed(ov_instance, grid, block, buf, size);
    else if (kernel == "ov_panoptic") emu_call_packed(ov_panoptic, grid, block, buf, size);
    else if (kernel == "lift_clear") emu_call_packed(lift_clear, grid, block, buf, size);
    else if (kernel == "lift_bounds") emu_call_packed(lift_bounds, grid, block, buf, size);
    else if (kernel == "lift_plan") emu_call_packed(lift_plan, grid, block, buf, size);
    else if (kernel == "lift_classify") emu_call_packed(lift_classify, grid, block, buf, size);
    else if (kernel == "lift_select") emu_call_packed(lift_select, grid, block, buf, size);
    else if (kernel == "lift_histogram") emu_call_packed(lift_histogram, grid, block, buf, size);
    else if (kernel == "lift_accumulate") emu_call_packed(lift_accumulate, grid, block, buf, size);
    else if (kernel == "lift_cloud_classify")
      emu_call_packed(lift_cloud_classify, grid, block, buf, size);
    else if (kernel == "lift_cloud_accumulate")
      emu_call_packed(lift_cloud_accumulate, grid, block, buf, size);
    else if (kernel == "lift_cloud_labels")
      emu_call_packed(lift_cloud_labels, grid, block, buf, size);
    else return 1;
  } catch (const std::runtime_error&) {
    return 2;
  }
  return 0;
}
