// Per-instance 3-D from the instance raster and a registered depth image (spatial/lift.py
// `lift_depth`) or a point cloud in the camera's optical frame (`lift_cloud`), on the device,
// step for step. Twin: gpu/lift_twin.py; launcher: gpu/lift.py.
//
// One frame is ten launches on one stream, nothing read back in between:
//   lift_clear          tables and histograms to their start values
//   lift_bounds         depth pixels whose nearest colour pixel (the host's per-row and
//                       per-column index tables, labels_on_grid's) carries a label: how many,
//                       first row and column
//   lift_plan           one thread: lift_depth's stride s (the smallest s >= 1 with
//                       s * s * max_points >= labelled pixels), the erosion radius
//                       ceil(erode_px / s) and the origin of the sampled lattice
//   lift_classify       per lattice pixel: its slot, whether every lattice pixel within the
//                       radius carries the same label (erode_labels' test), valid depth; a code
//                       per depth pixel and the first radix level of the depths
//   lift_select x3      one block per (slot, variant): the bin that holds the nearest-rank
//                       percentile; after the third level the exact float32 depth
//   lift_histogram x2   the next radix level of the points inside the chosen bin
//   lift_accumulate     the inliers' support, float64 sums, min and max
// Every instance is lifted twice at once: from its eroded mask (variant 0) and from its whole
// mask (variant 1), lift_depth's retry of an instance the erosion leaves with too few points; the
// host keeps variant 0 where it has min_points inliers and divides the sums (gpu/lift.py).
//
// A cloud is nine launches: lift_clear, lift_cloud_classify (in place of bounds, plan and
// classify: a point is projected and tested against the raster where it lands, no stride), the
// same lift_select and lift_histogram, lift_cloud_accumulate, and lift_cloud_labels (each
// point's instance id for the labelled cloud). Its points are laid out as an image of
// kCloudRow-point rows, so that lift_histogram reads their depths as it reads a depth image's.
//
// Exactness: the sampling, erosion, depth tests, percentile (a radix select on the float bits,
// positive floats order as their bits) and inlier test are exact, and every point's x and y are
// computed with _depth_points' own float32/float64 roundings. The sums are float64 atomics in
// whatever order the threads run, numpy's bincount adds in point order: the centroid can differ
// from spatial.lift_depth's by the float32 rounding of sum / support (1 ulp; tests allow 1e-6).
#include "common.cuh"

using namespace ci;

constexpr int kLiftBins = 2048;  // first radix level: float bits 30..20; then 19..10 and 9..0
constexpr int kSelectThreads = 256;  // block size of lift_select
constexpr int kIntMax = 0x7fffffff;
constexpr int kCloudRow = 256;  // points per row of a cloud's layout (gpu/constants.py)

// Frame-wide values, in gpu/constants.py LIFT_TABLES_DTYPE's order.
struct LiftFrame {
  int labelled;  // depth pixels with a nonzero label (lift_depth's count_nonzero(grid))
  int min_row, min_col;  // first labelled row and column
  int step, radius;  // lattice stride, erosion radius in lattice pixels
  int row0, col0;  // lattice origin: the instance window's first row and column
  int pad;
};

// One instance in one variant (0: eroded mask, 1: whole mask).
struct LiftSlot {
  double sum[3];  // inliers' x, y, z
  double moment[6];  // inliers' xx, yy, zz, xy, xz, yz (spatial.lift.MOMENT_PAIRS)
  int lo[3], hi[3];  // inliers' box, ordered-int floats (common.cuh float_to_ordered)
  int count;  // points with valid depth
  int rank;  // rank of the percentile among them, then within the chosen bin
  int prefix;  // float bits of the percentile chosen so far (all of them after level 2)
  int support;  // inliers
  float depth;  // the percentile (robust depth); NaN without points
  int pad;
};

struct LiftTables {
  LiftFrame frame;
  LiftSlot slot[2][kMaxQueries];
};

