/*
 * sm80_emu_rt.cc: the runtime of sm80_emu.h (fibers, barriers, warp
 * collectives, cp.async groups, shared memory) and a fake CUDA driver:
 * built with the emulated kernels into a libcuda.so.1 (tests/device/
 * sm80_emu.sh) that libtessera loads through dlopen as it would the real
 * one, so tests/gpu_attn runs the sm80 kernels of the bundle on the CPU,
 * through the real upload and launch code.  Development tool: x86-64 only.
 *
 * Environment: EMU_CC (compute capability the fake device reports, default
 * 8.0: the sm_80 cubins' variants run), EMU_SMS (multiprocessors, default
 * 3, so persistent grids stride), EMU_LATE=1 (cp.async lands at the
 * issuing thread's wait_group, not at issue), EMU_SEED=n (random fiber
 * order instead of round robin), EMU_TRACE=1 (one line a launch).
 */
#include "sm80_emu.h"

#include <cuda.h>

#include <time.h>

#include <map>
#include <random>
#include <string>
#include <vector>

/* ---- kernels registered by the variant objects ---- */
struct emu_kernel {
  void (*run)(const void *params);
  size_t param_bytes;
};
static std::map<std::string, emu_kernel> &kernels()
{
  static std::map<std::string, emu_kernel> k;
  return k;
}
void emu_register(const char *name, void (*run)(const void *), size_t param_bytes)
{
  kernels()[name] = emu_kernel{ run, param_bytes };
}

static void die(const char *fmt, const char *a = "", long b = 0)
{
  fprintf(stderr, "emu: ");
  fprintf(stderr, fmt, a, b);
  fprintf(stderr, "\n");
  abort();
}

/* ---- fibers ---- */
extern "C" void emu_swap(void **save_sp, void *load_sp);
asm(".text\n.globl emu_swap\n.type emu_swap,@function\nemu_swap:\n"
    "pushq %rbp\npushq %rbx\npushq %r12\npushq %r13\npushq %r14\npushq %r15\n"
    "movq %rsp, (%rdi)\nmovq %rsi, %rsp\n"
    "popq %r15\npopq %r14\npopq %r13\npopq %r12\npopq %rbx\npopq %rbp\nret\n");

struct copy_t {
  unsigned dst;
  const void *src;
  int bytes, group;
};

enum { F_READY, F_BLOCKED, F_DONE };
struct fiber {
  void *sp;
  char *stack;
  emu_dim3 tid;
  int lane, warp, state;
  long par;                  /* collectives done: slot parity */
  std::vector<copy_t> copies; /* late mode: issued, not landed */
  int group;                 /* cp.async groups committed */
};

struct barrier {
  int count = 0, need = 0;
  std::vector<fiber *> waiters;
};

static const size_t STACK = 256 * 1024;
static std::vector<fiber> fibers;
static fiber *cur;
static void *sched_sp;
static std::vector<int> ready;
static barrier cta_bar;
static std::vector<barrier> warp_bar;
struct warp_slots {
  emu_slot in[2][32], out[2][32];
  int tag[2][32];
};
static std::vector<warp_slots> slots;
static void (*cur_run)(const void *);
static const void *cur_params;
static unsigned cur_smem_bytes;
static int late_mode = -1;
static std::mt19937 *rng;

emu_dim3 emu_block_idx, emu_grid_dim, emu_block_dim;
unsigned char tsr_smem[256 * 1024] __attribute__((aligned(1024)));

const emu_dim3 &emu_tid() { return cur->tid; }
int emu_lane() { return cur->lane; }

static void yield_blocked()
{
  cur->state = F_BLOCKED;
  emu_swap(&cur->sp, sched_sp);
}

static void make_ready(fiber *f)
{
  f->state = F_READY;
  ready.push_back((int)(f - fibers.data()));
}

