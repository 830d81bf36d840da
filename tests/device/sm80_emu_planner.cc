/*
 * sm80_emu_planner.cc: the GPU planner (templates/plan_gpu.cuh: count,
 * order and emit kernels) compiled for the host into the fake libcuda.so.1
 * of sm80_emu.sh, so that tests/gpu_plan runs the planner's logic on the
 * CPU: device plans against the host planner, byte for byte where the
 * planners must agree (task order included).  The warp instructions the
 * planner uses (shuffles, ballot, match, reductions) are warp collectives
 * of sm80_emu.h; CTAs run one after another in blockIdx order, so the count
 * kernel's look-back always finds its predecessors done; memory fences are
 * no-ops (one OS thread).  A check of the logic, not of the memory model.
 */
#define __CUDACC__ 1 /* plan_layout.h: the device typedefs */
#include "sm80_emu.h"

#include "plan_layout.h"

void emu_register(const char *name, void (*run)(const void *), size_t param_bytes);

struct int2 {
  int x, y;
};
static inline int2 make_int2(int x, int y) { return int2{ x, y }; }
static inline long long min(long long a, long long b) { return a < b ? a : b; }
static inline int max(int a, int b) { return a > b ? a : b; }

template <typename T>
static inline T __ldg(const T *p) { return *p; }
template <typename T>
static inline T __ldcg(const T *p) { return *p; }
template <typename T>
static inline void __stcg(T *p, T v) { *p = v; }
static inline void __threadfence() {}
static inline void __threadfence_system() {}

static inline int __popc(unsigned x) { return __builtin_popcount(x); }
static inline int __ffs(unsigned x) { return x ? __builtin_ctz(x) + 1 : 0; }
static inline int __clz(unsigned x) { return x ? __builtin_clz(x) : 32; }
/* CUDA's: (hi:lo) >> (sh & 31), the low word; the high 32 bits of a * b */
static inline unsigned __funnelshift_r(unsigned lo, unsigned hi, unsigned sh)
{
  return (unsigned)((((unsigned long long)hi << 32) | lo) >> (sh & 31));
}
static inline unsigned __umulhi(unsigned a, unsigned b) { return (unsigned)(((unsigned long long)a * b) >> 32); }
static inline unsigned __vcmpne4(unsigned a, unsigned b)
{
  unsigned r = 0;
  for (int k = 0; k < 4; k++)
    if (((a >> 8 * k) & 0xffu) != ((b >> 8 * k) & 0xffu)) r |= 0xffu << 8 * k;
  return r;
}
static inline int atomicAdd(int *p, int v)
{
  const int old = *p; /* fibers switch only at barriers and collectives */
  *p = v + old;
  return old;
}

/* Warp collectives: every lane deposits its 64-bit value; the result is
 * read from the 32 slots.  Tags tell the instructions apart. */
static inline const emu_slot *emu_all64(unsigned long long v, int tag)
{
  uint32_t in[2] = { (uint32_t)v, (uint32_t)(v >> 32) };
  return emu_warp_collective(in, 2, tag, NULL);
}
static inline unsigned long long emu_get64(const emu_slot *all, int lane)
{
  return (unsigned long long)all[lane][0] | (unsigned long long)all[lane][1] << 32;
}

template <typename T>
static inline T emu_from64(unsigned long long u)
{
  T v;
  memcpy(&v, &u, sizeof v);
  return v;
}
template <typename T>
static inline unsigned long long emu_to64(T v)
{
  unsigned long long u = 0;
  memcpy(&u, &v, sizeof v);
  return u;
}

template <typename T>
static inline T __shfl_sync(unsigned, T v, int src)
{
  const emu_slot *all = emu_all64(emu_to64(v), 20);
  return emu_from64<T>(emu_get64(all, src & 31));
}
template <typename T>
static inline T __shfl_up_sync(unsigned, T v, int d)
{
  const emu_slot *all = emu_all64(emu_to64(v), 21);
  const int l = emu_lane();
  return l >= d ? emu_from64<T>(emu_get64(all, l - d)) : v;
}
static inline int __shfl_xor_sync(unsigned, int v, int m)
{
  const emu_slot *all = emu_all64(emu_to64(v), 22);
  return emu_from64<int>(emu_get64(all, emu_lane() ^ m));
}
static inline long long __shfl_xor_sync(unsigned, long long v, int m)
{
  const emu_slot *all = emu_all64(emu_to64(v), 22);
  return emu_from64<long long>(emu_get64(all, emu_lane() ^ m));
}
static inline unsigned __ballot_sync(unsigned, int pred)
{
  const emu_slot *all = emu_all64(pred != 0, 23);
  unsigned b = 0;
  for (int l = 0; l < 32; l++) b |= (unsigned)(emu_get64(all, l) != 0) << l;
  return b;
}
static inline unsigned __match_any_sync(unsigned, int v)
{
  const emu_slot *all = emu_all64((unsigned)v, 24);
  unsigned b = 0;
  for (int l = 0; l < 32; l++) b |= (unsigned)(emu_get64(all, l) == (unsigned)v) << l;
  return b;
}
static inline unsigned __reduce_add_sync(unsigned, unsigned v)
{
  const emu_slot *all = emu_all64(v, 25);
  unsigned s = 0;
  for (int l = 0; l < 32; l++) s += (unsigned)emu_get64(all, l);
  return s;
}
static inline void __syncwarp(unsigned = 0xffffffffu) { emu_all64(0, 26); }

#include "plan_gpu.cuh"

#define EMU_PLANNER(fn)                                                              \
  static void emu_##fn(const void *p) { fn(*(const tsr_gpuplan_params *)p); }         \
  static int emu_reg_##fn = (emu_register(#fn, emu_##fn, sizeof(tsr_gpuplan_params)), 0);
EMU_PLANNER(tsr_plan_count)
EMU_PLANNER(tsr_plan_emit)
