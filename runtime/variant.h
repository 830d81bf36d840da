/*
 * variant.h: kernel variants, shared by tessera-gen (which compiles them)
 * and libtessera (which loads and picks them).  Not installed.
 *
 * A variant is one instantiation of a kernel template with constants only.
 * Its canonical name encodes every parameter and is its key everywhere: the
 * kernel symbol, the cubin file name, the registry and the database:
 *
 *     tsr_<family>_<dtype>[_fp8]_d<D>_m<BM>n<BN>_s<stages>_<w|g><n>_<layout>_<mb|nm>[_tma<box>]
 *     tsr_sm80_bf16_d128_m128n64_s2_w4_pers_mb
 *     tsr_sm90_fp16_d64_m128n128_s2_g3_pers_mb_tma64
 *     tsr_sm90_bf16_fp8_d128_m128n128_s2_g3_flat_mb_tma128
 *
 *  family  sm80 (mma.sync + ldmatrix + cp.async; runs on sm_80, sm_89,
 *          sm_90a, sm_100a, sm_120) or sm90 (wgmma + TMA; sm_90a only)
 *  w<n>    warps per CTA (sm80 family); g<n> warpgroups per CTA (sm90):
 *          a producer and one consumer per 64 query rows, or at BM 64 also
 *          g3: two consumers running two tasks side by side
 *  layout  how tasks map to CTAs: pers = a persistent grid of resident CTAs
 *          striding over the task list (task = blockIdx.x + i*gridDim.x),
 *          flat = one CTA per task.  Kernels run the same loop either way;
 *          the host picks gridDim.x from it.  dyn (sm90 family only) = a
 *          persistent grid whose CTAs take tasks in order from a counter
 *          in device memory (templates/attn_sm90.cuh says where)
 *  mb/nm   membership masking compiled in (mb) or not (nm: only plans
 *          without partial tiles may use it); kg: key gather, for gather
 *          plans only (plan_layout.h: each key tile two half tiles of BN/2
 *          keys from anywhere in the row; no membership code)
 *  tma<b>  the host fills tma_q/tma_k/tma_v (see plan_layout.h) with a box
 *          b elements wide in the head dimension
 *  fp8     FP8 precision (issue 18, sm90 family only): q/k are int8 and
 *          v e4m3 copies with per-block scales that the module's quantization
 *          kernels <name>_kvstats and <name>_quant make from the bf16/fp16
 *          tensors (templates/attn_sm90_fp8.cuh); o stays <dtype>.  The TMA
 *          box then covers the whole head dimension (tma<D>: D bytes a row)
 *
 * The merge kernel of a variant is the symbol <name>_merge in the same
 * module.  The merge works on BM-row partial slots of the variant.
 */
#ifndef TSR_VARIANT_H
#define TSR_VARIANT_H

#include "tessera.h"

#define TSR_VARIANT_NAME_MAX 96
#define TSR_GEN_VERSION "1"

typedef enum { TSR_FAMILY_SM80, TSR_FAMILY_SM90, TSR_FAMILY_COUNT } tsr_family;
typedef enum { TSR_TL_PERS, TSR_TL_FLAT, TSR_TL_DYN, TSR_TL_COUNT } tsr_task_layout;

/* The compile targets, in registry order. */
#define TSR_N_ARCHS 5
extern const char *const tsri_variant_archs[TSR_N_ARCHS];

typedef struct {
  tsr_family family;
  tsr_dtype dtype;       /* TSR_DT_BF16 or TSR_DT_F16 */
  int head_dim;
  int bm, bn;
  int stages;
  int warps;             /* sm80: warps per CTA; sm90: warpgroups * 4 */
  int warpgroups;        /* sm90 only; 0 for sm80 */
  tsr_task_layout layout;
  int membership;        /* 1 = mb, 0 = nm */
  int tma_box;           /* 0 = no TMA; else box width in elements of D */
  int fp8;               /* 1 = FP8 (int8 Q K^T, e4m3 P V) tensor-core products; 0 = dtype's */
  int gather;            /* 1 = kg: runs gather plans only (plan_layout.h), no
                            membership code (membership 0); sm90 family only */
} tsr_variant;

const char *tsri_variant_family_name(tsr_family f);
const char *tsri_variant_layout_name(tsr_task_layout l);
/* The kernels' dtypes by their tsr_dtype_name ("bf16", "fp16"); NULL for
 * other dtypes. */
const char *tsri_variant_dtype_name(tsr_dtype d);

/* Canonical name into buf (TSR_VARIANT_NAME_MAX bytes). */
void tsri_variant_format(const tsr_variant *v, char *buf);
/* Parses a canonical name; rejects anything tsri_variant_format would not
 * print (so names round-trip exactly), naming the offending part. */
tsr_status tsri_variant_parse(const char *name, tsr_variant *v, tsr_error *err);

/* Threads per CTA and dynamic shared memory in bytes.  Like fits below,
 * defined only for variants that pass tsri_variant_check: a name may spell
 * parameters (d99999, g99999) whose sizes overflow int64. */
int tsri_variant_threads(const tsr_variant *v);
/* Tasks a CTA runs side by side: 2 for sm90 variants with 3 warpgroups at
 * BM 64 (two consumer warpgroups, each its own 64-row task), else 1.  A
 * flat launch then needs ceil(n_tasks / this) CTAs. */
int tsri_variant_tasks_per_cta(const tsr_variant *v);
int64_t tsri_variant_smem_bytes(const tsr_variant *v);

/* Structural checks independent of the target (tile multiples, supported
 * head dims and dtypes, warp counts); names the first violation. */
tsr_status tsri_variant_check(const tsr_variant *v, tsr_error *err);
/* Whether the variant can be built for and runs on `arch` ("sm_80", ...):
 * family support, shared memory and register budget.  On 0 fills `why`
 * (if not NULL, 160 bytes) with the reason. */
int tsri_variant_fits(const tsr_variant *v, const char *arch, char *why);
/* Largest dynamic shared memory per block for a compile target. */
int64_t tsri_arch_smem_limit(const char *arch);
/* Index of arch in tsri_variant_archs, or -1. */
int tsri_arch_index(const char *arch);
/* The compile target of a device of compute capability major.minor, or
 * NULL when no target runs there. */
const char *tsri_arch_for_cc(int major, int minor);

/* A request for a kernel: what a plan needs. */
typedef struct {
  tsr_dtype dtype;
  int head_dim;
  int bm, bn;
  int membership;       /* plan has partial tiles */
  int fp8;              /* plan's precision is TSR_PREC_FP8 (0: native) */
  int gather;           /* plan's mapping is TSR_MAP_GATHER: only kg variants serve it */
} tsr_variant_need;

/* Whether v serves `need` on `arch`. */
int tsri_variant_serves(const tsr_variant *v, const char *arch, const tsr_variant_need *need);
/* Warps of v resident a multiprocessor of `arch` (by shared memory,
 * registers taken at 255 a thread, and threads); 0 for an unknown arch. */
int tsri_variant_resident_warps(const tsr_variant *v, const char *arch);
/* Preference among serving variants (higher is better): the sm90 family on
 * sm_90a; for the sm80 family 32-row warps, then resident warps on arch;
 * then no membership code when not needed, then deeper pipelines. */
int tsri_variant_rank(const tsr_variant *v, const char *arch, const tsr_variant_need *need);

#endif
