// Fused post-processing of CompactInst decoder outputs at camera resolution.
//
// Three launches per frame on one stream (no host round trip; the numpy twin gpu/twin.py runs
// the same algorithm step for step and is what CI checks against the numpy reference):
//   pp_stats   blocks 0..Q-1: a query's mask score over the valid low-res region; the last of
//              them to finish (a counter in PPTables) runs the selection: softmax, instance /
//              panoptic tables, zeroed counters. Blocks Q.. (semantic only): S[c] = sum_q p[q,c]
//              * sigmoid(m_q) at low resolution, each with its own softmax of the class logits
//   pp_tiles   one block per 16x16 camera tile: per-tile culling of queries/classes that cannot
//              matter in the tile, then per pixel winners, written once: the final semantic
//              label, the instance slot and the panoptic slot (provisional); areas, boxes and
//              the panoptic overlap counts accumulate in shared memory, one atomic per warp and
//              slot (warp votes), then one global atomic per block and slot. The last block to
//              finish runs the finalisation: instance renumbering LUT, overlap test, stuff
//              merge, segment ids
//   pp_remap   the provisional instance and panoptic rasters through the LUTs, in place, eight
//              pixels a thread with 16-byte loads and stores
// The same arithmetic as the six launches this replaced (docs/gpu.md), so the same bits.
#include "common.cuh"

using namespace ci;

// Device-side tables; the host mirrors this layout with a numpy structured dtype
// (gpu/constants.py TABLES_DTYPE). Only 4-byte fields: no padding.
struct PPTables {
  int n_inst;      // kept instance slots (score order)
  int n_pan;       // kept panoptic slots (query order)
  int n_inst_out;  // instances with at least one pixel
  int n_seg;       // panoptic segments
  // blocks of pp_stats' query part / of pp_tiles that are through: the last one runs the
  // selection / finalisation and sets it back to 0 for the next frame (the host zeroes the
  // tables once when it allocates them)
  unsigned int stats_done;
  unsigned int tiles_done;
  float mask_score[kMaxQueries];
  int inst_query[kMaxQueries];
  int inst_class[kMaxQueries];
  float inst_score[kMaxQueries];
  int pan_query[kMaxQueries];
  int pan_class[kMaxQueries];
  float pan_score[kMaxQueries];
  unsigned int inst_area[kMaxQueries];
  int inst_box[kMaxQueries][4];  // x0, y0, x1, y1 inclusive
  unsigned int wins[kMaxQueries];
  unsigned int orig[kMaxQueries];
  unsigned int seg[kMaxQueries];
  int inst_lut[kMaxQueries + 1];  // slot + 1 -> output id (0 = dropped)
  int pan_lut[kMaxQueries];       // slot -> segment id (0 = dropped)
  int out_slot[kMaxQueries];      // output instance i -> slot
  int seg_id[kMaxQueries];
  int seg_class[kMaxQueries];
  float seg_score[kMaxQueries];
  unsigned int seg_area[kMaxQueries];
};

// pp_tiles' candidate judging and scans give thread tid query/class tid: one per thread; its
// finalisation gives thread tid slot tid.
static_assert(kTile * kTile == kMaxQueries && kMaxClasses == kMaxQueries,
              "pp_tiles needs one thread per query slot and per class");

// Threads of pp_stats and pp_remap blocks.
constexpr int kBlock = 256;
// Every lane of a warp, for the votes and shuffles (all threads of a block call them).
constexpr unsigned int kFullWarp = 0xFFFFFFFFu;
// pp_tiles blocks an SM is to hold at once, which caps the kernel's registers: five of 256
// threads leave 51 a thread of an SM's 65536 (the compiler then needs no spill); sm_75 holds at
// most 1024 threads an SM, four blocks.
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
constexpr int kTileBlocksPerSm = 5;
#else
constexpr int kTileBlocksPerSm = 4;
#endif
// Thing-pair probabilities the selection ranks from shared memory (32 kB); larger Q x K read
// prob.
constexpr int kSelectPairs = 8192;
// Classes per semantic block of pp_stats.
constexpr int kSemChunk = 32;
// Camera pixels per pp_remap thread: one 16-byte access of the instance raster (uint16).
constexpr int kRemapPixels = 8;