static void arrive(barrier &b, void (*last)(void *), void *arg)
{
  if (++b.count == b.need) {
    b.count = 0;
    if (last) last(arg);
    for (fiber *f : b.waiters) make_ready(f);
    b.waiters.clear();
    return;
  }
  b.waiters.push_back(cur);
  yield_blocked();
}

void __syncthreads() { arrive(cta_bar, NULL, NULL); }

struct coll_arg {
  warp_slots *w;
  int par;
  emu_warp_fn fn;
};
static void coll_last(void *p)
{
  coll_arg *a = (coll_arg *)p;
  int l;
  for (l = 1; l < 32; l++)
    if (a->w->tag[a->par][l] != a->w->tag[a->par][0]) {
      fprintf(stderr, "emu: divergent warp collective: lane 0 at instruction %d, lane %d at %d\n",
              a->w->tag[a->par][0], l, a->w->tag[a->par][l]);
      abort();
    }
  if (a->fn) a->fn(a->w->in[a->par], a->w->out[a->par]);
  else memcpy(a->w->out[a->par], a->w->in[a->par], sizeof a->w->out[a->par]);
}

const emu_slot *emu_warp_collective(const uint32_t *in, int n, int tag, emu_warp_fn fn)
{
  warp_slots &w = slots[cur->warp];
  int par = (int)(cur->par++ & 1);
  coll_arg a = { &w, par, fn };
  memcpy(w.in[par][cur->lane], in, (size_t)n * 4);
  w.tag[par][cur->lane] = tag;
  if (emu_block_dim.x % 32) die("block of %s%ld threads is not whole warps", "", (long)emu_block_dim.x);
  arrive(warp_bar[cur->warp], coll_last, &a);
  return w.out[par];
}

unsigned char *emu_shared(unsigned addr, unsigned bytes, const char *what)
{
  if ((unsigned long)addr + bytes > cur_smem_bytes) {
    fprintf(stderr, "emu: %s touches shared bytes [%u, %u), outside the %u the launch has\n", what, addr,
            addr + bytes, cur_smem_bytes);
    abort();
  }
  return tsr_smem + addr;
}

/* ---- device memory: every allocation, for cp.async source checks ---- */
static std::map<uintptr_t, size_t> allocs;
static const size_t GUARD = 64;

static void check_global(const void *p, size_t n, const char *what)
{
  uintptr_t a = (uintptr_t)p;
  auto it = allocs.upper_bound(a);
  if (it != allocs.begin()) {
    --it;
    if (a >= it->first && a + n <= it->first + it->second) return;
  }
  fprintf(stderr, "emu: %s reads %zu bytes at %p, outside every device allocation\n", what, n, p);
  abort();
}

static void land(const copy_t &c)
{
  unsigned char *d = emu_shared(c.dst, 16, "cp.async");
  if (c.bytes) memcpy(d, c.src, (size_t)c.bytes);
  memset(d + c.bytes, 0, (size_t)(16 - c.bytes));
}

void emu_cp_async(unsigned dst, const void *src, int src_bytes)
{
  copy_t c = { dst, src, src_bytes, cur->group };
  emu_shared(dst, 16, "cp.async");
  if (dst % 16) die("cp.async shared address %s%ld not 16-byte aligned", "", (long)dst);
  if (src_bytes < 0 || src_bytes > 16) die("cp.async source size %s%ld", "", (long)src_bytes);
  if (src_bytes) {
    if ((uintptr_t)src % 16) die("cp.async global address %s%ld not 16-byte aligned", "", (long)(uintptr_t)src);
    check_global(src, (size_t)src_bytes, "cp.async");
  }
  if (late_mode) cur->copies.push_back(c);
  else land(c);
}

void emu_cp_commit() { cur->group++; }

void emu_cp_wait(int n)
{
  std::vector<copy_t> keep;
  for (const copy_t &c : cur->copies) {
    if (c.group < cur->group - n) land(c);
    else keep.push_back(c);
  }
  cur->copies.swap(keep);
}

