/*
 * plan_probe.cu: development harness for the GPU planning kernels
 * (templates/plan_gpu.cuh), outside the library: loads a planner cubin,
 * plans a Wan2.1-sized random block mask (10% of blocks, one row in seven
 * empty, one empty head, 128-token blocks, tile 128x128 retain, row tasks)
 * and times each kernel alone and together, with CUDA events (median of
 * single launches) and graph replays (mean), so that the planning time can
 * be split between the kernels and the gaps.  Prints a hash of the plan
 * (tasks, tiles, members, counts) so that variants can be compared: equal
 * hashes mean byte-identical plans.  Cost: a second or two of device time.
 *
 *   nvcc -O2 -arch=sm_90a -o plan_probe tests/device/plan_probe.cu -lcuda   (tests/device/run BUILD probe)
 *   plan_probe CUBIN [H S] [--stats] [--iters N] [--split CHUNK] [--pdl] [--timeline]
 *              [--block B] [--kblock K [--gather]] [--vsa [--tile N] [--topk K]]
 *
 * --block B: B-token blocks and tiles (default 128).  --kblock K: key
 * blocks of K tokens (B x K blocks on B x K tiles); with --gather, a gather
 * plan (B x 2K tiles, each two selected key blocks; plan_layout.h).  --vsa: VSA's ragged
 * 4x4x4 cubes of Wan2.1-1.3B (624 blocks of 64/32/16/8 tokens, whole cubes
 * first), NxN tiles (default 64, combine), top-K (78) blocks a row at
 * random; the hash then covers the membership words and merges too.
 * --timeline also prints per-row times by the row's query segments and the
 * slowest rows (count: from its CTA's entry; emit: from its CTA's release).
 * CUBIN: the bundle's <arch>/tsr_plan.cubin, or one built with nvcc -cubin
 * from a file including plan_layout.h and plan_gpu.cuh.  --pdl launches
 * emit as runtime/gpuplan.c does on sm_90 (programmatic dependent launch);
 * --stats passes host-mapped features; --timeline needs a cubin built with
 * -DTSR_GP_TIMELINE and prints when each CTA reached the template's marks
 * (min / mean / max over CTAs, from the first count CTA's entry).
 *
 * Kernel names and launch shapes follow the cubin: if it has
 * tsr_plan_scan, three launches (count, scan, emit); else two (count and
 * emit, the shipped planner).  The parameter block is this tree's
 * plan_layout.h, so cubins of other trees may not match it.  Grid sizes
 * come from the rows a CTA of each kernel handles, read from the cubin's
 * global `tsr_gp_shape` (threads and rows a CTA per kernel) when present,
 * else 1024 threads x 32 rows and 256 x 8 rows (the shipped kernels).
 */
#include <cuda.h>

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <vector>
#include <algorithm>

#include "../../runtime/plan_layout.h"