// Whether this block is the last of `blocks` to arrive at `counter` (called by all threads
// after the block's results are written; the fences order those writes before the count and
// the last block's reads after it, as CUDA's threadFenceReduction sample does).
__device__ __forceinline__ bool last_block_done(unsigned int* counter, unsigned int blocks,
                                                int* s_last) {
  __syncthreads();
  if (threadIdx.x == 0 && threadIdx.y == 0) {
    __threadfence();
    *s_last = atomicAdd(counter, 1u) == blocks - 1;
  }
  __syncthreads();
  if (*s_last) __threadfence();
  return *s_last;
}

enum Want : int { kWantInstance = 1, kWantPanoptic = 2, kWantSemantic = 4 };

// Shared memory of pp_stats' three kinds of block, one union: together they would pass the
// 48 kB a block may declare.
struct StatsShared {
  float sum[kBlock];
  float cnt[kBlock];
};
struct SelectShared {
  float best_p[kMaxQueries];
  int best_c[kMaxQueries];
  float score[kMaxQueries];
  int keep[kMaxQueries];
  int pan[kMaxQueries];
  float pan_score[kMaxQueries];
  int pan_class[kMaxQueries];
  int n_keep;
  float thing_p[kSelectPairs];  // p of thing pairs (-1 for stuff), q * K + c
};
struct SemanticShared {
  float p[kMaxQueries][kSemChunk];
  float max[kMaxQueries];
  float total[kMaxQueries];
};
union StatsStage {
  StatsShared stats;
  SelectShared select;
  SemanticShared semantic;
};

// The softmax of one query's class logits is expf(row[c] - max) / total with these two, summed
// in class order: the selection and every semantic block compute it alike, to the bit.
__device__ __forceinline__ void softmax_terms(const float* __restrict__ row, int k1, float* max,
                                              float* total) {
  float mx = row[0];
  for (int c = 1; c < k1; ++c) mx = fmaxf(mx, row[c]);
  float sum = 0.0f;
  for (int c = 0; c < k1; ++c) sum += expf(row[c] - mx);
  *max = mx;
  *total = sum;
}

// Mask score of query q: mean sigmoid over the valid region where the logit passes threshold
// (a float32 tree sum over the block's threads).
__device__ void query_stats(const float* __restrict__ masks, int q, int h, int w, int vh,
                            int vw, float threshold, StatsShared& sh, PPTables* tables) {
  const float* grid = masks + (size_t)q * h * w;
  float sum = 0.0f, cnt = 0.0f;
  // texel i = row * vw + col of the valid region, i = tid, tid + blockDim.x, ...: the row and
  // column advance by constant steps (one divide per thread, none per texel)
  const int cols = max(vw, 1);  // an empty region runs no step
  const int row_step = blockDim.x / cols, col_step = blockDim.x % cols;
  int row = threadIdx.x / cols, col = threadIdx.x % cols;
  for (int i = threadIdx.x; i < vh * vw; i += blockDim.x) {
    float m = __ldg(grid + row * w + col);
    if (m > threshold) {
      sum += sigmoid(m);
      cnt += 1.0f;
    }
    row += row_step;
    col += col_step;
    if (col >= vw) {
      col -= vw;
      ++row;
    }
  }
  sh.sum[threadIdx.x] = sum;
  sh.cnt[threadIdx.x] = cnt;
  __syncthreads();
  for (unsigned int stride = blockDim.x / 2; stride > 0; stride >>= 1) {
    if (threadIdx.x < stride) {
      sh.sum[threadIdx.x] += sh.sum[threadIdx.x + stride];
      sh.cnt[threadIdx.x] += sh.cnt[threadIdx.x + stride];
    }
    __syncthreads();
  }
  if (threadIdx.x == 0) tables->mask_score[q] = sh.sum[0] / (sh.cnt[0] + 1e-6f);
}

