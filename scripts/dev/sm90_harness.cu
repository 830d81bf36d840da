/*
 * scripts/dev/sm90_harness.cu: standalone device harness for the sm_90a
 * attention template (templates/attn_sm90.cuh), usable before the Tessera GPU
 * runtime exists.  Builds block-sparse plans in the plan_layout.h format
 * (random logical masks, full and partial tiles, GQA member tasks, split rows
 * with partial slots merged on the CPU, empty rows), launches a variant,
 * compares against a float64 CPU reference and times it with CUDA events.
 * Cost: the reference is O(selected pairs * D) on the CPU; checks on big
 * problems sample rows.
 *
 * Build (see sm90_build.sh): each variant is compiled to a cubin loaded here
 * through the driver API (as the Tessera runtime does); SM90_CUBINS names
 * their folder.
 */
#include <cuda.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <algorithm>
#include <vector>
#include "plan_layout.h"

#define CK(x)                                                                   \
  do {                                                                          \
    cudaError_t e_ = (x);                                                       \
    if (e_ != cudaSuccess) {                                                    \
      fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); \
      exit(1);                                                                  \
    }                                                                           \
  } while (0)

#define VARIANTS(X)                                  \
  X(v_bf16_d128_m128n128_s2_mb, 0, 128, 128, 128, 2, 1) \
  X(v_bf16_d128_m128n128_s2_nm, 0, 128, 128, 128, 2, 0) \
  X(v_fp16_d128_m128n128_s2_mb, 1, 128, 128, 128, 2, 1) \
  X(v_bf16_d64_m128n128_s2_mb, 0, 64, 128, 128, 2, 1)   \
  X(v_bf16_d128_m128n64_s2_mb, 0, 128, 128, 64, 2, 1)   \
  X(v_bf16_d128_m64n128_s2_mb, 0, 128, 64, 128, 2, 1)   \
  X(v_bf16_d128_m128n128_s3_nm, 0, 128, 128, 128, 3, 0) \
  X(v_bf16_d64_m128n128_s3_nm, 0, 64, 128, 128, 3, 0)  \
  X(v_bf16_d128_m64n64_s2_mb, 0, 128, 64, 64, 2, 1)     \
  X(v_bf16_d128_m128n64_s3_mb, 0, 128, 128, 64, 3, 1)  \
  X(v_bf16_d64_m128n64_s2_mb, 0, 64, 128, 64, 2, 1)    \
  X(v_bf16_d64_m64n64_s2_mb, 0, 64, 64, 64, 2, 1)      \
  X(v_bf16_d128_m128n64_s2_nm, 0, 128, 128, 64, 2, 0)  \
  X(v_bf16_d128_m128n64_s3_nm, 0, 128, 128, 64, 3, 0)  \
  X(v_bf16_d128_m64n64_s2_mb_g3, 0, 128, 64, 64, 2, 1) \
  X(v_bf16_d128_m64n64_s3_mb_g3, 0, 128, 64, 64, 3, 1) \
  X(v_bf16_d64_m64n64_s3_mb_g3, 0, 64, 64, 64, 3, 1)   \
  X(v_bf16_d64_m64n64_s2_mb_g3, 0, 64, 64, 64, 2, 1)   \
  X(v_fp16_d128_m64n64_s2_mb_g3, 1, 128, 64, 64, 2, 1)

struct variant {
  const char *name;
  int f16, d, bm, bn, stages, mb;
};
#define ENTRY(n, f16, d, bm, bn, st, mb) {#n, f16, d, bm, bn, st, mb},
static const variant g_variants[] = {VARIANTS(ENTRY)};

/* Driver entry points through the runtime (no -lcuda needed). */
static CUresult (*p_cuModuleLoad)(CUmodule *, const char *);
static CUresult (*p_cuModuleGetFunction)(CUfunction *, CUmodule, const char *);
static CUresult (*p_cuFuncSetAttribute)(CUfunction, CUfunction_attribute, int);
static CUresult (*p_cuLaunchKernel)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                                    unsigned, CUstream, void **, void **);
static const char *g_cubin_dir = ".";

static CUfunction load_fn(const variant &v) {
  char path[512];
  snprintf(path, sizeof path, "%s/%s.cubin", g_cubin_dir, v.name);
  CUmodule m;
  CUfunction f;
  if (p_cuModuleLoad(&m, path) != CUDA_SUCCESS) { fprintf(stderr, "cannot load %s\n", path); exit(1); }
  if (p_cuModuleGetFunction(&f, m, v.name) != CUDA_SUCCESS) { fprintf(stderr, "no %s\n", v.name); exit(1); }
  return f;
}

/* SM90_G3=1 (or a check case of class tpc2) picks the _g3 build */
static bool g_want_g3 = false;
static const variant *find_variant(int f16, int d, int bm, int bn, int st, int mb) {
  const bool g3 = g_want_g3 || (getenv("SM90_G3") && atoi(getenv("SM90_G3")));
  for (const variant &v : g_variants)
    if (v.f16 == f16 && v.d == d && v.bm == bm && v.bn == bn && v.stages == st && v.mb == mb &&
        (strstr(v.name, "_g3") != nullptr) == g3) return &v;
  fprintf(stderr, "no variant f16=%d d=%d bm=%d bn=%d st=%d mb=%d\n", f16, d, bm, bn, st, mb);
  exit(2);
}