__device__ __forceinline__ int label_at(const uint16_t* __restrict__ raster, int colour_w,
                                        const int* __restrict__ row_src,
                                        const int* __restrict__ col_src, int y, int x) {
  const int r = row_src[y], c = col_src[x];
  return (r < 0 || c < 0) ? 0 : raster[(size_t)r * colour_w + c];
}

// Float bits of a depth as a radix key; -0.0 (a valid depth when min_range_m is 0) as +0.0.
__device__ __forceinline__ int depth_key(float z) { return __float_as_int(z) & kIntMax; }

__device__ __forceinline__ int* bins_of(int* hist, int n, int variant, int slot) {
  return hist + ((size_t)variant * n + slot) * kLiftBins;
}

// A classified point: its code (slot * 2 + interior) and the first radix level of its depth in
// the whole mask's histogram, and in the eroded mask's where it is interior.
__device__ __forceinline__ void classified(int* code, int slot, bool interior, float z, int n,
                                           int* hist) {
  *code = slot * 2 + (interior ? 1 : 0);
  const int bin = depth_key(z) >> 20;
  atomicAdd(bins_of(hist, n, 1, slot) + bin, 1);
  if (interior) atomicAdd(bins_of(hist, n, 0, slot) + bin, 1);
}

// A point of code c with coordinates p: an inlier of each variant whose robust depth it lies
// within max(band_m, band_rel * depth) of (float32, as lift_points) adds to its support, float64
// sums and box.
__device__ __forceinline__ void accumulated(LiftTables* t, int c, const float p[3], float band_m,
                                            float band_rel) {
  for (int variant = c & 1 ? 0 : 1; variant < 2; ++variant) {
    LiftSlot& s = t->slot[variant][c >> 1];
    const float robust = s.depth;
    if (!(fabsf(p[2] - robust) <= fmaxf(band_m, band_rel * robust))) continue;
    atomicAdd(&s.support, 1);
    for (int a = 0; a < 3; ++a) {
      atomicAdd(&s.sum[a], (double)p[a]);
      atomicMin(&s.lo[a], float_to_ordered(p[a]));
      atomicMax(&s.hi[a], float_to_ordered(p[a]));
    }
    const double x = p[0], y = p[1], z = p[2];
    const double products[6] = {x * x, y * y, z * z, x * y, x * z, y * z};
    for (int k = 0; k < 6; ++k) atomicAdd(&s.moment[k], products[k]);
  }
}

extern "C" __global__ void lift_clear(int n_hist, LiftTables* __restrict__ t,
                                      int* __restrict__ hist) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n_hist) hist[i] = 0;
  if (i < 2 * kMaxQueries) {
    LiftSlot& s = t->slot[i / kMaxQueries][i % kMaxQueries];
    for (int a = 0; a < 3; ++a) {
      s.sum[a] = 0.0;
      s.lo[a] = kIntMax;
      s.hi[a] = -kIntMax - 1;
    }
    for (int k = 0; k < 6; ++k) s.moment[k] = 0.0;
    s.count = s.rank = s.prefix = s.support = s.pad = 0;
    s.depth = __int_as_float(0x7fc00000);
  }
  if (i == 0) {
    LiftFrame& f = t->frame;
    f.labelled = f.step = f.radius = f.row0 = f.col0 = f.pad = 0;
    f.min_row = f.min_col = kIntMax;
  }
}