// The selection, by one block of kBlock threads looping over queries: softmax into `prob`
// (Q, K+1), the instance and panoptic tables, and the pp_tiles counters zeroed. The mask scores
// come from the other blocks of this launch: read past L1.
__device__ void select_queries(const float* __restrict__ class_logits, int nq, int k1,
                               const uint8_t* __restrict__ isthing, float score_threshold,
                               float object_threshold, int max_instances,
                               float* __restrict__ prob, SelectShared& sh, PPTables* tables) {
  const int k = k1 - 1;
  const bool pairs_in_shared = nq * k <= kSelectPairs;
  if (threadIdx.x == 0) sh.n_keep = 0;
  for (int q = threadIdx.x; q < nq; q += blockDim.x) {
    const float* row = class_logits + (size_t)q * k1;
    float mx, total;
    softmax_terms(row, k1, &mx, &total);
    float best_all = -1.0f, best_p = -1.0f;
    int arg_all = 0, arg_thing = -1;
    for (int c = 0; c < k1; ++c) {
      float p = expf(row[c] - mx) / total;
      prob[(size_t)q * k1 + c] = p;
      if (p > best_all) {
        best_all = p;
        arg_all = c;
      }
      if (c < k && isthing[c] && p > best_p) {
        best_p = p;
        arg_thing = c;
      }
    }
    sh.best_p[q] = best_p;
    sh.best_c[q] = arg_thing;
    sh.pan[q] = (arg_all != k && best_all > object_threshold) ? 1 : 0;
    sh.pan_class[q] = arg_all;
    sh.pan_score[q] = best_all;
  }
  __syncthreads();
  if (pairs_in_shared) {
    for (int i = threadIdx.x; i < nq * k; i += blockDim.x) {
      const int c = i % k;
      sh.thing_p[i] = isthing[c] ? prob[(size_t)(i / k) * k1 + c] : -1.0f;
    }
  }
  __syncthreads();
  // A query qualifies when its best thing pair ranks inside the top max_instances pairs
  // (descending p, ties by flat index q * K + c).
  for (int q = threadIdx.x; q < nq; q += blockDim.x) {
    int keep = 0;
    float score = 0.0f;
    if (sh.best_c[q] >= 0) {
      const float bp = sh.best_p[q];
      const int own = q * k + sh.best_c[q];
      int rank = 0;
      for (int i = 0; i < nq * k && rank < max_instances; ++i) {
        const float p = pairs_in_shared ? sh.thing_p[i]
                                        : (isthing[i % k] ? prob[(size_t)(i / k) * k1 + i % k]
                                                          : -1.0f);
        rank += (p > bp) || (p == bp && i < own);
      }
      score = bp * __ldcg(&tables->mask_score[q]);
      keep = rank < max_instances && score >= score_threshold;
    }
    sh.score[q] = score;
    sh.keep[q] = keep;
    if (keep) atomicAdd(&sh.n_keep, 1);
  }
  __syncthreads();
  for (int q = threadIdx.x; q < nq; q += blockDim.x) {
    if (!sh.keep[q]) continue;
    int rank = 0;
    for (int q2 = 0; q2 < nq; ++q2) {
      rank += sh.keep[q2] && (sh.score[q2] > sh.score[q] || (sh.score[q2] == sh.score[q] && q2 < q));
    }
    if (rank < max_instances) {
      tables->inst_query[rank] = q;
      tables->inst_class[rank] = sh.best_c[q];
      tables->inst_score[rank] = sh.score[q];
    }
  }
  // Panoptic compaction in query order.
  for (int q = threadIdx.x; q < nq; q += blockDim.x) {
    if (!sh.pan[q]) continue;
    int pos = 0;
    for (int q2 = 0; q2 < q; ++q2) pos += sh.pan[q2];
    tables->pan_query[pos] = q;
    tables->pan_class[pos] = sh.pan_class[q];
    tables->pan_score[pos] = sh.pan_score[q];
  }
  for (int q = threadIdx.x; q < kMaxQueries; q += blockDim.x) {
    tables->inst_area[q] = 0;
    tables->inst_box[q][0] = 0x7FFFFFFF;
    tables->inst_box[q][1] = 0x7FFFFFFF;
    tables->inst_box[q][2] = -1;
    tables->inst_box[q][3] = -1;
    tables->wins[q] = 0;
    tables->orig[q] = 0;
    tables->seg[q] = 0;
  }
  if (threadIdx.x == 0) {
    int n_pan = 0;
    for (int q = 0; q < nq; ++q) n_pan += sh.pan[q];
    tables->n_pan = n_pan;
    tables->n_inst = min(sh.n_keep, max_instances);
  }
}

