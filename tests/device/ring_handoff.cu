/*
 * ring_handoff.cu: the dyn layout's task-ring hand-off (templates/attn_sm90.cuh,
 * dyn_put / dyn_get) alone, outside the attention kernel, to settle what
 * compute-sanitizer racecheck reports on it (issue 20; notes/sm90-dyn-2026-12-02b.md).
 *
 * The hand-off, as in the kernel: one producer thread per CTA claims tasks
 * with atomicAdd on a counter and publishes each in slot j % 2 of a two-slot
 * ring in shared memory: it waits on the slot's empty mbarrier (parity),
 * issues fence.proxy.async.shared::cta, arms the slot's full barrier with
 * expect_tx 48 and fills the slot with two cp.async.bulk copies (the task's
 * 32-byte record, then 16 bytes of its first member) completing on it.  The
 * consumer warps (4 per consumer warpgroup) wait on the full barrier, read
 * the 48 bytes with three ld.shared.v4, __syncwarp, and lane 0 of each warp
 * arrives on the empty barrier (count 4 * NC).  A record with n_members < 0
 * ("none left", copied from a sentinel in global memory) ends the stream.
 * This order (reads, arrive [release], producer's wait [acquire], proxy
 * fence, async write) is what the PTX memory model asks of a generic-proxy
 * read followed by an async-proxy write of the same bytes: the write cannot
 * overtake the reads.
 *
 *   nvcc -O2 -arch=sm_90a -I templates -o ring_handoff tests/device/ring_handoff.cu
 *   ring_handoff MODE [--ctas N] [--tasks N] [--nc 1|2] [--poison] [--delay NS] [--seed S]
 *
 * MODE:
 *   ok      the kernel's hand-off, as above
 *   early   mutation: each warp arrives on the empty barrier BEFORE its reads
 *           (the producer may then overwrite a slot a warp has not read yet)
 *   token   the producer takes part in the empty barrier (count 4 * NC + 1):
 *           it arrives and waits on the state token its arrival returned
 *           (cuda::barrier's arrive / wait pattern) instead of a parity
 *   sts     the slot written with ordinary st.shared by the producer (the
 *           first form of the ring, before the bulk copies), no proxy fence
 * --poison  after its empty-barrier wait the producer overwrites the slot
 *           with a poison pattern (st.shared, then the proxy fence) before
 *           the copies: a read that is early (before the full barrier
 *           completes) or late (after the arrive let the producer in) sees
 *           poison or another task's record.
 * --delay NS  each consumer warp sleeps a pseudo-random 0..NS ns between
 *           its full-barrier wait and its reads (a warp descheduled at the
 *           worst moment), and as long again after its reads (the task's
 *           work), so the ring wraps under every interleaving the delays
 *           make.
 *
 * Checked (every mode): every lane of every consumer warp checks each record
 * it read word by word against the task's known contents (f(t, i)); every
 * warp counts each task it took (seen[t]); afterwards each task must have
 * been taken by exactly the 4 * NC consumer warps of one CTA, and every
 * stream must end on the sentinel.  Prints "mismatches N" (bad records
 * plus miscounted tasks) and exits 0 when N == 0, 1 otherwise, 2 on a bad
 * command line.  So `ok --poison` must pass and `early --poison` must fail:
 * the test has teeth against a hand-off that lets the producer in before
 * the reads.  Under compute-sanitizer racecheck, run with few tasks.
 */
#include <cuda_runtime.h>

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The kernel's own mbarrier and bulk-copy primitives (nvcc -I templates). */
#include "sm90_sync.cuh"

enum { MODE_OK, MODE_EARLY, MODE_TOKEN, MODE_STS };

#define CK(x)                                                                      \
  do {                                                                             \
    cudaError_t e_ = (x);                                                          \
    if (e_ != cudaSuccess) {                                                       \
      fprintf(stderr, "ring_handoff: %s:%d: %s: %s\n", __FILE__, __LINE__, #x,     \
              cudaGetErrorString(e_));                                             \
      exit(1);                                                                     \
    }                                                                              \
  } while (0)

/* The 12 words of task t's slot (8 of its record, 4 of its first member);
 * word 6 is n_members: 1..3, never negative (negative = none left). */
__host__ __device__ static inline int32_t word_of(int t, int i) {
  if (i == 0) return t;
  if (i == 6) return 1 + t % 3;
  uint32_t h = (uint32_t)t * 2654435761u ^ (uint32_t)(i * 40503);
  h ^= h >> 13;
  h *= 0x5bd1e995u;
  h ^= h >> 15;
  return (int32_t)(h & 0x3fffffff);
}
#define POISON 0x7eadbeef /* positive: a poisoned record is not "none left" */