/* ---- host half precision ---- */
static uint16_t f2h(float f, int f16) {
  if (!f16) {
    uint32_t u;
    memcpy(&u, &f, 4);
    u += 0x7fff + ((u >> 16) & 1);
    return (uint16_t)(u >> 16);
  }
  return __half_as_ushort(__float2half_rn(f));
}
static float h2f(uint16_t h, int f16) {
  if (!f16) {
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
  }
  return __half2float(__ushort_as_half(h));
}

static uint64_t g_rng;
static uint64_t rnd(void) {
  g_rng ^= g_rng << 13;
  g_rng ^= g_rng >> 7;
  g_rng ^= g_rng << 17;
  return g_rng;
}
static double urand(void) { return (rnd() >> 11) * (1.0 / 9007199254740992.0); }

/* ---- problem and plan ---- */
struct problem {
  int B, Hq, Hkv, Sq, Sk, D, f16, bshd;
  int lbq, lbk;            /* logical block sizes */
  double density;
  int split;               /* max tiles per task (0: no split) */
  int share;               /* group GQA heads with identical masks into member tasks */
  double empty_rows;       /* fraction of logical rows forced empty */
};

struct plan {
  std::vector<tsr_task_rec> tasks;
  std::vector<tsr_tile_rec> tiles;
  std::vector<tsr_member_rec> members;
  std::vector<uint32_t> membership;
  std::vector<int> qblk;
  std::vector<tsr_merge_rec> merges;
  int n_slots = 0;
  std::vector<uint8_t> mask; /* [B][Hq][NQL][NKL] */
  int NQL, NKL;
  double pairs = 0;
  int n_partial_tiles = 0, n_full_tiles = 0;
};

static bool selected(const problem &pr, const plan &pl, int b, int h, int qi, int kj) {
  const int qb = qi / pr.lbq, kb = kj / pr.lbk;
  return pl.mask[(((size_t)b * pr.Hq + h) * pl.NQL + qb) * pl.NKL + kb] != 0;
}