// One thread per depth pixel, 32x8 blocks; a block reduces in shared memory first, so that a
// frame costs one global atomic per block and value, not per pixel.
extern "C" __global__ void lift_bounds(const uint16_t* __restrict__ raster, int colour_w,
                                       const int* __restrict__ row_src,
                                       const int* __restrict__ col_src, int depth_h, int depth_w,
                                       LiftTables* __restrict__ t) {
  __shared__ int count, first_row, first_col;
  const bool leader = threadIdx.x == 0 && threadIdx.y == 0;
  if (leader) {
    count = 0;
    first_row = first_col = kIntMax;
  }
  __syncthreads();
  const int x = blockIdx.x * blockDim.x + threadIdx.x;
  const int y = blockIdx.y * blockDim.y + threadIdx.y;
  if (x < depth_w && y < depth_h && label_at(raster, colour_w, row_src, col_src, y, x) != 0) {
    atomicAdd(&count, 1);
    atomicMin(&first_row, y);
    atomicMin(&first_col, x);
  }
  __syncthreads();
  if (leader && count > 0) {
    atomicAdd(&t->frame.labelled, count);
    atomicMin(&t->frame.min_row, first_row);
    atomicMin(&t->frame.min_col, first_col);
  }
}

// One thread. Integers only: s * s * max_points >= n is ceil(sqrt(n / max_points)) <= s without
// the float rounding (lift_depth's float64 form agrees for any n below 2^40).
extern "C" __global__ void lift_plan(int erode_px, int max_points, LiftTables* __restrict__ t) {
  LiftFrame& f = t->frame;
  int step = 1;
  while ((long long)step * step * max_points < f.labelled) ++step;
  f.step = step;
  f.radius = (erode_px + step - 1) / step;
  f.row0 = max(f.min_row - step, 0);
  f.col0 = max(f.min_col - step, 0);
}

// One thread per depth pixel, 32x8 blocks. code: -1 (no point), else slot * 2 + interior.
// The erosion looks at the lattice pixels within the radius that lie in the image: the same
// answer as erode_labels on the instance window, whose one-lattice-pixel margin of background
// holds the nearest other label of any labelled pixel whose neighbourhood leaves the window.
extern "C" __global__ void lift_classify(const uint16_t* __restrict__ raster, int colour_w,
                                         const int* __restrict__ row_src,
                                         const int* __restrict__ col_src,
                                         const float* __restrict__ depth, int depth_h,
                                         int depth_w, const int* __restrict__ slot_lut, int n_lut,
                                         float min_range, float max_range, int n,
                                         const LiftTables* __restrict__ t,
                                         int* __restrict__ code, int* __restrict__ hist) {
  const int x = blockIdx.x * blockDim.x + threadIdx.x;
  const int y = blockIdx.y * blockDim.y + threadIdx.y;
  if (x >= depth_w || y >= depth_h) return;
  const size_t idx = (size_t)y * depth_w + x;
  code[idx] = -1;
  const LiftFrame& f = t->frame;
  const int step = f.step;
  if (y < f.row0 || x < f.col0 || (y - f.row0) % step != 0 || (x - f.col0) % step != 0) return;
  const int label = label_at(raster, colour_w, row_src, col_src, y, x);
  const int slot = (label > 0 && label < n_lut) ? slot_lut[label] : -1;
  const float z = depth[idx];
  if (slot < 0 || !(z >= min_range && z <= max_range)) return;  // NaN compares false
  bool interior = true;
  for (int dy = -f.radius; dy <= f.radius && interior; ++dy) {
    const int yy = y + dy * step;
    if (yy < 0 || yy >= depth_h) continue;
    for (int dx = -f.radius; dx <= f.radius; ++dx) {
      const int xx = x + dx * step;
      if (xx >= 0 && xx < depth_w &&
          label_at(raster, colour_w, row_src, col_src, yy, xx) != label) {
        interior = false;
        break;
      }
    }
  }
  classified(code + idx, slot, interior, z, n, hist);
}