static void fiber_entry()
{
  cur_run(cur_params);
  if (!cur->copies.empty())
    die("thread %s%ld exits with cp.async copies never waited for", "", (long)cur->tid.x);
  cur->state = F_DONE;
  emu_swap(&cur->sp, sched_sp);
  die("resumed a finished fiber%s%ld", "", 0);
}

static void run_block(unsigned nthreads)
{
  unsigned i;
  if (fibers.size() < nthreads) {
    size_t old = fibers.size();
    fibers.resize(nthreads);
    for (i = (unsigned)old; i < nthreads; i++) fibers[i].stack = (char *)malloc(STACK);
  }
  warp_bar.assign((nthreads + 31) / 32, barrier());
  slots.resize(warp_bar.size());
  for (barrier &b : warp_bar) b.need = 32;
  cta_bar = barrier();
  cta_bar.need = (int)nthreads;
  ready.clear();
  for (i = 0; i < nthreads; i++) {
    fiber &f = fibers[i];
    void **top = (void **)(((uintptr_t)(f.stack + STACK)) & ~(uintptr_t)15);
    top[-1] = NULL;
    top[-2] = (void *)fiber_entry;
    for (int r = 3; r <= 8; r++) top[-r] = NULL;
    f.sp = top - 8;
    f.tid = emu_dim3{ i, 0, 0 };
    f.lane = (int)(i % 32);
    f.warp = (int)(i / 32);
    f.par = 0;
    f.group = 0;
    f.copies.clear();
    f.state = F_READY;
    ready.push_back((int)i);
  }
  /* Poison: a read of shared memory no copy has written is a NaN. */
  memset(tsr_smem, 0xff, cur_smem_bytes);
  unsigned done = 0, rr = 0;
  while (done < nthreads) {
    if (ready.empty()) die("deadlock: %s%ld threads wait at barriers no one else reaches", "", (long)(nthreads - done));
    size_t k = rng ? (*rng)() % ready.size() : 0;
    int idx = ready[k];
    if (rng) {
      ready[k] = ready.back();
      ready.pop_back();
    } else {
      ready.erase(ready.begin());
    }
    (void)rr;
    cur = &fibers[idx];
    emu_swap(&sched_sp, cur->sp);
    if (cur->state == F_DONE) done++;
    else if (cur->state == F_READY) ready.push_back(idx);
  }
  cur = NULL;
}

static void emu_init()
{
  if (late_mode >= 0) return;
  const char *l = getenv("EMU_LATE"), *s = getenv("EMU_SEED");
  late_mode = l && atoi(l) != 0;
  if (s && *s) rng = new std::mt19937((unsigned)strtoul(s, NULL, 10));
}

static void launch(const emu_kernel &k, const void *params, unsigned gx, unsigned bx, unsigned smem)
{
  emu_init();
  if (bx == 0 || bx > 1024) die("bad block size %s%ld", "", (long)bx);
  if (smem > sizeof tsr_smem) die("dynamic shared memory %s%ld too large", "", (long)smem);
  cur_run = k.run;
  cur_params = params;
  cur_smem_bytes = smem;
  emu_grid_dim = emu_dim3{ gx, 1, 1 };
  emu_block_dim = emu_dim3{ bx, 1, 1 };
  for (unsigned b = 0; b < gx; b++) {
    emu_block_idx = emu_dim3{ b, 0, 0 };
    run_block(bx);
  }
}

/* ---- the fake driver ---- */
struct fake_module {
  std::string image_names; /* the cubin bytes, searched for function names */
};
struct fake_func {
  std::string name;
  const emu_kernel *k;
  int smem_max;
};
struct op_t { /* a captured stream operation */
  int kind;     /* 0 launch, 1 memset32, 2 memcpy */
  fake_func *f;
  std::vector<unsigned char> params;
  unsigned gx, bx, smem;
  CUdeviceptr ptr;
  unsigned val;
  size_t n;
  const void *src;
};
struct fake_graph {
  std::vector<op_t> ops;
};
static bool capturing;
static fake_graph *capture;