// S[c, t] = sum_q p[q, c] * sigmoid(m[q, t]) for the kSemChunk classes of block row `row` and
// the kBlock texels of block column `col`, one texel per thread. Each logit is read and passed
// through the sigmoid once per class chunk (once in all for K <= 32).
__device__ void semantic_low(const float* __restrict__ masks,
                             const float* __restrict__ class_logits, int nq, int k1, int hw,
                             int col, int row, SemanticShared& sh, float* __restrict__ sem) {
  const int c0 = row * kSemChunk;
  const int nc = min(kSemChunk, k1 - 1 - c0);
  for (int q = threadIdx.x; q < nq; q += blockDim.x) {
    softmax_terms(class_logits + (size_t)q * k1, k1, &sh.max[q], &sh.total[q]);
  }
  __syncthreads();
  for (int i = threadIdx.x; i < nq * kSemChunk; i += blockDim.x) {
    const int q = i / kSemChunk, c = i % kSemChunk;
    sh.p[q][c] = c < nc ? expf(class_logits[(size_t)q * k1 + c0 + c] - sh.max[q]) / sh.total[q]
                        : 0.0f;
  }
  __syncthreads();
  const int t = col * blockDim.x + threadIdx.x;
  if (t >= hw) return;
  float acc[kSemChunk];
#pragma unroll
  for (int c = 0; c < kSemChunk; ++c) acc[c] = 0.0f;
  for (int q = 0; q < nq; ++q) {
    const float s = sigmoid(__ldg(masks + (size_t)q * hw + t));
#pragma unroll
    for (int c = 0; c < kSemChunk; ++c) acc[c] += sh.p[q][c] * s;
  }
#pragma unroll
  for (int c = 0; c < kSemChunk; ++c) {
    if (c < nc) sem[(size_t)(c0 + c) * hw + t] = acc[c];
  }
}

// Launch 1 of 3, kBlock threads a block: blocks 0..nq-1 the query statistics (and the last of
// them the selection), blocks nq.. the semantic map, sem_cols blocks per class chunk (the host
// launches those only when the semantic raster is asked for).
extern "C" __global__ void pp_stats(const float* __restrict__ masks,
                                    const float* __restrict__ class_logits, int nq, int k1, int h,
                                    int w, int vh, int vw, float threshold,
                                    const uint8_t* __restrict__ isthing, float score_threshold,
                                    float object_threshold, int max_instances, int sem_cols,
                                    float* __restrict__ prob, float* __restrict__ sem,
                                    PPTables* tables) {
  __shared__ StatsStage sh;
  __shared__ int s_last;
  const int block = blockIdx.x;
  if (block >= nq) {
    const int b = block - nq;
    semantic_low(masks, class_logits, nq, k1, h * w, b % sem_cols, b / sem_cols, sh.semantic,
                 sem);
    return;
  }
  query_stats(masks, block, h, w, vh, vw, threshold, sh.stats, tables);
  if (!last_block_done(&tables->stats_done, (unsigned int)nq, &s_last)) return;
  select_queries(class_logits, nq, k1, isthing, score_threshold, object_threshold,
                 max_instances, prob, sh.select, tables);
  if (threadIdx.x == 0) tables->stats_done = 0;
}

struct Footprint {
  int y_lo, y_hi, x_lo, x_hi;
};

__device__ __forceinline__ void grid_bounds(const float* __restrict__ grid, int w,
                                            const Footprint& f, float* lo, float* hi) {
  float a = infinity(), b = -infinity();
  for (int y = f.y_lo; y <= f.y_hi; ++y) {
    for (int x = f.x_lo; x <= f.x_hi; ++x) {
      float v = __ldg(grid + y * w + x);
      a = fminf(a, v);
      b = fmaxf(b, v);
    }
  }
  *lo = a;
  *hi = b;
}

// Block-wide inclusive scan of `value` over the 256 threads (tid order): within each warp by
// five shuffles, then each warp adds the totals of the warps before it from `scratch` (at least
// 8 entries). Two barriers, where a shared-memory tree took seventeen; integer sums, so the same
// values in any order. Each value packs two 16-bit counters, so one scan serves two candidate
// lists. Every thread of the block calls it (the shuffles take the whole warp).
__device__ __forceinline__ unsigned int block_scan(unsigned int value, unsigned int* scratch,
                                                   int tid) {
  const int lane = tid & 31, warp = tid >> 5;
#pragma unroll 1  // unrolled, pp_tiles needs 54 registers a thread instead of 48: 4 blocks an SM
  for (int offset = 1; offset < 32; offset <<= 1) {
    const unsigned int below = __shfl_up_sync(kFullWarp, value, offset);
    if (lane >= offset) value += below;
  }
  if (lane == 31) scratch[warp] = value;
  __syncthreads();
  for (int w = 0; w < warp; ++w) value += scratch[w];
  __syncthreads();  // the next scan may reuse scratch
  return value;
}