// Grid (n, 2): one block of kSelectThreads per (slot, variant). Level 0 also counts the points
// and takes the nearest rank, rint(fraction * (count - 1)) in float64 as lift_points does;
// every level leaves its bins zeroed for the next.
extern "C" __global__ void lift_select(int level, int n, double fraction,
                                       LiftTables* __restrict__ t, int* __restrict__ hist) {
  __shared__ int partial[kSelectThreads];
  LiftSlot& s = t->slot[blockIdx.y][blockIdx.x];
  int* bins = bins_of(hist, n, blockIdx.y, blockIdx.x);
  const int per = (level == 0 ? kLiftBins : kLiftBins / 2) / kSelectThreads;
  int sum = 0;
  for (int i = 0; i < per; ++i) sum += bins[threadIdx.x * per + i];
  partial[threadIdx.x] = sum;
  __syncthreads();
  if (threadIdx.x == 0) {
    if (level == 0) {
      int total = 0;
      for (int i = 0; i < kSelectThreads; ++i) total += partial[i];
      s.count = total;
      s.rank = total > 0 ? (int)llrint(fraction * (double)(total - 1)) : 0;
    }
    if (s.count > 0) {
      int rank = s.rank, chunk = 0;
      while (rank >= partial[chunk]) rank -= partial[chunk++];
      int bin = chunk * per;
      while (rank >= bins[bin]) rank -= bins[bin++];
      s.rank = rank;
      s.prefix = level == 0 ? bin : (s.prefix << 10) | bin;
      if (level == 2) s.depth = __int_as_float(s.prefix);
    }
  }
  __syncthreads();
  for (int i = 0; i < per; ++i) bins[threadIdx.x * per + i] = 0;
}

// One thread per depth pixel, 32x8 blocks: level 1 histograms bits 19..10 of the points whose
// bits 30..20 are the chosen bin, level 2 bits 9..0 of those whose bits 30..10 are.
extern "C" __global__ void lift_histogram(int level, const int* __restrict__ code,
                                          const float* __restrict__ depth, int depth_h,
                                          int depth_w, int n, const LiftTables* __restrict__ t,
                                          int* __restrict__ hist) {
  const int x = blockIdx.x * blockDim.x + threadIdx.x;
  const int y = blockIdx.y * blockDim.y + threadIdx.y;
  if (x >= depth_w || y >= depth_h) return;
  const size_t idx = (size_t)y * depth_w + x;
  const int c = code[idx];
  if (c < 0) return;
  const int slot = c >> 1, key = depth_key(depth[idx]);
  const int shift = level == 1 ? 20 : 10;
  const int bin = (key >> (shift - 10)) & 1023;
  for (int variant = c & 1 ? 0 : 1; variant < 2; ++variant) {
    if ((key >> shift) == t->slot[variant][slot].prefix) {
      atomicAdd(bins_of(hist, n, variant, slot) + bin, 1);
    }
  }
}

// One thread per depth pixel, 32x8 blocks. x and y as _depth_points computes them:
// (u * step + (col0 - cx)) in float64 times the float32 z / fx, rounded to float32; the inlier
// band max(band_m, band_rel * depth) and |z - depth| in float32.
extern "C" __global__ void lift_accumulate(const int* __restrict__ code,
                                           const float* __restrict__ depth, int depth_h,
                                           int depth_w, double cx, double cy, float fx, float fy,
                                           float band_m, float band_rel,
                                           LiftTables* __restrict__ t) {
  const int x = blockIdx.x * blockDim.x + threadIdx.x;
  const int y = blockIdx.y * blockDim.y + threadIdx.y;
  if (x >= depth_w || y >= depth_h) return;
  const size_t idx = (size_t)y * depth_w + x;
  const int c = code[idx];
  if (c < 0) return;
  const LiftFrame& f = t->frame;
  const float z = depth[idx];
  const float p[3] = {
      (float)(((double)(x - f.col0) + ((double)f.col0 - cx)) * (double)(z / fx)),
      (float)(((double)(y - f.row0) + ((double)f.row0 - cy)) * (double)(z / fy)),
      z,
  };
  accumulated(t, c, p, band_m, band_rel);
}