static int env_int(const char *name, int dflt)
{
  const char *s = getenv(name);
  return s && *s ? atoi(s) : dflt;
}
static void cc(int *major, int *minor)
{
  const char *s = getenv("EMU_CC");
  *major = 8;
  *minor = 0;
  if (s && *s) sscanf(s, "%d.%d", major, minor);
}

static void do_op(const op_t &o)
{
  if (o.kind == 0) {
    if (getenv("EMU_TRACE"))
      fprintf(stderr, "emu: launch %s grid %u block %u smem %u\n", o.f->name.c_str(), o.gx, o.bx, o.smem);
    launch(*o.f->k, o.params.data(), o.gx, o.bx, o.smem);
  } else if (o.kind == 1) {
    unsigned *p = (unsigned *)(uintptr_t)o.ptr;
    for (size_t i = 0; i < o.n; i++) p[i] = o.val;
  } else {
    memcpy((void *)(uintptr_t)o.ptr, o.src, o.n);
  }
}
static CUresult submit(op_t o)
{
  if (capturing) capture->ops.push_back(o);
  else do_op(o);
  return CUDA_SUCCESS;
}

extern "C" {
CUresult cuInit(unsigned) { return CUDA_SUCCESS; }
CUresult cuGetErrorString(CUresult r, const char **s)
{
  *s = r == CUDA_ERROR_NOT_FOUND ? "named symbol not found (emulator: no emulated kernel)" : "emulator error";
  return CUDA_SUCCESS;
}
CUresult cuDriverGetVersion(int *v) { *v = 13000; return CUDA_SUCCESS; }
CUresult cuDeviceGetCount(int *n) { *n = 1; return CUDA_SUCCESS; }
CUresult cuDeviceGet(CUdevice *d, int i) { *d = i; return CUDA_SUCCESS; }
CUresult cuDeviceGetAttribute(int *v, CUdevice_attribute a, CUdevice)
{
  int ma, mi;
  cc(&ma, &mi);
  switch (a) {
  case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR: *v = ma; break;
  case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR: *v = mi; break;
  case CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT: *v = env_int("EMU_SMS", 3); break;
  case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN:
    *v = ma == 9 || ma == 10 ? 232448 : (ma == 8 && mi == 0) ? 166912 : 101376;
    break;
  case CU_DEVICE_ATTRIBUTE_CLOCK_RATE: *v = 1410000; break;
  case CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE: *v = 1215000; break;
  default: *v = 0; break;
  }
  return CUDA_SUCCESS;
}
CUresult cuDeviceGetName(char *name, int len, CUdevice)
{
  snprintf(name, (size_t)len, "Emulated sm80 kernels (CPU)");
  return CUDA_SUCCESS;
}
CUresult cuDevicePrimaryCtxRetain(CUcontext *c, CUdevice) { *c = (CUcontext)(uintptr_t)0x1000; return CUDA_SUCCESS; }
CUresult cuDevicePrimaryCtxRelease(CUdevice) { return CUDA_SUCCESS; }
CUresult cuCtxSetCurrent(CUcontext) { return CUDA_SUCCESS; }
CUresult cuCtxGetCurrent(CUcontext *c) { *c = (CUcontext)(uintptr_t)0x1000; return CUDA_SUCCESS; }
CUresult cuCtxSynchronize(void) { return CUDA_SUCCESS; }
CUresult cuModuleLoadData(CUmodule *m, const void *image)
{
  fake_module *fm = new fake_module;
  (void)image;
  *m = (CUmodule)fm;
  return CUDA_SUCCESS;
}
CUresult cuModuleUnload(CUmodule m)
{
  delete (fake_module *)m;
  return CUDA_SUCCESS;
}
CUresult cuModuleGetFunction(CUfunction *f, CUmodule, const char *name)
{
  auto it = kernels().find(name);
  if (it == kernels().end()) return CUDA_ERROR_NOT_FOUND;
  *f = (CUfunction) new fake_func{ name, &it->second, 48 * 1024 };
  return CUDA_SUCCESS;
}
CUresult cuFuncSetAttribute(CUfunction f, CUfunction_attribute a, int v)
{
  if (a == CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES) ((fake_func *)f)->smem_max = v;
  return CUDA_SUCCESS;
}
CUresult cuFuncGetAttribute(int *v, CUfunction_attribute, CUfunction) { *v = 0; return CUDA_SUCCESS; }
CUresult cuOccupancyMaxActiveBlocksPerMultiprocessor(int *n, CUfunction, int, size_t)
{
  *n = env_int("EMU_OCC", 1);
  return CUDA_SUCCESS;
}
CUresult cuLaunchKernel(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                        unsigned bz, unsigned smem, CUstream, void **params, void **extra)
{
  fake_func *ff = (fake_func *)f;
  op_t o;
  if (gy != 1 || gz != 1 || by != 1 || bz != 1 || extra) return CUDA_ERROR_INVALID_VALUE;
  if ((int)smem > ff->smem_max) {
    fprintf(stderr, "emu: %s launched with %u bytes of dynamic shared memory, attribute allows %d\n",
            ff->name.c_str(), smem, ff->smem_max);
    return CUDA_ERROR_INVALID_VALUE;
  }
  o.kind = 0;
  o.f = ff;
  o.params.assign((const unsigned char *)params[0], (const unsigned char *)params[0] + ff->k->param_bytes);
  o.gx = gx;
  o.bx = bx;
  o.smem = smem;
  return submit(o);
}
CUresult cuLaunchKernelEx(const CUlaunchConfig *c, CUfunction f, void **params, void **extra)
{
  return cuLaunchKernel(f, c->gridDimX, c->gridDimY, c->gridDimZ, c->blockDimX, c->blockDimY, c->blockDimZ,
                        c->sharedMemBytes, c->hStream, params, extra);
}
CUresult cuMemAlloc(CUdeviceptr *p, size_t n)
{
  unsigned char *b = (unsigned char *)aligned_alloc(256, ((n + 2 * GUARD + 255) / 256) * 256);
  if (!b) return CUDA_ERROR_OUT_OF_MEMORY;
  memset(b, 0xa5, n + 2 * GUARD);
  allocs[(uintptr_t)(b + GUARD)] = n;
  *p = (CUdeviceptr)(uintptr_t)(b + GUARD);
  return CUDA_SUCCESS;
}
static void check_guards(uintptr_t a, size_t n)
{
  const unsigned char *b = (const unsigned char *)a;
  for (size_t i = 0; i < GUARD; i++)
    if (b[-1 - (long)i] != 0xa5 || b[n + i] != 0xa5) {
      fprintf(stderr, "emu: write outside the %zu-byte device allocation at %p\n", n, (void *)a);
      abort();
    }
}
CUresult cuMemFree(CUdeviceptr p)
{
  auto it = allocs.find((uintptr_t)p);
  if (it == allocs.end()) return CUDA_ERROR_INVALID_VALUE;
  check_guards(it->first, it->second);
  free((unsigned char *)(uintptr_t)p - GUARD);
  allocs.erase(it);
  return CUDA_SUCCESS;
}
CUresult cuMemAllocHost(void **p, size_t n)
{
  *p = malloc(n);
  return *p ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
}
CUresult cuMemFreeHost(void *p)
{
  free(p);
  return CUDA_SUCCESS;
}
CUresult cuMemcpyHtoD(CUdeviceptr d, const void *s, size_t n)
{
  memcpy((void *)(uintptr_t)d, s, n);
  return CUDA_SUCCESS;
}
CUresult cuMemcpyDtoH(void *d, CUdeviceptr s, size_t n)
{
  for (auto &a : allocs) check_guards(a.first, a.second);
  memcpy(d, (const void *)(uintptr_t)s, n);
  return CUDA_SUCCESS;
}
CUresult cuMemcpyHtoDAsync(CUdeviceptr d, const void *s, size_t n, CUstream)
{
  op_t o;
  o.kind = 2;
  o.ptr = d;
  o.src = s;
  o.n = n;
  return submit(o);
}
CUresult cuMemcpyDtoHAsync(void *d, CUdeviceptr s, size_t n, CUstream)
{
  memcpy(d, (const void *)(uintptr_t)s, n);
  return CUDA_SUCCESS;
}
CUresult cuMemsetD32Async(CUdeviceptr p, unsigned v, size_t n, CUstream)
{
  op_t o;
  o.kind = 1;
  o.ptr = p;
  o.val = v;
  o.n = n;
  return submit(o);
}
CUresult cuMemsetD8(CUdeviceptr p, unsigned char v, size_t n)
{
  memset((void *)(uintptr_t)p, v, n);
  return CUDA_SUCCESS;
}
CUresult cuStreamCreate(CUstream *s, unsigned) { *s = (CUstream)(uintptr_t)0x2000; return CUDA_SUCCESS; }
CUresult cuStreamDestroy(CUstream) { return CUDA_SUCCESS; }
CUresult cuStreamSynchronize(CUstream) { return CUDA_SUCCESS; }
CUresult cuEventCreate(CUevent *e, unsigned)
{
  *e = (CUevent) new double(0);
  return CUDA_SUCCESS;
}
CUresult cuEventDestroy(CUevent e)
{
  delete (double *)e;
  return CUDA_SUCCESS;
}
CUresult cuEventRecord(CUevent e, CUstream)
{
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  *(double *)e = ts.tv_sec * 1e3 + ts.tv_nsec * 1e-6;
  return CUDA_SUCCESS;
}
CUresult cuEventSynchronize(CUevent) { return CUDA_SUCCESS; }
CUresult cuEventElapsedTime(float *ms, CUevent a, CUevent b)
{
  *ms = (float)(*(double *)b - *(double *)a);
  return CUDA_SUCCESS;
}
CUresult cuTensorMapEncodeTiled(CUtensorMap *, CUtensorMapDataType, cuuint32_t, void *, const cuuint64_t *,
                                const cuuint64_t *, const cuuint32_t *, const cuuint32_t *, CUtensorMapInterleave,
                                CUtensorMapSwizzle, CUtensorMapL2promotion, CUtensorMapFloatOOBfill)
{
  return CUDA_ERROR_NOT_SUPPORTED;
}
CUresult cuStreamBeginCapture(CUstream, CUstreamCaptureMode)
{
  capturing = true;
  capture = new fake_graph;
  return CUDA_SUCCESS;
}
CUresult cuStreamEndCapture(CUstream, CUgraph *g)
{
  capturing = false;
  *g = (CUgraph)capture;
  capture = NULL;
  return CUDA_SUCCESS;
}
CUresult cuGraphInstantiate(CUgraphExec *e, CUgraph g, unsigned long long)
{
  *e = (CUgraphExec) new fake_graph(*(fake_graph *)g);
  return CUDA_SUCCESS;
}
CUresult cuGraphLaunch(CUgraphExec e, CUstream)
{
  for (const op_t &o : ((fake_graph *)e)->ops) do_op(o);
  return CUDA_SUCCESS;
}
CUresult cuGraphExecDestroy(CUgraphExec e)
{
  delete (fake_graph *)e;
  return CUDA_SUCCESS;
}
CUresult cuGraphDestroy(CUgraph g)
{
  delete (fake_graph *)g;
  return CUDA_SUCCESS;
}
}