static void build_plan(const problem &pr, int BM, int BN, plan &pl) {
  pl.NQL = (pr.Sq + pr.lbq - 1) / pr.lbq;
  pl.NKL = (pr.Sk + pr.lbk - 1) / pr.lbk;
  const int grp = pr.Hq / pr.Hkv;
  pl.mask.assign((size_t)pr.B * pr.Hq * pl.NQL * pl.NKL, 0);
  for (int b = 0; b < pr.B; ++b)
    for (int h = 0; h < pr.Hq; ++h)
      for (int i = 0; i < pl.NQL; ++i) {
        uint8_t *row = &pl.mask[(((size_t)b * pr.Hq + h) * pl.NQL + i) * pl.NKL];
        if (pr.share && h % grp) { /* copy the group leader's row */
          memcpy(row, &pl.mask[(((size_t)b * pr.Hq + (h - h % grp)) * pl.NQL + i) * pl.NKL], pl.NKL);
          continue;
        }
        const bool empty = urand() < pr.empty_rows;
        if (getenv("SM90_MASK") && !strcmp(getenv("SM90_MASK"), "topk")) {
          /* VSA-like (bench-vs-torch's topk): per row the k = density * NKL
             best of random scores minus the block distance, so neighbouring
             query blocks pick similar key blocks */
          std::vector<std::pair<double, int>> sc(pl.NKL);
          for (int j = 0; j < pl.NKL; ++j) sc[j] = {urand() - fabs((double)i / pl.NQL - (double)j / pl.NKL), j};
          const int k = std::max(1, (int)ceil(pr.density * pl.NKL));
          std::nth_element(sc.begin(), sc.begin() + (k - 1), sc.end(),
                           [](const std::pair<double, int> &a, const std::pair<double, int> &b) { return a.first > b.first; });
          for (int j = 0; j < pl.NKL; ++j) row[j] = 0;
          for (int j = 0; j < k && !empty; ++j) row[sc[j].second] = 1;
          continue;
        }
        for (int j = 0; j < pl.NKL; ++j) row[j] = !empty && urand() < pr.density;
      }
  pl.qblk.resize(pr.Sq);
  for (int i = 0; i < pr.Sq; ++i) pl.qblk[i] = i / pr.lbq;
  const int nqt = (pr.Sq + BM - 1) / BM, nkt = (pr.Sk + BN - 1) / BN;
  struct rowtiles { int b, h, qt; std::vector<tsr_tile_rec> t; };
  for (int b = 0; b < pr.B; ++b)
    for (int h = 0; h < pr.Hq; ++h)
      for (int i = 0; i < pr.Sq; ++i)
        for (int j = 0; j < pr.Sk; j += pr.lbk)
          if (selected(pr, pl, b, h, i, j)) pl.pairs += std::min(pr.lbk, pr.Sk - j);
  /* task lists per (b, head group leader or head, qt) */
  for (int b = 0; b < pr.B; ++b)
    for (int h = 0; h < pr.Hq; ++h) {
      if (pr.share && h % grp) continue;
      const int nmem = pr.share ? grp : 1;
      for (int qt = 0; qt < nqt; ++qt) {
        const int r0 = qt * BM, r1 = std::min(r0 + BM, pr.Sq);
        const int s0 = pl.qblk[r0], nseg = pl.qblk[r1 - 1] - s0 + 1;
        std::vector<tsr_tile_rec> list;
        for (int kt = 0; kt < nkt; ++kt) {
          const int c0 = kt * BN, c1 = std::min(c0 + BN, pr.Sk);
          std::vector<uint32_t> words((size_t)nseg * (BN / 32), 0);
          bool any = false, full = true;
          for (int s = 0; s < nseg; ++s) {
            const int qi = std::max(r0, (s0 + s) * pr.lbq);
            for (int c = c0; c < c1; ++c) {
              const bool sel = selected(pr, pl, b, h, qi, c);
              if (sel) { words[s * (BN / 32) + (c - c0) / 32] |= 1u << ((c - c0) % 32); any = true; }
              else full = false;
            }
          }
          if (!any) continue;
          tsr_tile_rec tr;
          tr.k_tile = kt;
          if (full) { tr.mem = -1; ++pl.n_full_tiles; }
          else {
            tr.mem = (int)pl.membership.size();
            pl.membership.insert(pl.membership.end(), words.begin(), words.end());
            ++pl.n_partial_tiles;
          }
          list.push_back(tr);
        }
        /* shuffle tile order (kernels must not depend on ascending k tiles)
           unless SM90_SHUFFLE=0 */
        if (!getenv("SM90_SHUFFLE") || atoi(getenv("SM90_SHUFFLE")))
          for (size_t i = list.size(); i > 1; --i) std::swap(list[i - 1], list[rnd() % i]);
        const int mb = (int)pl.members.size();
        for (int m = 0; m < nmem; ++m) pl.members.push_back({b, h + m, qt, 0});
        const int per = pr.split > 0 ? pr.split : (int)std::max<size_t>(list.size(), 1);
        const int nchunks = list.empty() ? 1 : (int)((list.size() + per - 1) / per);
        int partial = -1;
        if (nchunks > 1) {
          partial = pl.n_slots;
          for (int m = 0; m < nmem; ++m) {
            tsr_merge_rec mr = {b, h + m, qt, pl.n_slots + m, 0, {0, 0, 0}};
            pl.merges.push_back(mr);
          }
        }
        for (int c = 0; c < nchunks; ++c) {
          tsr_task_rec tk;
          tk.batch = b; tk.head = h; tk.q_tile = qt;
          tk.tile_begin = (int)pl.tiles.size();
          for (int i = c * per; i < std::min((int)list.size(), (c + 1) * per); ++i) pl.tiles.push_back(list[i]);
          tk.tile_end = (int)pl.tiles.size();
          tk.member_begin = mb; tk.n_members = nmem;
          tk.partial = partial >= 0 ? pl.n_slots : -1;
          if (partial >= 0) pl.n_slots += nmem;
          pl.tasks.push_back(tk);
        }
        /* merge records: slots of member m across chunks are partial + c*nmem + m;
           the harness merges on the CPU, so record them as a stride pattern */
        if (nchunks > 1)
          for (int m = 0; m < nmem; ++m) {
            tsr_merge_rec &mr = pl.merges[pl.merges.size() - nmem + m];
            mr.slot_begin = partial + m; mr.n_slots = nchunks; mr.pad[0] = nmem; /* stride */
          }
      }
    }
  /* SM90_ORDER: 0 longest-first over everything, 1 head-major (creation
     order), 2 longest-first within each (batch, head) */
  const int order = getenv("SM90_ORDER") ? atoi(getenv("SM90_ORDER")) : 0;
  if (order == 0)
    std::stable_sort(pl.tasks.begin(), pl.tasks.end(), [](const tsr_task_rec &a, const tsr_task_rec &b) {
      return (a.tile_end - a.tile_begin) * a.n_members > (b.tile_end - b.tile_begin) * b.n_members;
    });
  else if (order == 2)
    std::stable_sort(pl.tasks.begin(), pl.tasks.end(), [](const tsr_task_rec &a, const tsr_task_rec &b) {
      if (a.batch != b.batch || a.head != b.head) return a.batch != b.batch ? a.batch < b.batch : a.head < b.head;
      return (a.tile_end - a.tile_begin) * a.n_members > (b.tile_end - b.tile_begin) * b.n_members;
    });
}

/* ---- tensor maps ---- */
typedef CUresult (*encode_fn)(CUtensorMap *, CUtensorMapDataType, cuuint32_t, void *, const cuuint64_t *,
                              const cuuint64_t *, const cuuint32_t *, const cuuint32_t *, CUtensorMapInterleave,
                              CUtensorMapSwizzle, CUtensorMapL2promotion, CUtensorMapFloatOOBfill);