#define CK(x)                                                                   \
  do {                                                                          \
    CUresult r_ = (x);                                                          \
    if (r_ != CUDA_SUCCESS) {                                                   \
      const char *s_ = "";                                                      \
      cuGetErrorString(r_, &s_);                                                \
      fprintf(stderr, "plan_probe: %s:%d: %s: %s\n", __FILE__, __LINE__, #x, s_); \
      exit(1);                                                                  \
    }                                                                           \
  } while (0)

static uint64_t rs = 7;
static uint32_t rnd(void)
{
  rs = rs * 6364136223846793005ULL + 1442695040888963407ULL;
  return (uint32_t)(rs >> 33);
}

static uint64_t fnv(uint64_t h, const void *p, size_t n)
{
  const unsigned char *c = (const unsigned char *)p;
  for (size_t i = 0; i < n; i++) h = (h ^ c[i]) * 1099511628211ULL;
  return h;
}

struct launch {
  CUfunction f;
  unsigned grid, threads;
  const char *name;
};

int main(int argc, char **argv)
{
  if (argc < 2) {
    fprintf(stderr, "usage: plan_probe CUBIN [H S] [--stats] [--iters N] [--split CHUNK] [--pdl] [--timeline]\n"
                    "                  [--block B] [--kblock K [--gather]] [--vsa [--tile N] [--topk K]]\n");
    return 2;
  }
  const char *cubin = argv[1];
  int H = 12, S = 32760, iters = 200, stats = 0, chunk = 0, ai = 2, pdl = 0, timeline = 0, vsa = 0, bs = 128,
      topk = 78, vtile = 64, kb = 0, gather = 0;
  if (argc > 3 && argv[2][0] != '-') {
    H = atoi(argv[2]);
    S = atoi(argv[3]);
    ai = 4;
  }
  for (; ai < argc; ai++) {
    if (!strcmp(argv[ai], "--stats")) stats = 1;
    else if (!strcmp(argv[ai], "--iters") && ai + 1 < argc) iters = atoi(argv[++ai]);
    else if (!strcmp(argv[ai], "--split") && ai + 1 < argc) chunk = atoi(argv[++ai]);
    else if (!strcmp(argv[ai], "--pdl")) pdl = 1;
    else if (!strcmp(argv[ai], "--timeline")) timeline = 1;
    else if (!strcmp(argv[ai], "--vsa")) vsa = 1;
    else if (!strcmp(argv[ai], "--block") && ai + 1 < argc) bs = atoi(argv[++ai]);
    else if (!strcmp(argv[ai], "--kblock") && ai + 1 < argc) kb = atoi(argv[++ai]);
    else if (!strcmp(argv[ai], "--gather")) gather = 1;
    else if (!strcmp(argv[ai], "--topk") && ai + 1 < argc) topk = atoi(argv[++ai]);
    else if (!strcmp(argv[ai], "--tile") && ai + 1 < argc) vtile = atoi(argv[++ai]);
  }
  /* --vsa: VSA's 4x4x4 cubes of Wan2.1-1.3B's 21x30x52 latent grid (624
   * cubes of 64/32/16/8 tokens, whole cubes first: tessera.methods.tile_order),
   * S = 32760, tile 64x64 (--tile N: NxN) over the variable blocks (combine), each row the
   * top-k (default 78) of 624 cubes at random. */
  std::vector<int> boff;
  if (vsa) {
    S = 32760;
    const int tl[6] = {4, 4, 4, 4, 4, 1}, hl[8] = {4, 4, 4, 4, 4, 4, 4, 2};
    std::vector<int> sz;
    for (int a = 0; a < 6; a++)
      for (int b2 = 0; b2 < 8; b2++)
        for (int c = 0; c < 13; c++) sz.push_back(tl[a] * hl[b2] * 4);
    std::stable_sort(sz.begin(), sz.end(), [](int x, int y) { return x > y; });
    boff.push_back(0);
    for (int x : sz) boff.push_back(boff.back() + x);
    bs = vtile; /* the tile (--tile, default 64) */
  }
  if (vsa || !kb) kb = bs;
  if (vsa) gather = 0;
  const int bn = gather ? 2 * kb : kb; /* the key tile */
  const int nq = vsa ? (int)boff.size() - 1 : (S + bs - 1) / bs, nk = vsa ? nq : (S + kb - 1) / kb;
  const int nqt = (S + bs - 1) / bs, nkt = (S + bn - 1) / bn;
  const int rows = H * nqt;

  CK(cuInit(0));
  CUdevice dev;
  CUcontext cx;
  CK(cuDeviceGet(&dev, 0));
  CK(cuCtxCreate(&cx, NULL, 0, dev));
  CUmodule mod;
  CK(cuModuleLoad(&mod, cubin));

  /* Mask: as tests/gpu_plan's timing. */
  std::vector<uint8_t> m((size_t)H * nq * nk);
  for (int h = 0; h < H && vsa; h++)
    for (int i = 0; i < nq; i++) {
      /* top-k of nk at random: a partial Fisher-Yates shuffle */
      std::vector<int> idx(nk);
      for (int j = 0; j < nk; j++) idx[j] = j;
      for (int j = 0; j < topk && j < nk; j++) {
        int x = j + (int)(rnd() % (unsigned)(nk - j));
        std::swap(idx[j], idx[x]);
        m[((size_t)h * nq + i) * nk + idx[j]] = 1;
      }
    }
  for (int h = 0; h < H && !vsa; h++)
    for (int i = 0; i < nq; i++) {
      int er = rnd() % 7 == 0;
      for (int j = 0; j < nk; j++) {
        int x = !(h == H - 1 || er) && rnd() / 2147483648.0 < 0.10;
        m[((size_t)h * nq + i) * nk + j] = x ? (uint8_t)(1 + rnd() % 200) : 0;
      }
    }

  tsr_gpuplan_params p;
  memset(&p, 0, sizeof p);
  CUdeviceptr dmask;
  CK(cuMemAlloc(&dmask, m.size()));
  CK(cuMemcpyHtoD(dmask, m.data(), m.size()));
  p.mask = (const void *)(uintptr_t)dmask;
  p.plane_b = 0;
  p.plane_h = nq;
  p.format = 0;
  p.pitch = nk;
  p.batch = 1;
  p.heads_q = H;
  p.nq = nq;
  p.nk = nk;
  p.bq = vsa ? 0 : bs;
  p.bk = vsa ? 0 : kb;
  p.seq_q = p.seq_k = S;
  p.bm = bs;
  p.bn = bn;
  p.gather = gather;
  p.nqt = nqt;
  p.nkt = nkt;
  p.n_rows = rows;
  p.chunk = chunk;
  p.gsz = nqt;      /* one head a group: no GQA */
  p.num_sms = 132;  /* the H200's, as the library's default */
  long long cap_tiles = (long long)rows * nkt;
  long long cap_slots = chunk ? std::min<long long>((long long)rows * ((nkt + chunk - 1) / chunk),
                                                     (256LL << 20) / (bs * 130 * 4))
                              : 0;
  /* variable blocks (runtime/gpuplan.c block_maps): block starts, each
   * token's block, each key tile's first and last block; worst-case words */
  int nseg_max = 1;
  std::vector<int> tb(S), tkb(2 * nkt);
  if (vsa) {
    for (int j = 0; j < nk; j++)
      for (int t = boff[j]; t < boff[j + 1]; t++) tb[t] = j;
    for (int u = 0; u < nkt; u++) {
      tkb[2 * u] = tb[u * bs];
      tkb[2 * u + 1] = tb[std::min((u + 1) * bs, S) - 1];
      nseg_max = std::max(nseg_max, tkb[2 * u + 1] - tkb[2 * u] + 1);
    }
  }
  p.cap_tiles = (int)cap_tiles;
  p.cap_words = vsa ? (int)std::min<long long>(cap_tiles * nseg_max * (bs / 32), 0x7fffffffLL) : 0;
  p.cap_slots = (int)cap_slots;
  p.cap_tasks = (int)(rows + cap_slots);
  CUdeviceptr d;
  auto alloc = [&](size_t n) {
    CUdeviceptr x;
    CK(cuMemAlloc(&x, n < 16 ? 16 : n));
    CK(cuMemsetD8(x, 0, n < 16 ? 16 : n));
    return x;
  };
  d = alloc((size_t)p.cap_tasks * sizeof(tsr_task_rec));
  p.tasks = (tsr_task_rec *)(uintptr_t)d;
  d = alloc((size_t)cap_tiles * sizeof(tsr_tile_rec));
  p.tiles = (tsr_tile_rec *)(uintptr_t)d;
  d = alloc((size_t)p.cap_tasks * sizeof(tsr_member_rec));
  p.members = (tsr_member_rec *)(uintptr_t)d;
  d = alloc(vsa ? (size_t)p.cap_words * 4 : 16);
  p.membership = (tsr_u32 *)(uintptr_t)d;
  if (vsa) {
    auto up = [&](const int *x, size_t n) {
      CUdeviceptr y = alloc(n * 4);
      CK(cuMemcpyHtoD(y, x, n * 4));
      return (const tsr_i32 *)(uintptr_t)y;
    };
    p.qoff = p.koff = up(boff.data(), boff.size());
    p.qblk = p.kblk = up(tb.data(), tb.size());
    p.tkb = up(tkb.data(), tkb.size());
    /* per 32 key columns: the first block, where the others start (gpuplan.c) */
    std::vector<int> kcw(2 * ((S + 31) / 32));
    for (int q = 0; q < (S + 31) / 32; q++) {
      unsigned starts = 0;
      for (int c = 32 * q + 1; c < std::min(32 * q + 32, S); c++)
        if (tb[c] != tb[c - 1]) starts |= 1u << (c - 32 * q);
      kcw[2 * q] = tb[32 * q];
      kcw[2 * q + 1] = (int)starts;
    }
    p.kcw = up(kcw.data(), kcw.size());
  }
  d = alloc(chunk ? (size_t)rows * sizeof(tsr_merge_rec) : 16);
  p.merges = (tsr_merge_rec *)(uintptr_t)d;
  d = alloc((size_t)rows * 4);
  p.row_len = (tsr_i32 *)(uintptr_t)d;
  d = alloc((size_t)rows * 4);
  p.row_part = (tsr_i32 *)(uintptr_t)d;
  d = alloc((size_t)rows * TSR_GP_ROW_INTS * 4);
  p.row_off = (tsr_i32 *)(uintptr_t)d;
  d = alloc((size_t)rows * 4);
  p.row_task = (tsr_i32 *)(uintptr_t)d;
  CUdeviceptr dcounts = alloc(TSR_GP_DSTATS * 4 + sizeof(tsr_gp_stats) + 4096);
  p.counts = (tsr_i32 *)(uintptr_t)dcounts;
  const int ncta = (rows + TSR_GP_COUNT_ROWS - 1) / TSR_GP_COUNT_ROWS;
  /* Look-back state, then room for a TSR_GP_TIMELINE build's marks. */
  d = alloc((size_t)ncta * TSR_GP_SCAN_STRIDE * 8 + ((size_t)ncta * 8 + (size_t)rows * 4 + (size_t)rows * 3) * 8);
  p.scan = (unsigned long long *)(uintptr_t)d;
  tsr_gp_stats *hst = NULL;
  if (stats) {
    CK(cuMemAllocHost((void **)&hst, sizeof *hst));
    memset(hst, 0, sizeof *hst);
  }
  p.stats = hst;

  /* Kernels and shapes. */
  int shape[6] = {1024, 32, 256, 8, 0, 0}; /* count threads, rows; emit threads, rows; scan threads, rows */
  {
    CUdeviceptr sp;
    size_t sz;
    if (cuModuleGetGlobal(&sp, &sz, mod, "tsr_gp_shape") == CUDA_SUCCESS && sz >= sizeof shape)
      CK(cuMemcpyDtoH(shape, sp, sizeof shape));
  }
  std::vector<launch> ls;
  {
    launch c, e, s;
    CK(cuModuleGetFunction(&c.f, mod, "tsr_plan_count"));
    c.threads = shape[0];
    c.grid = (rows + shape[1] - 1) / shape[1];
    c.name = "count";
    ls.push_back(c);
    if (cuModuleGetFunction(&s.f, mod, "tsr_plan_scan") == CUDA_SUCCESS) {
      s.threads = shape[4];
      s.grid = shape[5] ? (rows + shape[5] - 1) / shape[5] : 1;
      s.name = "scan";
      ls.push_back(s);
    }
    CK(cuModuleGetFunction(&e.f, mod, "tsr_plan_emit"));
    e.threads = shape[2];
    e.grid = (rows + shape[3] - 1) / shape[3];
    e.name = "emit";
    ls.push_back(e);
  }
  for (auto &l : ls) {
    int regs = 0, lmem = 0, smem = 0, occ = 0;
    cuFuncGetAttribute(&regs, CU_FUNC_ATTRIBUTE_NUM_REGS, l.f);
    cuFuncGetAttribute(&lmem, CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES, l.f);
    cuFuncGetAttribute(&smem, CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES, l.f);
    cuOccupancyMaxActiveBlocksPerMultiprocessor(&occ, l.f, l.threads, 0);
    printf("kernel %-6s grid %5u x %4u threads, %d regs, %d B local, %d B smem, %d CTAs/SM\n", l.name, l.grid,
           l.threads, regs, lmem, smem, occ);
  }

  CUstream st;
  CK(cuStreamCreate(&st, CU_STREAM_NON_BLOCKING));
  void *args[1] = {&p};
  auto run = [&](int mask_of_kernels) {
    for (size_t k = 0; k < ls.size(); k++)
      if (mask_of_kernels >> k & 1) {
        if (pdl && k > 0) {
          /* Programmatic dependent launch, as runtime/gpuplan.c on sm_90. */
          CUlaunchConfig lc;
          CUlaunchAttribute at;
          memset(&lc, 0, sizeof lc);
          memset(&at, 0, sizeof at);
          at.id = CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
          at.value.programmaticStreamSerializationAllowed = 1;
          lc.gridDimX = ls[k].grid;
          lc.gridDimY = lc.gridDimZ = 1;
          lc.blockDimX = ls[k].threads;
          lc.blockDimY = lc.blockDimZ = 1;
          lc.hStream = st;
          lc.attrs = &at;
          lc.numAttrs = 1;
          CK(cuLaunchKernelEx(&lc, ls[k].f, args, NULL));
        } else {
          CK(cuLaunchKernel(ls[k].f, ls[k].grid, 1, 1, ls[k].threads, 1, 1, 0, st, args, NULL));
        }
      }
  };
  const int all = (1 << ls.size()) - 1;
  for (int i = 0; i < 20; i++) run(all);
  CK(cuStreamSynchronize(st));

  /* Plan hash and counts. */
  {
    std::vector<int> cnt(TSR_GP_DSTATS);
    CK(cuMemcpyDtoH(cnt.data(), dcounts, cnt.size() * 4));
    int nt = cnt[TSR_GP_TASKS], nti = cnt[TSR_GP_TILES];
    std::vector<tsr_task_rec> tk(nt);
    std::vector<tsr_tile_rec> ti(nti);
    std::vector<tsr_member_rec> me(nt);
    if (nt) CK(cuMemcpyDtoH(tk.data(), (CUdeviceptr)(uintptr_t)p.tasks, nt * sizeof(tsr_task_rec)));
    if (nt) CK(cuMemcpyDtoH(me.data(), (CUdeviceptr)(uintptr_t)p.members, nt * sizeof(tsr_member_rec)));
    if (nti) CK(cuMemcpyDtoH(ti.data(), (CUdeviceptr)(uintptr_t)p.tiles, nti * sizeof(tsr_tile_rec)));
    uint64_t h = 1469598103934665603ULL;
    h = fnv(h, cnt.data(), (TSR_GP_OVERFLOW + 1) * 4); /* not DONE, STEP, PARTIAL: bookkeeping */
    h = fnv(h, cnt.data() + TSR_GP_EMPTY, (TSR_GP_COUNTS - TSR_GP_EMPTY) * 4);
    h = fnv(h, tk.data(), tk.size() * sizeof(tsr_task_rec));
    h = fnv(h, ti.data(), ti.size() * sizeof(tsr_tile_rec));
    h = fnv(h, me.data(), me.size() * sizeof(tsr_member_rec));
    const int nw = cnt[TSR_GP_WORDS], nmg = cnt[TSR_GP_MERGES];
    if (nw > 0 && nw <= p.cap_words) {
      std::vector<uint32_t> w(nw);
      CK(cuMemcpyDtoH(w.data(), (CUdeviceptr)(uintptr_t)p.membership, (size_t)nw * 4));
      h = fnv(h, w.data(), w.size() * 4);
    }
    if (chunk && nmg > 0) {
      std::vector<tsr_merge_rec> mg(nmg);
      CK(cuMemcpyDtoH(mg.data(), (CUdeviceptr)(uintptr_t)p.merges, (size_t)nmg * sizeof(tsr_merge_rec)));
      h = fnv(h, mg.data(), mg.size() * sizeof(tsr_merge_rec));
    }
    printf("plan: words=%d partial=%d slots=%d\n", nw, cnt[TSR_GP_PARTIAL], cnt[TSR_GP_SLOTS]);
    /* selected blocks (retain: the tiles), gather: ceil(half) of each row's */
    long long host_tiles = 0;
    for (size_t i = 0; i < m.size(); i += nk) {
      long long c = 0;
      for (int j = 0; j < nk; j++) c += m[i + j] != 0;
      host_tiles += gather ? (c + 1) / 2 : c;
    }
    printf("plan: H=%d S=%d rows=%d tasks=%d tiles=%d (mask %lld) merges=%d empty=%d step=%d hash %016llx\n", H, S,
           rows, nt, nti, host_tiles, cnt[TSR_GP_MERGES], cnt[TSR_GP_EMPTY], cnt[TSR_GP_STEP],
           (unsigned long long)h);
  }

  if (timeline) {
    /* Marks of a TSR_GP_TIMELINE build: one planning, times from the first
     * count CTA's entry; min / mean / max over CTAs. */
    const unsigned egrid = ls.back().grid;
    std::vector<unsigned long long> t((size_t)ncta * 8 + (size_t)egrid * 4);
    run(all);
    CK(cuStreamSynchronize(st));
    CK(cuMemcpyDtoH(t.data(), (CUdeviceptr)(uintptr_t)(p.scan + (size_t)ncta * TSR_GP_SCAN_STRIDE),
                    t.size() * 8));
    unsigned long long t0 = ~0ULL;
    for (int c = 0; c < ncta; c++) t0 = std::min(t0, t[(size_t)c * 8]);
    const char *cn[6] = {"count entry", "rows counted", "aggregate published", "look-back done",
                         "prefix published", "count CTA end"};
    for (int k = 0; k < 6; k++) {
      double mn = 1e30, mx = -1e30, sum = 0;
      int m = 0;
      for (int c = 0; c < ncta; c++) {
        if (!t[(size_t)c * 8 + k]) continue; /* a mark this CTA does not pass (CTA 0: no look-back) */
        double x = (double)(long long)(t[(size_t)c * 8 + k] - t0) * 1e-3;
        mn = std::min(mn, x), mx = std::max(mx, x), sum += x, m++;
      }
      printf("TIMELINE %-20s min %7.2f mean %7.2f max %7.2f us\n", cn[k], mn, sum / (m ? m : 1), mx);
    }
    const char *en[3] = {"emit entry", "emit dep released", "emit CTA end"};
    for (int k = 0; k < 3; k++) {
      double mn = 1e30, mx = -1e30, sum = 0;
      for (unsigned e = 0; e < egrid; e++) {
        double x = (double)(long long)(t[(size_t)ncta * 8 + (size_t)e * 4 + k] - t0) * 1e-3;
        mn = std::min(mn, x), mx = std::max(mx, x), sum += x;
      }
      printf("TIMELINE %-20s min %7.2f mean %7.2f max %7.2f us\n", en[k], mn, sum / egrid, mx);
    }
    /* Per row (a TSR_GP_RMARK build): count = row counted - its CTA's
     * entry; emit tiles / end = its marks - its emit CTA's release; by the
     * row's query segments, then the slowest rows. */
    std::vector<unsigned long long> rt((size_t)rows * 3);
    std::vector<int> rl(rows);
    CK(cuMemcpyDtoH(rt.data(),
                    (CUdeviceptr)(uintptr_t)(p.scan + (size_t)ncta * TSR_GP_SCAN_STRIDE + (size_t)ncta * 8 +
                                             (size_t)egrid * 4),
                    rt.size() * 8));
    CK(cuMemcpyDtoH(rl.data(), (CUdeviceptr)(uintptr_t)p.row_len, (size_t)rows * 4));
    const int epr = (int)(rows / egrid); /* rows an emit CTA */
    std::vector<double> rc(rows), ret(rows), ree(rows);
    std::vector<int> ns(rows);
    for (int r = 0; r < rows; r++) {
      const int qt = r % nqt, r0 = qt * bs, r1 = std::min(r0 + bs, S);
      ns[r] = vsa ? tb[r1 - 1] - tb[r0] + 1 : 1;
      const unsigned long long ce = t[(size_t)(r / TSR_GP_COUNT_ROWS) * 8];
      const unsigned long long er = t[(size_t)ncta * 8 + (size_t)(r / epr) * 4 + 1];
      rc[r] = (double)(long long)(rt[3 * (size_t)r] - ce) * 1e-3;
      ret[r] = (double)(long long)(rt[3 * (size_t)r + 1] - er) * 1e-3;
      ree[r] = (double)(long long)(rt[3 * (size_t)r + 2] - er) * 1e-3;
    }
    for (int n = 1; n <= 16; n++) {
      int c = 0;
      double a[6] = {0, 0, 0, 0, 0, 0};
      long long ln = 0;
      for (int r = 0; r < rows; r++)
        if (ns[r] == n) {
          c++, ln += rl[r];
          a[0] += rc[r], a[1] = std::max(a[1], rc[r]), a[2] += ret[r], a[3] = std::max(a[3], ret[r]);
          a[4] += ree[r], a[5] = std::max(a[5], ree[r]);
        }
      if (c)
        printf("ROWS nseg %2d: %5d rows, mean len %6.1f; count mean %7.2f max %7.2f; emit tiles mean %7.2f max %7.2f; "
               "emit end mean %7.2f max %7.2f us\n",
               n, c, (double)ln / c, a[0] / c, a[1], a[2] / c, a[3], a[4] / c, a[5]);
    }
    std::vector<int> ord(rows);
    for (int r = 0; r < rows; r++) ord[r] = r;
    std::sort(ord.begin(), ord.end(), [&](int a, int b) { return rc[a] > rc[b]; });
    for (int i = 0; i < 5; i++)
      printf("SLOW count row %5d (q tile %4d) nseg %d len %4d: %7.2f us\n", ord[i], ord[i] % nqt, ns[ord[i]],
             rl[ord[i]], rc[ord[i]]);
    std::sort(ord.begin(), ord.end(), [&](int a, int b) { return ree[a] > ree[b]; });
    for (int i = 0; i < 5; i++)
      printf("SLOW emit row %5d (q tile %4d) nseg %d len %4d: tiles %7.2f end %7.2f us\n", ord[i], ord[i] % nqt,
             ns[ord[i]], rl[ord[i]], ret[ord[i]], ree[ord[i]]);
  }

  CUevent e0, e1;
  CK(cuEventCreate(&e0, CU_EVENT_DEFAULT));
  CK(cuEventCreate(&e1, CU_EVENT_DEFAULT));
  auto time_events = [&](int km) {
    std::vector<float> ts(iters);
    for (int i = 0; i < iters; i++) {
      CK(cuEventRecord(e0, st));
      run(km);
      CK(cuEventRecord(e1, st));
      CK(cuEventSynchronize(e1));
      CK(cuEventElapsedTime(&ts[i], e0, e1));
    }
    std::sort(ts.begin(), ts.end());
    return ts[iters / 2] * 1e3f;
  };
  auto time_graph = [&](int km) {
    CUgraph g;
    CUgraphExec ex;
    CK(cuStreamBeginCapture(st, CU_STREAM_CAPTURE_MODE_GLOBAL));
    run(km);
    CK(cuStreamEndCapture(st, &g));
    CK(cuGraphInstantiate(&ex, g, 0));
    CK(cuGraphLaunch(ex, st));
    CK(cuStreamSynchronize(st));
    float ms;
    CK(cuEventRecord(e0, st));
    for (int i = 0; i < iters; i++) CK(cuGraphLaunch(ex, st));
    CK(cuEventRecord(e1, st));
    CK(cuEventSynchronize(e1));
    CK(cuEventElapsedTime(&ms, e0, e1));
    cuGraphExecDestroy(ex);
    cuGraphDestroy(g);
    return ms * 1e3f / iters;
  };
  /* Each kernel alone (the whole plan first, so that its inputs are
   * current; a kernel alone re-runs on the same data), then all. */
  for (size_t k = 0; k < ls.size(); k++) {
    run(all);
    float ev = time_events(1 << k), gr = time_graph(1 << k);
    printf("TIME %-10s alone: %7.2f us events (median of %d), %7.2f us graph replay (mean)\n", ls[k].name, ev,
           iters, gr);
  }
  {
    float ev = time_events(all), gr = time_graph(all);
    printf("TIME %-10s      : %7.2f us events (median of %d), %7.2f us graph replay (mean)\n", "plan", ev, iters,
           gr);
  }
  CK(cuStreamSynchronize(st));
  return 0;
}