struct Params {
  const int4 *recs;  /* task t: recs[2 t], recs[2 t + 1] (32 bytes), members */
  const int4 *mems;  /* task t's first member: mems[t] (16 bytes) */
  const int4 *sentinel; /* 3 x int4: n_members -1 */
  int *ctr;          /* next task */
  int *seen;         /* per task: warps that took it */
  int *owner;        /* per task: the CTA that took it (first writer) */
  unsigned long long *bad; /* lanes that read a bad record */
  int *ended;        /* streams (warps) that ended on the sentinel */
  int n_tasks, nc, mode, poison, delay;
  unsigned seed; /* of the consumers' delays */
};

__device__ static inline uint32_t smem_u32(const void *p) {
  return (uint32_t)__cvta_generic_to_shared(p);
}
/* token mode: arrive, then wait for the phase that arrival belongs to */
__device__ static inline void mbar_arrive_wait(uint32_t bar) {
  uint64_t state;
  uint32_t done;
  asm volatile("mbarrier.arrive.shared::cta.b64 %0, [%1];\n" : "=l"(state) : "r"(bar) : "memory");
  do {
    asm volatile("{\n.reg .pred p;\n"
                 "mbarrier.try_wait.shared::cta.b64 p, [%1], %2;\n"
                 "selp.u32 %0, 1, 0, p;\n}\n"
                 : "=r"(done)
                 : "r"(bar), "l"(state)
                 : "memory");
  } while (!done);
}
__device__ static inline uint32_t lcg(uint32_t x) { return x * 1664525u + 1013904223u; }

/* The ring: full[2], empty[2], then two 48-byte slots (16-byte aligned). */
struct __align__(16) Ring {
  uint64_t full[2], empty[2];
  int4 slot[2][3];
};

/* Producer (one thread): as dyn_put, task by task, until "none left". */
__device__ static void producer(const Params &p, Ring &r) {
  int nxt = 0;
  for (int j = 0, task = atomicAdd(p.ctr, 1);; ++j, task = nxt) {
    const int k = j & 1;
    const int4 *src = p.sentinel, *msrc = p.sentinel;
    if (task < p.n_tasks) {
      src = p.recs + 2 * task;
      msrc = p.mems + task;
    }
    if (p.mode == MODE_TOKEN) {
      if (j >= 2) mbar_arrive_wait(smem_u32(&r.empty[k]));
    } else {
      tsr_mbar_wait(smem_u32(&r.empty[k]), ((j >> 1) & 1) ^ 1);
    }
    if (p.poison) {
      const int4 z = make_int4(POISON, POISON, POISON, POISON);
      r.slot[k][0] = z;
      r.slot[k][1] = z;
      r.slot[k][2] = z;
    }
    if (p.mode == MODE_STS) {
      r.slot[k][0] = src[0];
      r.slot[k][1] = src[1];
      r.slot[k][2] = msrc[0];
      tsr_mbar_arrive(smem_u32(&r.full[k]));
    } else {
      /* the consumers' reads (generic proxy) before the copies (async) */
      asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
      tsr_mbar_expect_tx(smem_u32(&r.full[k]), 48);
      tsr_bulk_load(smem_u32(&r.slot[k][0]), src, 32, smem_u32(&r.full[k]));
      tsr_bulk_load(smem_u32(&r.slot[k][2]), msrc, 16, smem_u32(&r.full[k]));
    }
    if (task >= p.n_tasks) break;
    nxt = atomicAdd(p.ctr, 1);
  }
}