// The finalisation, by one block of 256 threads, thread tid = instance slot tid and panoptic
// slot tid: instance renumbering (drop empty, ids 1..N in score order) and the panoptic overlap
// test, stuff merge and segment ids, all by prefix sums and short loops over shared memory (no
// serial thread). The counts come from every block of the launch: read past L1.
__device__ void finalize(const int* __restrict__ label_ids, const uint8_t* __restrict__ isthing,
                         double overlap_threshold, int min_area, int tid, PPTables* tables) {
  __shared__ unsigned int s_scan[kMaxQueries];
  __shared__ int s_pass[kMaxQueries];
  __shared__ int s_class[kMaxQueries];
  __shared__ unsigned int s_seg[kMaxQueries];
  __shared__ float s_score[kMaxQueries];
  const int n_inst = tables->n_inst;
  // min_area >= 1: slots with fewer pixels (none, or a speck) are dropped
  const bool has = tid < n_inst && __ldcg(&tables->inst_area[tid]) >= (unsigned int)min_area;
  const unsigned int id = block_scan(has ? 1u : 0u, s_scan, tid);
  if (tid < n_inst) tables->inst_lut[tid + 1] = has ? (int)id : 0;
  if (has) tables->out_slot[id - 1] = tid;
  if (tid == 0) tables->inst_lut[0] = 0;
  if (tid == kMaxQueries - 1) tables->n_inst_out = (int)id;

  const int n_pan = tables->n_pan;
  bool pass = false;
  int c = -1;
  if (tid < n_pan) {
    const unsigned int wins = __ldcg(&tables->wins[tid]), orig = __ldcg(&tables->orig[tid]);
    const unsigned int seg = __ldcg(&tables->seg[tid]);
    c = tables->pan_class[tid];
    pass = wins > 0 && orig > 0 && seg > 0 && (double)wins / (double)orig >= overlap_threshold &&
           (!isthing[c] || seg >= (unsigned int)min_area);
    s_seg[tid] = seg;
    s_score[tid] = tables->pan_score[tid];
  }
  s_pass[tid] = pass;
  s_class[tid] = c;
  __syncthreads();
  // Same-class passing slots before this one: the thing number, or whether a stuff segment of
  // this class already exists (then this slot merges into it).
  int before = 0;
  for (int j = 0; j < tid; ++j) before += s_pass[j] && s_class[j] == c;
  const bool thing = pass && isthing[c];
  const bool creates = pass && (thing || before == 0);
  const unsigned int index = block_scan(creates ? 1u : 0u, s_scan, tid);
  if (tid < n_pan) {
    const int label = pass ? label_ids[c] : 0;
    tables->pan_lut[tid] = !pass ? 0 : (thing ? label * 1000 + before + 1 : label);
  }
  if (creates) {
    const int j = (int)index - 1;
    unsigned int area = s_seg[tid];
    float score = s_score[tid];
    if (!thing) {
      for (int i = tid + 1; i < n_pan; ++i) {
        if (s_pass[i] && s_class[i] == c) {
          area += s_seg[i];
          score = fmaxf(score, s_score[i]);
        }
      }
    }
    tables->seg_id[j] = thing ? label_ids[c] * 1000 + before + 1 : label_ids[c];
    tables->seg_class[j] = c;
    tables->seg_score[j] = score;
    tables->seg_area[j] = area;
  }
  if (tid == kMaxQueries - 1) tables->n_seg = (int)index;
}