static encode_fn g_encode;

static void make_map(tsr_tmap *out, void *base, int f16, int D, int S, int H, int B, const int64_t *st, int box_rows) {
  cuuint64_t dims[4] = {(cuuint64_t)D, (cuuint64_t)S, (cuuint64_t)H, (cuuint64_t)B};
  cuuint64_t strides[3] = {(cuuint64_t)st[2] * 2, (cuuint64_t)st[1] * 2, (cuuint64_t)st[0] * 2};
  cuuint32_t box[4] = {64, (cuuint32_t)box_rows, 1, 1};
  cuuint32_t es[4] = {1, 1, 1, 1};
  CUresult r = g_encode((CUtensorMap *)out, f16 ? CU_TENSOR_MAP_DATA_TYPE_FLOAT16 : CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 4, base,
                        dims, strides, box, es, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                        CU_TENSOR_MAP_L2_PROMOTION_L2_128B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (r != CUDA_SUCCESS) { fprintf(stderr, "cuTensorMapEncodeTiled failed: %d\n", (int)r); exit(1); }
}

template <class T> static T *up(const std::vector<T> &v) {
  T *d = nullptr;
  CK(cudaMalloc(&d, std::max<size_t>(v.size(), 1) * sizeof(T)));
  if (!v.empty()) CK(cudaMemcpy(d, v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice));
  return d;
}

struct result { double rel_err, max_abs, lse_err; long bad_unwritten; double ms, tflops; };

/* Runs one configuration; check_rows < 0 checks every row. */
static result run_case(const problem &pr, const variant &v, int check_rows, int reps, uint64_t seed, bool verbose) {
  g_rng = seed * 0x9E3779B97F4A7C15ull + 1;
  plan pl;
  build_plan(pr, v.bm, v.bn, pl);
  const int D = pr.D;
  const size_t nq = (size_t)pr.B * pr.Hq * pr.Sq * D, nk = (size_t)pr.B * pr.Hkv * pr.Sk * D;
  std::vector<uint16_t> hq(nq), hk(nk), hv(nk);
  for (auto &x : hq) x = f2h((float)(urand() * 2 - 1), pr.f16);
  for (auto &x : hk) x = f2h((float)(urand() * 2 - 1), pr.f16);
  for (auto &x : hv) x = f2h((float)(urand() * 2 - 1), pr.f16);
  /* element strides b, h, s, d of the [B,H,S,D] index space */
  int64_t qs[4], ks[4];
  if (pr.bshd) {
    qs[0] = (int64_t)pr.Sq * pr.Hq * D; qs[1] = D; qs[2] = (int64_t)pr.Hq * D; qs[3] = 1;
    ks[0] = (int64_t)pr.Sk * pr.Hkv * D; ks[1] = D; ks[2] = (int64_t)pr.Hkv * D; ks[3] = 1;
  } else {
    qs[0] = (int64_t)pr.Hq * pr.Sq * D; qs[1] = (int64_t)pr.Sq * D; qs[2] = D; qs[3] = 1;
    ks[0] = (int64_t)pr.Hkv * pr.Sk * D; ks[1] = (int64_t)pr.Sk * D; ks[2] = D; ks[3] = 1;
  }
  uint16_t *dq = up(hq), *dk = up(hk), *dv = up(hv), *dout;
  float *dlse, *dpo = nullptr, *dpm = nullptr, *dpl = nullptr;
  CK(cudaMalloc(&dout, nq * 2));
  CK(cudaMalloc(&dlse, (size_t)pr.B * pr.Hq * pr.Sq * 4));
  CK(cudaMemset(dout, 0xff, nq * 2)); /* poison: NaN */
  CK(cudaMemset(dlse, 0xff, (size_t)pr.B * pr.Hq * pr.Sq * 4));
  if (pl.n_slots) {
    CK(cudaMalloc(&dpo, (size_t)pl.n_slots * v.bm * D * 4));
    CK(cudaMalloc(&dpm, (size_t)pl.n_slots * v.bm * 4));
    CK(cudaMalloc(&dpl, (size_t)pl.n_slots * v.bm * 4));
    CK(cudaMemset(dpo, 0xff, (size_t)pl.n_slots * v.bm * D * 4));
    CK(cudaMemset(dpm, 0xff, (size_t)pl.n_slots * v.bm * 4));
    CK(cudaMemset(dpl, 0xff, (size_t)pl.n_slots * v.bm * 4));
  }
  tsr_kernel_params p;
  memset(&p, 0, sizeof p);
  make_map(&p.tma_q, dq, pr.f16, D, pr.Sq, pr.Hq, pr.B, qs, v.bm);
  make_map(&p.tma_k, dk, pr.f16, D, pr.Sk, pr.Hkv, pr.B, ks, v.bn);
  make_map(&p.tma_v, dv, pr.f16, D, pr.Sk, pr.Hkv, pr.B, ks, v.bn);
  p.q = dq; p.k = dk; p.v = dv; p.o = dout; p.lse = dlse;
  for (int i = 0; i < 4; ++i) { p.q_stride[i] = qs[i]; p.o_stride[i] = qs[i]; p.k_stride[i] = ks[i]; p.v_stride[i] = ks[i]; }
  p.batch = pr.B; p.heads_q = pr.Hq; p.heads_kv = pr.Hkv; p.seq_q = pr.Sq; p.seq_k = pr.Sk; p.head_dim = D;
  p.scale_log2 = (float)(1.0 / sqrt((double)D) * 1.4426950408889634);
  p.n_tasks = (int)pl.tasks.size(); p.n_merges = (int)pl.merges.size(); p.n_q_tiles = (pr.Sq + v.bm - 1) / v.bm;
  p.tasks = up(pl.tasks); p.tiles = up(pl.tiles); p.members = up(pl.members);
  p.membership = up(pl.membership); p.qblk = up(pl.qblk); p.merges = up(pl.merges);
  p.part_o = dpo; p.part_m = dpm; p.part_l = dpl;
  /* variants built with 3 warpgroups at BM 64 (name ending _g3) run two
     tasks a CTA */
  const int tpc = strstr(v.name, "_g3") ? 2 : 1;
  const int threads = 128 * (1 + tpc * v.bm / 64);
  /* two Q buffers a stream with two tasks a CTA and 2 stages (TSR_SM90_QPF) */
  const int qbuf = tpc == 2 && v.stages == 2 ? 2 : 1;
  const int smem = 1024 + tpc * (qbuf * v.bm * D * 2 + 2 * v.stages * v.bn * D * 2 + 256);
  CUfunction fn = load_fn(v);
  if (p_cuFuncSetAttribute(fn, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, smem) != CUDA_SUCCESS) {
    fprintf(stderr, "cannot set smem %d\n", smem);
    exit(1);
  }
  void *args[] = {&p};
#define LAUNCH()                                                                                   \
  do {                                                                                             \
    CUresult r_ = p_cuLaunchKernel(fn, grid, 1, 1, threads, 1, 1, smem, 0, args, 0);             \
    if (r_ != CUDA_SUCCESS) { fprintf(stderr, "launch failed %d\n", (int)r_); exit(1); }        \
  } while (0)
  int nsm;
  CK(cudaDeviceGetAttribute(&nsm, cudaDevAttrMultiProcessorCount, 0));
  /* persistent grid (one CTA per SM striding over tasks) unless
     SM90_GRID=flat (one CTA per task: the hardware balances the tail);
     SM90_GRID=N caps the persistent grid at N CTAs (checks of streams that
     run many tasks) */
  const bool flat = getenv("SM90_GRID") && !strcmp(getenv("SM90_GRID"), "flat");
  const int cap = getenv("SM90_GRID") && atoi(getenv("SM90_GRID")) > 0 ? atoi(getenv("SM90_GRID")) : nsm;
  const int ctas = (p.n_tasks + tpc - 1) / tpc;
  const int grid = flat ? std::max<int>(1, ctas) : std::min<int>(cap, std::max<int>(1, ctas));
  LAUNCH();
  CK(cudaGetLastError());
  CK(cudaDeviceSynchronize());
  result res = {0, 0, 0, 0, 0, 0};
  if (reps > 0) {
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0)); CK(cudaEventCreate(&e1));
    std::vector<float> ts;
    for (int r = 0; r < 3; ++r) LAUNCH();
    for (int r = 0; r < reps; ++r) {
      CK(cudaEventRecord(e0));
      LAUNCH();
      CK(cudaEventRecord(e1));
      CK(cudaEventSynchronize(e1));
      float ms; CK(cudaEventElapsedTime(&ms, e0, e1)); ts.push_back(ms);
    }
    CK(cudaGetLastError());
    std::sort(ts.begin(), ts.end());
    res.ms = ts[ts.size() / 2];
    res.tflops = 4.0 * pl.pairs * D / (res.ms * 1e-3) / 1e12;
  }
  /* fetch and merge split rows on the CPU */
  std::vector<uint16_t> ho(nq);
  std::vector<float> hl((size_t)pr.B * pr.Hq * pr.Sq);
  CK(cudaMemcpy(ho.data(), dout, nq * 2, cudaMemcpyDeviceToHost));
  CK(cudaMemcpy(hl.data(), dlse, hl.size() * 4, cudaMemcpyDeviceToHost));
  std::vector<float> po, pm, plv;
  if (pl.n_slots) {
    po.resize((size_t)pl.n_slots * v.bm * D); pm.resize((size_t)pl.n_slots * v.bm); plv.resize(pm.size());
    CK(cudaMemcpy(po.data(), dpo, po.size() * 4, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(pm.data(), dpm, pm.size() * 4, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(plv.data(), dpl, plv.size() * 4, cudaMemcpyDeviceToHost));
  }
  /* out_f: float outputs after merge; marks rows computed by merges */
  std::vector<char> merged((size_t)pr.B * pr.Hq * pr.Sq, 0);
  std::vector<float> mo; /* merged rows kept sparse by index */
  std::vector<size_t> mo_idx((size_t)pr.B * pr.Hq * pr.Sq, (size_t)-1);
  for (const tsr_merge_rec &mr : pl.merges) {
    const int stride = mr.pad[0];
    for (int r = 0; r < v.bm; ++r) {
      const int row = mr.q_tile * v.bm + r;
      if (row >= pr.Sq) break;
      float M = -INFINITY;
      for (int c = 0; c < mr.n_slots; ++c) M = fmaxf(M, pm[(size_t)(mr.slot_begin + c * stride) * v.bm + r]);
      double L = 0;
      std::vector<double> acc(D, 0.0);
      for (int c = 0; c < mr.n_slots; ++c) {
        const size_t sl = mr.slot_begin + c * stride;
        const float mi = pm[sl * v.bm + r], li = plv[sl * v.bm + r];
        if (std::isnan(mi) || std::isnan(li)) { res.bad_unwritten++; continue; }
        if (mi == -INFINITY) continue;
        const double w = exp2((double)mi - M);
        L += w * li;
        for (int d = 0; d < D; ++d) acc[d] += w * po[(sl * v.bm + r) * D + d];
      }
      const size_t ri = ((size_t)mr.batch * pr.Hq + mr.head) * pr.Sq + row;
      merged[ri] = 1;
      mo_idx[ri] = mo.size();
      for (int d = 0; d < D; ++d) mo.push_back(L > 0 ? (float)(acc[d] / L) : 0.f);
      hl[ri] = L > 0 ? (float)((M + log2(L)) * 0.6931471805599453) : -INFINITY;
    }
  }
  /* reference */
  std::vector<size_t> rows;
  const size_t nrows = (size_t)pr.B * pr.Hq * pr.Sq;
  if (check_rows < 0) for (size_t r = 0; r < nrows; ++r) rows.push_back(r);
  else for (int i = 0; i < check_rows; ++i) rows.push_back(rnd() % nrows);
  double num = 0, den = 0, lerr = 0;
  std::vector<double> sc(pr.Sk);
  const double scale = 1.0 / sqrt((double)D);
  for (size_t ri : rows) {
    const int b = (int)(ri / ((size_t)pr.Hq * pr.Sq)), h = (int)(ri / pr.Sq % pr.Hq), i = (int)(ri % pr.Sq);
    const int hkv = h / (pr.Hq / pr.Hkv);
    const uint16_t *qrow = &hq[b * qs[0] + h * qs[1] + (int64_t)i * qs[2]];
    double mx = -INFINITY;
    for (int j = 0; j < pr.Sk; ++j) {
      if (!selected(pr, pl, b, h, i, j)) { sc[j] = -INFINITY; continue; }
      const uint16_t *krow = &hk[b * ks[0] + hkv * ks[1] + (int64_t)j * ks[2]];
      double s = 0;
      for (int d = 0; d < D; ++d) s += (double)h2f(qrow[d], pr.f16) * h2f(krow[d], pr.f16);
      sc[j] = s * scale;
      mx = std::max(mx, sc[j]);
    }
    std::vector<double> o(D, 0.0);
    double l = 0;
    if (mx > -INFINITY)
      for (int j = 0; j < pr.Sk; ++j) {
        if (sc[j] == -INFINITY) continue;
        const double w = exp(sc[j] - mx);
        l += w;
        const uint16_t *vrow = &hv[b * ks[0] + hkv * ks[1] + (int64_t)j * ks[2]];
        for (int d = 0; d < D; ++d) o[d] += w * h2f(vrow[d], pr.f16);
      }
    const double lse = l > 0 ? mx + log(l) : -INFINITY;
    for (int d = 0; d < D; ++d) {
      const double ref = l > 0 ? o[d] / l : 0.0;
      double got;
      if (merged[ri]) got = mo[mo_idx[ri] + d];
      else got = h2f(ho[b * qs[0] + h * qs[1] + (int64_t)i * qs[2] + d], pr.f16);
      if (std::isnan(got)) { res.bad_unwritten++; continue; }
      num += (got - ref) * (got - ref);
      den += ref * ref;
      res.max_abs = std::max(res.max_abs, fabs(got - ref));
    }
    const float gl = hl[ri];
    if (std::isnan(gl)) res.bad_unwritten++;
    else if (lse == -INFINITY) { if (gl != -INFINITY) lerr = std::max(lerr, 1e9); }
    else lerr = std::max(lerr, fabs(gl - lse));
  }
  res.rel_err = den > 0 ? sqrt(num / den) : sqrt(num);
  res.lse_err = lerr;
  if (verbose)
    printf("  plan: %zu tasks, %d full + %d partial tiles, %d slots, %zu members, pairs %.3g (density %.3f)\n",
           pl.tasks.size(), pl.n_full_tiles, pl.n_partial_tiles, pl.n_slots, pl.members.size(), pl.pairs,
           pl.pairs / ((double)pr.B * pr.Hq * pr.Sq * pr.Sk));
  cudaFree(dq); cudaFree(dk); cudaFree(dv); cudaFree(dout); cudaFree(dlse);
  cudaFree(dpo); cudaFree(dpm); cudaFree(dpl);
  cudaFree((void *)p.tasks); cudaFree((void *)p.tiles); cudaFree((void *)p.members);
  cudaFree((void *)p.membership); cudaFree((void *)p.qblk); cudaFree((void *)p.merges);
  return res;
}

int main(int argc, char **argv) {
  const char *mode = argc > 1 ? argv[1] : "check";
  setvbuf(stdout, NULL, _IOLBF, 0); /* a case that hangs under `timeout` keeps the lines before it */
  cudaDriverEntryPointQueryResult q;
  CK(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", (void **)&g_encode, 12000, cudaEnableDefault, &q));
  if (!g_encode) { fprintf(stderr, "no cuTensorMapEncodeTiled\n"); return 1; }
  CK(cudaGetDriverEntryPointByVersion("cuModuleLoad", (void **)&p_cuModuleLoad, 12000, cudaEnableDefault, &q));
  CK(cudaGetDriverEntryPointByVersion("cuModuleGetFunction", (void **)&p_cuModuleGetFunction, 12000, cudaEnableDefault, &q));
  CK(cudaGetDriverEntryPointByVersion("cuFuncSetAttribute", (void **)&p_cuFuncSetAttribute, 12000, cudaEnableDefault, &q));
  CK(cudaGetDriverEntryPointByVersion("cuLaunchKernel", (void **)&p_cuLaunchKernel, 12000, cudaEnableDefault, &q));
  CK(cudaFree(0));
  if (getenv("SM90_CUBINS")) g_cubin_dir = getenv("SM90_CUBINS");
  int fails = 0;
  if (!strcmp(mode, "check")) {
    struct tc { const char *what; problem pr; int f16, d, bm, bn, st, mb; };
    /* B, Hq, Hkv, Sq, Sk, D, f16, bshd, lbq, lbk, density, split, share, empty */
    const tc cases[] = {
      {"bf16 d128 full tiles bhsd", {1, 2, 2, 1000, 1000, 128, 0, 0, 128, 128, 0.5, 0, 0, 0.1}, 0, 128, 128, 128, 2, 0},
      {"bf16 d128 full tiles, mb kernel", {1, 2, 2, 1000, 1000, 128, 0, 0, 128, 128, 0.5, 0, 0, 0.1}, 0, 128, 128, 128, 2, 1},
      {"bf16 d128 64-blocks (partial tiles)", {2, 2, 1, 777, 901, 128, 0, 0, 64, 64, 0.4, 0, 0, 0.1}, 0, 128, 128, 128, 2, 1},
      {"bf16 d128 96x48 blocks bshd gqa", {1, 4, 2, 1100, 950, 128, 0, 1, 96, 48, 0.4, 0, 0, 0.05}, 0, 128, 128, 128, 2, 1},
      {"bf16 d128 split rows + members", {1, 4, 2, 1500, 1300, 128, 0, 0, 64, 32, 0.5, 3, 1, 0.05}, 0, 128, 128, 128, 2, 1},
      {"fp16 d128 partial bshd split", {1, 3, 3, 900, 1200, 128, 1, 1, 64, 64, 0.3, 2, 0, 0.1}, 1, 128, 128, 128, 2, 1},
      {"bf16 d64 partial gqa members", {2, 4, 1, 800, 1000, 64, 0, 0, 64, 128, 0.4, 0, 1, 0.1}, 0, 64, 128, 128, 2, 1},
      {"bf16 d128 bn64", {1, 2, 2, 1000, 1111, 128, 0, 1, 128, 64, 0.4, 2, 0, 0.1}, 0, 128, 128, 64, 2, 1},
      {"bf16 d128 bm64", {1, 2, 1, 1000, 1000, 128, 0, 0, 64, 128, 0.4, 2, 1, 0.1}, 0, 128, 64, 128, 2, 1},
      {"bf16 d128 s3 full", {1, 2, 2, 2000, 2000, 128, 0, 0, 128, 128, 0.6, 0, 0, 0.1}, 0, 128, 128, 128, 3, 0},
      {"bf16 d64 s3 full", {1, 2, 2, 2000, 2000, 64, 0, 1, 128, 128, 0.6, 0, 0, 0.1}, 0, 64, 128, 128, 3, 0},
      /* consumer warpgroups skipping tiles their 64 rows do not select */
      {"skip: bf16 d128 64-blocks on 128x64, ragged", {1, 2, 2, 1050, 1000, 128, 0, 1, 64, 64, 0.15, 0, 0, 0.1}, 0, 128, 128, 64, 2, 1},
      {"skip: bf16 d128 64-blocks on 128x64 s3, gqa", {2, 4, 2, 1300, 1700, 128, 0, 0, 64, 64, 0.1, 0, 1, 0.1}, 0, 128, 128, 64, 3, 1},
      {"skip: bf16 d128 64-blocks on 128x128, split", {1, 4, 2, 1300, 1200, 128, 0, 0, 64, 64, 0.2, 3, 1, 0.05}, 0, 128, 128, 128, 2, 1},
      {"skip: bf16 d128 48x64 blocks (two segments)", {1, 2, 2, 1000, 1000, 128, 0, 1, 48, 64, 0.2, 0, 0, 0.1}, 0, 128, 128, 64, 2, 1},
      {"skip: bf16 d64 64-blocks on 128x64", {2, 4, 2, 900, 1000, 64, 0, 0, 64, 64, 0.2, 2, 0, 0.1}, 0, 64, 128, 64, 2, 1},
      {"bf16 d128 64x64 tiles", {1, 2, 2, 1000, 1000, 128, 0, 1, 64, 64, 0.3, 0, 0, 0.1}, 0, 128, 64, 64, 2, 1},
      /* two 64-row tasks a CTA (g3 at BM 64) */
      {"tpc2: bf16 d128 64x64, odd task count", {1, 3, 3, 1000, 1000, 128, 0, 1, 64, 64, 0.3, 0, 0, 0.1}, 0, 128, 64, 64, 2, 1},
      {"tpc2: bf16 d128 s3 48x32 blocks, split, gqa", {2, 4, 2, 1100, 1300, 128, 0, 0, 48, 32, 0.3, 3, 1, 0.1}, 0, 128, 64, 64, 3, 1},
      {"tpc2: fp16 d128 64x64 split", {1, 2, 2, 900, 1200, 128, 1, 1, 64, 64, 0.4, 2, 0, 0.2}, 1, 128, 64, 64, 2, 1},
      {"tpc2: bf16 d64 s3 64x64 gqa", {2, 4, 1, 700, 800, 64, 0, 0, 64, 64, 0.3, 0, 1, 0.1}, 0, 64, 64, 64, 3, 1},
      /* two Q buffers and prefetched records (2 stages, v7) */
      {"tpc2: bf16 d128 s2 48x32 blocks, split, gqa", {2, 4, 2, 1100, 1300, 128, 0, 0, 48, 32, 0.3, 3, 1, 0.1}, 0, 128, 64, 64, 2, 1},
      {"tpc2: bf16 d64 s2 64x64 gqa, empty rows", {2, 4, 1, 700, 800, 64, 0, 0, 64, 64, 0.3, 0, 1, 0.3}, 0, 64, 64, 64, 2, 1},
      {"tpc2: bf16 d128 s2 64x64 bshd, many empty rows", {1, 3, 3, 1300, 1000, 128, 0, 1, 64, 64, 0.2, 0, 0, 0.4}, 0, 128, 64, 64, 2, 1},
    };
    uint64_t seed = argc > 2 ? strtoull(argv[2], 0, 10) : 1;
    for (const tc &c : cases) {
      g_want_g3 = !strncmp(c.what, "tpc2", 4);
      const variant *v = find_variant(c.f16, c.d, c.bm, c.bn, c.st, c.mb);
      printf("case: %s  [%s] seed %llu\n", c.what, v->name, (unsigned long long)seed);
      result r = run_case(c.pr, *v, -1, 0, seed, true);
      const double tol = c.pr.f16 ? 2e-3 : 1e-2;
      const bool ok = r.rel_err < tol && r.bad_unwritten == 0 && r.lse_err < 1e-2;
      printf("  rel_err %.3e max_abs %.3e lse_err %.3e unwritten %ld  %s\n", r.rel_err, r.max_abs, r.lse_err,
             r.bad_unwritten, ok ? "OK" : "FAIL");
      fails += !ok;
      ++seed;
    }
  } else if (!strcmp(mode, "bench")) {
    /* bench S H D bm bn stages mb lb densities... ; SM90_SUFFIX picks an
       alternative build of the same variant (cubin name + suffix) */
    const int S = atoi(argv[2]), H = atoi(argv[3]), D = atoi(argv[4]), bm = atoi(argv[5]), bn = atoi(argv[6]),
              st = atoi(argv[7]), mb = atoi(argv[8]), lb = atoi(argv[9]);
    variant vv = *find_variant(0, D, bm, bn, st, mb);
    static char nm[128];
    if (getenv("SM90_SUFFIX")) { snprintf(nm, sizeof nm, "%s%s", vv.name, getenv("SM90_SUFFIX")); vv.name = nm; }
    const variant *v = &vv;
    for (int a = 10; a < argc; ++a) {
      /* SM90_LBK: key block size when it differs from the query block */
      const int lbk = getenv("SM90_LBK") ? atoi(getenv("SM90_LBK")) : lb;
      problem pr = {1, H, H, S, S, D, 0, 1, lb, lbk, atof(argv[a]), 0, 0, 0.0};
      result r = run_case(pr, *v, 48, 10, 7 + a, false);
      const bool ok = r.rel_err < 1e-2 && r.bad_unwritten == 0;
      printf("bench %-32s S=%d H=%d D=%d lb=%d density %.2f: %.3f ms  %.1f eff TFLOP/s  (sampled rel_err %.2e %s)\n",
             v->name, S, H, D, lb, pr.density, r.ms, r.tflops, r.rel_err, ok ? "ok" : "FAIL");
      fails += !ok;
    }
  }
  printf("%s\n", fails ? "FAILURES" : "all ok");
  return fails ? 1 : 0;
}