/* Consumer warp: as dyn_get, then checks what it read. */
__device__ static void consumer(const Params &p, Ring &r, int warp) {
  const int lane = threadIdx.x & 31;
  uint32_t rs = lcg(p.seed ^ (blockIdx.x * 977u + warp * 131u + 7u));
  for (int j = 0;; ++j) {
    const int k = j & 1;
    int4 a, b, c;
    tsr_mbar_wait(smem_u32(&r.full[k]), (j >> 1) & 1);
    if (p.mode == MODE_EARLY) {
      __syncwarp();
      if (lane == 0) tsr_mbar_arrive(smem_u32(&r.empty[k]));
    }
    if (p.delay) {
      rs = lcg(rs);
      __nanosleep(rs % (uint32_t)p.delay);
      __syncwarp();
    }
    const uint32_t s = smem_u32(&r.slot[k][0]);
    asm volatile("ld.shared.v4.b32 {%0, %1, %2, %3}, [%12];\n"
                 "ld.shared.v4.b32 {%4, %5, %6, %7}, [%12+16];\n"
                 "ld.shared.v4.b32 {%8, %9, %10, %11}, [%12+32];\n"
                 : "=r"(a.x), "=r"(a.y), "=r"(a.z), "=r"(a.w), "=r"(b.x), "=r"(b.y), "=r"(b.z),
                   "=r"(b.w), "=r"(c.x), "=r"(c.y), "=r"(c.z), "=r"(c.w)
                 : "r"(s)
                 : "memory");
    if (p.mode != MODE_EARLY) {
      __syncwarp();
      if (lane == 0) tsr_mbar_arrive(smem_u32(&r.empty[k]));
    }
    const int w[12] = {a.x, a.y, a.z, a.w, b.x, b.y, b.z, b.w, c.x, c.y, c.z, c.w};
    if (w[6] < 0) { /* none left: the whole record must be the sentinel's */
      bool ok = true;
      for (int i = 0; i < 12; ++i) ok &= w[i] == -1;
      if (!ok) atomicAdd(p.bad, 1ull);
      if (lane == 0) atomicAdd(p.ended, 1);
      return;
    }
    const int t = w[0];
    bool ok = t >= 0 && t < p.n_tasks;
    for (int i = 1; i < 12 && ok; ++i) ok = w[i] == word_of(t, i);
    if (!ok) {
      atomicAdd(p.bad, 1ull);
    } else if (lane == 0) {
      atomicAdd(p.seen + t, 1);
      atomicCAS(p.owner + t, -1, (int)blockIdx.x);
      if (p.owner[t] != (int)blockIdx.x) atomicAdd(p.bad, 1000000ull); /* two CTAs: never */
    }
    if (p.delay) { /* the task's work */
      rs = lcg(rs);
      __nanosleep(rs % (uint32_t)p.delay);
    }
  }
}

__global__ void __launch_bounds__(384) ring_kernel(Params p) {
  __shared__ Ring r;
  const int warp = threadIdx.x >> 5;
  if (threadIdx.x == 0) {
    for (int k = 0; k < 2; ++k) {
      tsr_mbar_init(smem_u32(&r.full[k]), 1);
      tsr_mbar_init(smem_u32(&r.empty[k]), 4 * p.nc + (p.mode == MODE_TOKEN));
    }
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  }
  __syncthreads();
  if (warp < 4) { /* warpgroup 0: the producer thread */
    if (threadIdx.x == 0) producer(p, r);
  } else {
    consumer(p, r, warp - 4);
  }
}

static int usage(const char *why) {
  fprintf(stderr, "ring_handoff: %s\nusage: ring_handoff ok|early|token|sts [--ctas N] "
                  "[--tasks N] [--nc 1|2] [--poison] [--delay NS] [--seed S]\n", why);
  return 2;
}