// Launch 2 of 3, one kTile x kTile block per camera tile: the winners of every pixel, written
// once (semantic final, instance and panoptic provisional: slot + 1, 0 for none), their counts,
// and, in the last block to finish, the finalisation that turns the counts into the LUTs.
extern "C" __global__ void __launch_bounds__(kTile * kTile, kTileBlocksPerSm) pp_tiles(
    int want, const float* __restrict__ masks, const float* __restrict__ sem, int h, int w,
    int k, int src_h, int src_w, const int* __restrict__ row_i0,
    const int* __restrict__ row_i1, const float* __restrict__ row_w,
    const int* __restrict__ col_i0, const int* __restrict__ col_i1,
    const float* __restrict__ col_w, float threshold, const int* __restrict__ label_ids,
    const uint8_t* __restrict__ isthing, double overlap_threshold, int min_area,
    PPTables* tables, uint16_t* __restrict__ inst_out, int* __restrict__ pan_out,
    void* __restrict__ sem_out, int sem_u16) {
  __shared__ uint16_t s_inst[kMaxQueries];  // candidate slots, in slot order
  __shared__ uint16_t s_pan[kMaxQueries];
  __shared__ uint16_t s_orig[kMaxQueries];
  __shared__ uint16_t s_sem[kMaxClasses];
  __shared__ const float* s_inst_grid[kMaxQueries];  // grid of each candidate, list order
  __shared__ const float* s_pan_grid[kMaxQueries];
  __shared__ float s_pan_weight[kMaxQueries];
  __shared__ unsigned int s_scan_a[kMaxQueries];
  __shared__ unsigned int s_scan_b[kMaxQueries];
  __shared__ int s_pan_lower, s_sem_lower;
  __shared__ int s_n_inst, s_n_pan, s_n_orig, s_n_sem;
  __shared__ unsigned int s_area[kMaxQueries];
  __shared__ int s_box[kMaxQueries][4];
  __shared__ unsigned int s_wins[kMaxQueries];
  __shared__ unsigned int s_orig_cnt[kMaxQueries];
  __shared__ unsigned int s_seg[kMaxQueries];
  __shared__ int s_last;

  const int tid = threadIdx.y * blockDim.x + threadIdx.x;
  const int nthreads = blockDim.x * blockDim.y;
  const int x = blockIdx.x * kTile + threadIdx.x;
  const int y = blockIdx.y * kTile + threadIdx.y;
  const int n_inst = (want & kWantInstance) ? tables->n_inst : 0;
  const int n_pan = (want & kWantPanoptic) ? tables->n_pan : 0;
  const int n_sem = (want & kWantSemantic) ? k : 0;
  const int hw = h * w;

  // Texel footprint of this tile (taps are monotone in the pixel index).
  Footprint f;
  const int x_first = blockIdx.x * kTile, y_first = blockIdx.y * kTile;
  const int x_last = min(x_first + kTile, src_w) - 1, y_last = min(y_first + kTile, src_h) - 1;
  f.y_lo = __ldg(row_i0 + y_first);
  f.y_hi = __ldg(row_i1 + y_last);
  f.x_lo = __ldg(col_i0 + x_first);
  f.x_hi = __ldg(col_i1 + x_last);

  if (tid == 0) {
    s_pan_lower = float_to_ordered(-infinity());
    s_sem_lower = float_to_ordered(-infinity());
  }
  for (int i = tid; i < kMaxQueries; i += nthreads) {
    s_area[i] = 0;
    s_box[i][0] = 0x7FFFFFFF;
    s_box[i][1] = 0x7FFFFFFF;
    s_box[i][2] = -1;
    s_box[i][3] = -1;
    s_wins[i] = 0;
    s_orig_cnt[i] = 0;
    s_seg[i] = 0;
  }
  __syncthreads();
  // Per-tile culling (exact, see docs/gpu.md): a bilinear sample lies within [min, max] of the
  // texels of its tile's footprint. Instance i can paint here only if max > T; panoptic k can
  // win only if score_k * sigmoid(max_k) reaches max_j score_j * sigmoid(min_j); it can count
  // in `orig` only if max_k > T; class c can win only if max S_c >= max_j min S_j.
  // Thread tid judges instance slot tid, panoptic slot tid and class tid (all < 256 = threads).
  bool f_inst = false, f_orig = false, f_pan = false, f_sem = false;
  float pan_upper = 0.0f, sem_upper = 0.0f;
  const float* inst_grid = nullptr;
  const float* pan_grid = nullptr;
  if (tid < n_inst) {
    float lo, hi;
    inst_grid = masks + (size_t)tables->inst_query[tid] * hw;
    grid_bounds(inst_grid, w, f, &lo, &hi);
    f_inst = hi + kBoundEps > threshold;
  }
  if (tid < n_pan) {
    float lo, hi;
    pan_grid = masks + (size_t)tables->pan_query[tid] * hw;
    grid_bounds(pan_grid, w, f, &lo, &hi);
    const float s = tables->pan_score[tid];
    pan_upper = s * sigmoid(hi + kBoundEps);
    atomicMax(&s_pan_lower, float_to_ordered(s * sigmoid(lo - kBoundEps)));
    f_orig = hi + kBoundEps > threshold;
  }
  if (tid < n_sem) {
    float lo, hi;
    grid_bounds(sem + (size_t)tid * hw, w, f, &lo, &hi);
    sem_upper = hi + kBoundEps;
    atomicMax(&s_sem_lower, float_to_ordered(lo - kBoundEps));
  }
  __syncthreads();
  f_pan = tid < n_pan && pan_upper >= ordered_to_float(s_pan_lower);
  f_sem = tid < n_sem && sem_upper >= ordered_to_float(s_sem_lower);
  // Order-preserving compaction of the four candidate lists by two packed prefix sums.
  const unsigned int a = block_scan((unsigned)f_inst | ((unsigned)f_orig << 16), s_scan_a, tid);
  const unsigned int b = block_scan((unsigned)f_pan | ((unsigned)f_sem << 16), s_scan_b, tid);
  if (f_inst) {
    const int j = (int)(a & 0xFFFFu) - 1;
    s_inst[j] = (uint16_t)tid;
    s_inst_grid[j] = inst_grid;
  }
  if (f_orig) s_orig[(a >> 16) - 1] = (uint16_t)tid;
  if (f_pan) {
    const int j = (int)(b & 0xFFFFu) - 1;
    s_pan[j] = (uint16_t)tid;
    s_pan_grid[j] = pan_grid;
    s_pan_weight[j] = tables->pan_score[tid];
  }
  if (f_sem) s_sem[(b >> 16) - 1] = (uint16_t)tid;
  if (tid == kMaxQueries - 1) {
    s_n_inst = (int)(a & 0xFFFFu);
    s_n_orig = (int)(a >> 16);
    s_n_pan = (int)(b & 0xFFFFu);
    s_n_sem = (int)(b >> 16);
  }
  __syncthreads();

  const bool inside = x < src_w && y < src_h;
  int slot = 0, winner = -1, sem_best = -1;
  bool won = false;
  Taps t{};
  if (inside) {
    t = load_taps(row_i0, row_i1, row_w, col_i0, col_i1, col_w, y, x);
    for (int j = 0; j < s_n_inst; ++j) {
      if (sample(s_inst_grid[j], w, t) > threshold) {
        slot = s_inst[j] + 1;
        break;
      }
    }
    float best = -infinity();
    for (int j = 0; j < s_n_pan; ++j) {
      const float v = sample(s_pan_grid[j], w, t);
      const float p = s_pan_weight[j] * sigmoid(v);
      if (p > best) {
        best = p;
        winner = s_pan[j];
        won = v > threshold;
      }
    }
    float sbest = -infinity();
    for (int j = 0; j < s_n_sem; ++j) {
      const int c = s_sem[j];
      const float v = sample(sem + (size_t)c * hw, w, t);
      if (v > sbest) {
        sbest = v;
        sem_best = c;
      }
    }
    if (sbest < kSemanticVoid) sem_best = -1;
  }
  // The counts, one shared atomic per warp and value instead of one per pixel: every thread
  // takes part in the votes (a pixel outside the image votes for nothing). The `orig` votes
  // come before the writes, while the taps are still at hand.
  const unsigned int lane = (unsigned int)tid & 31u;
  for (int j = 0; j < s_n_orig; ++j) {
    const int i = s_orig[j];
    const bool hit = inside && sample(masks + (size_t)tables->pan_query[i] * hw, w, t) > threshold;
    const unsigned int votes = __ballot_sync(kFullWarp, hit);
    if (lane == 0 && votes) atomicAdd(&s_orig_cnt[i], (unsigned int)__popc(votes));
  }
  if (inside) {
    const size_t idx = (size_t)y * src_w + x;
    if (want & kWantInstance) inst_out[idx] = (uint16_t)slot;
    if (want & kWantPanoptic) pan_out[idx] = (winner >= 0 && won) ? winner + 1 : 0;
    if (want & kWantSemantic) {
      const int label = sem_best >= 0 ? label_ids[sem_best] : 0;
      if (sem_u16) {
        static_cast<uint16_t*>(sem_out)[idx] = (uint16_t)label;
      } else {
        static_cast<uint8_t*>(sem_out)[idx] = (uint8_t)label;
      }
    }
  }
  const unsigned int same_slot = __match_any_sync(kFullWarp, slot);
  if (slot > 0 && lane == (unsigned int)(__ffs(same_slot) - 1)) {
    // a warp is two tile rows of kTile pixels: the group's box from its lane bits
    const unsigned int upper = same_slot & 0xFFFFu, lower = same_slot >> 16;
    const int x0 = blockIdx.x * kTile, y0 = blockIdx.y * kTile + ((tid >> 5) << 1);
    const int first_x = min(upper ? __ffs(upper) - 1 : kTile, lower ? __ffs(lower) - 1 : kTile);
    const int last_x = max(upper ? 31 - __clz(upper) : -1, lower ? 31 - __clz(lower) : -1);
    atomicAdd(&s_area[slot - 1], (unsigned int)__popc(same_slot));
    atomicMin(&s_box[slot - 1][0], x0 + first_x);
    atomicMin(&s_box[slot - 1][1], y0 + (upper ? 0 : 1));
    atomicMax(&s_box[slot - 1][2], x0 + last_x);
    atomicMax(&s_box[slot - 1][3], y0 + (lower ? 1 : 0));
  }
  const unsigned int same_winner = __match_any_sync(kFullWarp, winner);
  const unsigned int won_votes = __ballot_sync(kFullWarp, won);
  if (winner >= 0 && lane == (unsigned int)(__ffs(same_winner) - 1)) {
    atomicAdd(&s_wins[winner], (unsigned int)__popc(same_winner));
    const unsigned int segment = (unsigned int)__popc(same_winner & won_votes);
    if (segment) atomicAdd(&s_seg[winner], segment);
  }
  __syncthreads();
  for (int i = tid; i < n_inst; i += nthreads) {
    if (s_area[i]) {
      atomicAdd(&tables->inst_area[i], s_area[i]);
      atomicMin(&tables->inst_box[i][0], s_box[i][0]);
      atomicMin(&tables->inst_box[i][1], s_box[i][1]);
      atomicMax(&tables->inst_box[i][2], s_box[i][2]);
      atomicMax(&tables->inst_box[i][3], s_box[i][3]);
    }
  }
  for (int i = tid; i < n_pan; i += nthreads) {
    if (s_wins[i]) atomicAdd(&tables->wins[i], s_wins[i]);
    if (s_orig_cnt[i]) atomicAdd(&tables->orig[i], s_orig_cnt[i]);
    if (s_seg[i]) atomicAdd(&tables->seg[i], s_seg[i]);
  }
  if (!last_block_done(&tables->tiles_done, gridDim.x * gridDim.y, &s_last)) return;
  finalize(label_ids, isthing, overlap_threshold, min_area, tid, tables);
  if (tid == 0) tables->tiles_done = 0;
}