// One thread per point of the kCloudRow-wide layout, 32x8 blocks; points past n_points get no
// code. Projection as spatial.project_points computes it in float32 (fx * x / z + cx, each
// operation rounded, then rint), the erosion as spatial.interior: every pixel within the radius,
// clamped to the image, carries the point's label. code and hist as lift_classify writes them;
// z is the point's depth in the layout, for lift_histogram.
extern "C" __global__ void lift_cloud_classify(
    const uint16_t* __restrict__ raster, int colour_w, int colour_h,
    const float* __restrict__ xyz, int n_points, int rows, float fx, float fy, float cx,
    float cy, const int* __restrict__ slot_lut, int n_lut, float min_range, float max_range,
    int radius, int n, int* __restrict__ code, float* __restrict__ z_out,
    int* __restrict__ hist) {
  const int x = blockIdx.x * blockDim.x + threadIdx.x;
  const int y = blockIdx.y * blockDim.y + threadIdx.y;
  if (x >= kCloudRow || y >= rows) return;
  const int p = y * kCloudRow + x;
  code[p] = -1;
  if (p >= n_points) return;
  const float z = xyz[3 * (size_t)p + 2];
  z_out[p] = z;
  if (!(z >= min_range && z <= max_range)) return;  // NaN compares false
  const float u = rintf(__fadd_rn(__fdiv_rn(__fmul_rn(fx, xyz[3 * (size_t)p]), z), cx));
  const float v = rintf(__fadd_rn(__fdiv_rn(__fmul_rn(fy, xyz[3 * (size_t)p + 1]), z), cy));
  // inf and NaN (x / 0 where min_range is 0) fail these too
  if (!(u >= 0.0f && u < (float)colour_w && v >= 0.0f && v < (float)colour_h)) return;
  const int iu = (int)u, iv = (int)v;
  const int label = raster[(size_t)iv * colour_w + iu];
  const int slot = (label > 0 && label < n_lut) ? slot_lut[label] : -1;
  if (slot < 0) return;
  bool interior = true;
  for (int dy = -radius; dy <= radius && interior; ++dy) {
    const size_t row = (size_t)min(max(iv + dy, 0), colour_h - 1) * colour_w;
    for (int dx = -radius; dx <= radius; ++dx) {
      if (raster[row + min(max(iu + dx, 0), colour_w - 1)] != label) {
        interior = false;
        break;
      }
    }
  }
  classified(code + p, slot, interior, z, n, hist);
}

// As lift_accumulate, with each point's own x, y, z.
extern "C" __global__ void lift_cloud_accumulate(const int* __restrict__ code,
                                                 const float* __restrict__ xyz, int rows,
                                                 float band_m, float band_rel,
                                                 LiftTables* __restrict__ t) {
  const int x = blockIdx.x * blockDim.x + threadIdx.x;
  const int y = blockIdx.y * blockDim.y + threadIdx.y;
  if (x >= kCloudRow || y >= rows) return;
  const int p = y * kCloudRow + x;
  const int c = code[p];
  if (c < 0) return;
  accumulated(t, c, xyz + 3 * (size_t)p, band_m, band_rel);
}

// One thread per point of the layout: the instance id (ids: per slot) of the mask the point
// lies in, as lift_cloud labels it: where the instance keeps its eroded mask (min_points
// inliers), only its interior points; where it falls back to its whole mask, all of them.
extern "C" __global__ void lift_cloud_labels(const int* __restrict__ code, int n_points,
                                             int rows, const uint16_t* __restrict__ ids,
                                             int min_points,
                                             const LiftTables* __restrict__ t,
                                             uint16_t* __restrict__ labels) {
  const int x = blockIdx.x * blockDim.x + threadIdx.x;
  const int y = blockIdx.y * blockDim.y + threadIdx.y;
  if (x >= kCloudRow || y >= rows) return;
  const int p = y * kCloudRow + x;
  if (p >= n_points) return;
  const int c = code[p];
  const bool whole = c >= 0 && t->slot[0][c >> 1].support < min_points;
  labels[p] = (c >= 0 && ((c & 1) || whole)) ? ids[c >> 1] : 0;
}