int main(int argc, char **argv) {
  if (argc < 2) return usage("no mode given");
  int mode;
  if (!strcmp(argv[1], "ok")) mode = MODE_OK;
  else if (!strcmp(argv[1], "early")) mode = MODE_EARLY;
  else if (!strcmp(argv[1], "token")) mode = MODE_TOKEN;
  else if (!strcmp(argv[1], "sts")) mode = MODE_STS;
  else {
    fprintf(stderr, "ring_handoff: unknown mode '%s'\n", argv[1]);
    return usage("mode must be ok, early, token or sts");
  }
  int ctas = 132, n_tasks = 132 * 2000, nc = 2, poison = 0, delay = 0;
  unsigned seed = 1;
  for (int i = 2; i < argc; ++i) {
    char *end = NULL;
    long v = 0;
    if (!strcmp(argv[i], "--poison")) {
      poison = 1;
      continue;
    }
    if (i + 1 >= argc) return usage("an option lacks its value");
    v = strtol(argv[i + 1], &end, 10);
    if (!*argv[i + 1] || *end || v < 0 || v > 100000000) {
      fprintf(stderr, "ring_handoff: bad value '%s' for %s\n", argv[i + 1], argv[i]);
      return 2;
    }
    if (!strcmp(argv[i], "--ctas") && v >= 1 && v <= 10000) ctas = (int)v;
    else if (!strcmp(argv[i], "--tasks") && v >= 1) n_tasks = (int)v;
    else if (!strcmp(argv[i], "--nc") && (v == 1 || v == 2)) nc = (int)v;
    else if (!strcmp(argv[i], "--delay")) delay = (int)v;
    else if (!strcmp(argv[i], "--seed")) seed = (unsigned)v;
    else {
      fprintf(stderr, "ring_handoff: bad option '%s' (value %ld)\n", argv[i], v);
      return 2;
    }
    ++i;
  }
  /* the task records: word i of task t is word_of(t, i) */
  int4 *h_recs = (int4 *)malloc(sizeof(int4) * 2 * (size_t)n_tasks);
  int4 *h_mems = (int4 *)malloc(sizeof(int4) * (size_t)n_tasks);
  for (int t = 0; t < n_tasks; ++t) {
    h_recs[2 * t] = make_int4(word_of(t, 0), word_of(t, 1), word_of(t, 2), word_of(t, 3));
    h_recs[2 * t + 1] = make_int4(word_of(t, 4), word_of(t, 5), word_of(t, 6), word_of(t, 7));
    h_mems[t] = make_int4(word_of(t, 8), word_of(t, 9), word_of(t, 10), word_of(t, 11));
  }
  Params p;
  memset(&p, 0, sizeof p);
  int4 *d_recs, *d_mems, *d_sent;
  CK(cudaMalloc(&d_recs, sizeof(int4) * 2 * (size_t)n_tasks));
  CK(cudaMalloc(&d_mems, sizeof(int4) * (size_t)n_tasks));
  CK(cudaMalloc(&d_sent, sizeof(int4) * 3));
  CK(cudaMemcpy(d_recs, h_recs, sizeof(int4) * 2 * (size_t)n_tasks, cudaMemcpyHostToDevice));
  CK(cudaMemcpy(d_mems, h_mems, sizeof(int4) * (size_t)n_tasks, cudaMemcpyHostToDevice));
  CK(cudaMemset(d_sent, 0xff, sizeof(int4) * 3));
  CK(cudaMalloc(&p.ctr, sizeof(int)));
  CK(cudaMemset(p.ctr, 0, sizeof(int)));
  CK(cudaMalloc(&p.seen, sizeof(int) * (size_t)n_tasks));
  CK(cudaMemset(p.seen, 0, sizeof(int) * (size_t)n_tasks));
  CK(cudaMalloc(&p.owner, sizeof(int) * (size_t)n_tasks));
  CK(cudaMemset(p.owner, 0xff, sizeof(int) * (size_t)n_tasks));
  CK(cudaMalloc(&p.bad, sizeof(unsigned long long)));
  CK(cudaMemset(p.bad, 0, sizeof(unsigned long long)));
  CK(cudaMalloc(&p.ended, sizeof(int)));
  CK(cudaMemset(p.ended, 0, sizeof(int)));
  p.recs = d_recs;
  p.mems = d_mems;
  p.sentinel = d_sent;
  p.n_tasks = n_tasks;
  p.nc = nc;
  p.mode = mode;
  p.poison = poison;
  p.delay = delay;
  p.seed = seed;
  cudaEvent_t e0, e1;
  CK(cudaEventCreate(&e0));
  CK(cudaEventCreate(&e1));
  CK(cudaEventRecord(e0));
  ring_kernel<<<ctas, 128 * (1 + nc)>>>(p);
  CK(cudaGetLastError());
  CK(cudaEventRecord(e1));
  CK(cudaDeviceSynchronize());
  float ms = 0;
  CK(cudaEventElapsedTime(&ms, e0, e1));
  int *seen = (int *)malloc(sizeof(int) * (size_t)n_tasks);
  unsigned long long bad = 0;
  int ended = 0;
  CK(cudaMemcpy(seen, p.seen, sizeof(int) * (size_t)n_tasks, cudaMemcpyDeviceToHost));
  CK(cudaMemcpy(&bad, p.bad, sizeof bad, cudaMemcpyDeviceToHost));
  CK(cudaMemcpy(&ended, p.ended, sizeof ended, cudaMemcpyDeviceToHost));
  long long miscount = 0, first = -1;
  for (int t = 0; t < n_tasks; ++t)
    if (seen[t] != 4 * nc) {
      miscount += llabs((long long)seen[t] - 4 * nc);
      if (first < 0) first = t;
    }
  const int want_ended = ctas * 4 * nc;
  const long long mism = (long long)bad + miscount + llabs((long long)ended - want_ended);
  printf("ring_handoff %s%s: %d CTAs x %d consumer warps, %d tasks (%.1f ring wraps a stream), "
         "delay %d ns, %.3f ms: bad records %llu (lanes), miscounted tasks %lld (first %lld), "
         "streams ended %d of %d; mismatches %lld\n",
         argv[1], poison ? " --poison" : "", ctas, 4 * nc, n_tasks, n_tasks / (2.0 * ctas), delay,
         ms, bad, miscount, first, ended, want_ended, mism);
  return mism == 0 ? 0 : 1;
}