// Two provisional instance pixels (16 bits each) through the instance LUT.
__device__ __forceinline__ unsigned int lut_pair(unsigned int pair, const int* lut) {
  return (unsigned int)lut[pair & 0xFFFFu] | ((unsigned int)lut[pair >> 16] << 16);
}

// A provisional panoptic pixel (slot + 1, 0 for none) as its segment id.
__device__ __forceinline__ int segment_of(int provisional, const int* lut) {
  return provisional ? lut[provisional - 1] : 0;
}

// Launch 3 of 3, kBlock threads a block, kRemapPixels pixels a thread: the provisional instance
// and panoptic rasters through the finalisation's LUTs, in place (the host skips it when
// neither raster is asked for). The arena places each raster at a 256-byte boundary, so the
// 16-byte accesses are aligned; the last partial group goes pixel by pixel.
extern "C" __global__ void pp_remap(int want, int n, const PPTables* __restrict__ tables,
                                    uint16_t* __restrict__ inst, int* __restrict__ pan) {
  __shared__ int s_inst_lut[kMaxQueries + 1];
  __shared__ int s_pan_lut[kMaxQueries];
  for (int i = threadIdx.x; i <= kMaxQueries; i += blockDim.x) {
    s_inst_lut[i] = i <= tables->n_inst ? tables->inst_lut[i] : 0;
    if (i < kMaxQueries) s_pan_lut[i] = i < tables->n_pan ? tables->pan_lut[i] : 0;
  }
  __syncthreads();
  const int first = (blockIdx.x * blockDim.x + threadIdx.x) * kRemapPixels;
  if (first >= n) return;
  if (first + kRemapPixels <= n) {
    if (want & kWantInstance) {
      uint4* at = reinterpret_cast<uint4*>(inst + first);
      uint4 v = *at;
      v.x = lut_pair(v.x, s_inst_lut);
      v.y = lut_pair(v.y, s_inst_lut);
      v.z = lut_pair(v.z, s_inst_lut);
      v.w = lut_pair(v.w, s_inst_lut);
      *at = v;
    }
    if (want & kWantPanoptic) {
      for (int half = 0; half < 2; ++half) {
        int4* at = reinterpret_cast<int4*>(pan + first) + half;
        int4 v = *at;
        v.x = segment_of(v.x, s_pan_lut);
        v.y = segment_of(v.y, s_pan_lut);
        v.z = segment_of(v.z, s_pan_lut);
        v.w = segment_of(v.w, s_pan_lut);
        *at = v;
      }
    }
    return;
  }
  for (int i = first; i < n; ++i) {
    if (want & kWantInstance) inst[i] = (uint16_t)s_inst_lut[inst[i]];
    if (want & kWantPanoptic) pan[i] = segment_of(pan[i], s_pan_lut);
  }
}
