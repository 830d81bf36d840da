/*
 * variant.c: canonical variant names, their parameters, and the fit rules
 * that prune variants before anything is compiled.  Shared by tessera-gen
 * and libtessera; pure string and integer work, no allocation.
 *
 * The shared-memory formula here is the contract with the templates: the
 * generator passes TSR_SMEM_BYTES = tsri_variant_smem_bytes() to every
 * kernel, which static_asserts that its layout fits, and the runtime asks
 * the driver for exactly that much dynamic shared memory.
 */
#include "variant.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *const tsri_variant_archs[TSR_N_ARCHS] = {
  "sm_80", "sm_89", "sm_90a", "sm_100a", "sm_120"
};

static const char *const family_names[TSR_FAMILY_COUNT] = { "sm80", "sm90" };
static const char *const layout_names[TSR_TL_COUNT] = { "pers", "flat", "dyn" };

const char *tsri_variant_family_name(tsr_family f)
{
  return (unsigned)f < TSR_FAMILY_COUNT ? family_names[f] : "?";
}

const char *tsri_variant_layout_name(tsr_task_layout l)
{
  return (unsigned)l < TSR_TL_COUNT ? layout_names[l] : "?";
}

const char *tsri_variant_dtype_name(tsr_dtype d)
{
  return d == TSR_DT_BF16 || d == TSR_DT_F16 ? tsr_dtype_name(d) : NULL;
}

void tsri_variant_format(const tsr_variant *v, char *buf)
{
  const char *dt = tsri_variant_dtype_name(v->dtype);
  int n = snprintf(buf, TSR_VARIANT_NAME_MAX, "tsr_%s_%s%s_d%d_m%dn%d_s%d_%c%d_%s_%s",
                   tsri_variant_family_name(v->family), dt ? dt : "?", v->fp8 ? "_fp8" : "", v->head_dim,
                   v->bm, v->bn, v->stages, v->family == TSR_FAMILY_SM90 ? 'g' : 'w',
                   v->family == TSR_FAMILY_SM90 ? v->warpgroups : v->warps,
                   tsri_variant_layout_name(v->layout),
                   v->gather ? "kg" : v->membership ? "mb" : "nm");
  if (v->tma_box > 0 && n > 0 && n < TSR_VARIANT_NAME_MAX)
    snprintf(buf + n, (size_t)(TSR_VARIANT_NAME_MAX - n), "_tma%d", v->tma_box);
}

/* Reads a positive decimal integer of at most 5 digits at *p. */
static int read_int(const char **p, int *out)
{
  const char *s = *p;
  int v = 0, n = 0;
  while (*s >= '0' && *s <= '9' && n < 6) {
    v = v * 10 + (*s - '0');
    s++;
    n++;
  }
  if (n == 0 || n > 5) return 0;
  *p = s;
  *out = v;
  return 1;
}

/* Matches the literal `lit` at *p. */
static int eat(const char **p, const char *lit)
{
  size_t n = strlen(lit);
  if (strncmp(*p, lit, n) != 0) return 0;
  *p += n;
  return 1;
}

tsr_status tsri_variant_parse(const char *name, tsr_variant *v, tsr_error *err)
{
  tsr_variant x;
  const char *p = name;
  const char *what = "prefix 'tsr_'";
  int i, found;
  char back[TSR_VARIANT_NAME_MAX];

  memset(&x, 0, sizeof x);
  if (!name) return tsr_error_set(err, TSR_ERR_INVALID, "variant name is null");
  if (!eat(&p, "tsr_")) goto bad;
  what = "family";
  for (found = 0, i = 0; i < TSR_FAMILY_COUNT && !found; i++)
    if (eat(&p, family_names[i])) { x.family = (tsr_family)i; found = 1; }
  if (!found || !eat(&p, "_")) goto bad;
  what = "dtype";
  if (eat(&p, tsr_dtype_name(TSR_DT_BF16))) x.dtype = TSR_DT_BF16;
  else if (eat(&p, tsr_dtype_name(TSR_DT_F16))) x.dtype = TSR_DT_F16;
  else goto bad;
  if (!eat(&p, "_")) goto bad;
  if (eat(&p, "fp8_")) x.fp8 = 1;
  what = "head dim 'd<D>'";
  if (!eat(&p, "d") || !read_int(&p, &x.head_dim) || !eat(&p, "_")) goto bad;
  what = "tile 'm<BM>n<BN>'";
  if (!eat(&p, "m") || !read_int(&p, &x.bm) || !eat(&p, "n") || !read_int(&p, &x.bn) ||
      !eat(&p, "_")) goto bad;
  what = "stages 's<n>'";
  if (!eat(&p, "s") || !read_int(&p, &x.stages) || !eat(&p, "_")) goto bad;
  if (x.family == TSR_FAMILY_SM90) {
    what = "warpgroups 'g<n>'";
    if (!eat(&p, "g") || !read_int(&p, &x.warpgroups) || !eat(&p, "_")) goto bad;
    x.warps = 4 * x.warpgroups;
  } else {
    what = "warps 'w<n>'";
    if (!eat(&p, "w") || !read_int(&p, &x.warps) || !eat(&p, "_")) goto bad;
  }
  what = "task layout";
  for (found = 0, i = 0; i < TSR_TL_COUNT && !found; i++)
    if (eat(&p, layout_names[i])) { x.layout = (tsr_task_layout)i; found = 1; }
  if (!found || !eat(&p, "_")) goto bad;
  what = "membership 'mb', 'nm' or 'kg'";
  if (eat(&p, "mb")) x.membership = 1;
  else if (eat(&p, "nm")) x.membership = 0;
  else if (eat(&p, "kg")) x.gather = 1;
  else goto bad;
  if (*p) {
    what = "suffix '_tma<box>'";
    if (!eat(&p, "_tma") || !read_int(&p, &x.tma_box) || *p) goto bad;
  }
  tsri_variant_format(&x, back);
  if (strcmp(back, name) != 0)
    return tsr_error_set(err, TSR_ERR_INVALID,
                         "variant name '%s' is not canonical: expected '%s'", name, back);
  *v = x;
  return TSR_OK;
bad:
  return tsr_error_set(err, TSR_ERR_INVALID, "bad variant name '%s': cannot read the %s at '%s'",
                       name, what, p);
}

int tsri_variant_threads(const tsr_variant *v)
{
  return 32 * v->warps;
}

int tsri_variant_tasks_per_cta(const tsr_variant *v)
{
  /* sm90: one consumer warpgroup per 64 query rows of a task; the
   * warpgroups past the producer may hold two tasks' consumers (g3 at BM
   * 64), which then run side by side. */
  if (v->family != TSR_FAMILY_SM90 || v->bm < 64 || v->warpgroups < 2) return 1;
  return (v->warpgroups - 1) / (v->bm / 64) > 1 ? (v->warpgroups - 1) / (v->bm / 64) : 1;
}

int64_t tsri_variant_smem_bytes(const tsr_variant *v)
{
  /* Q tile once, K and V tiles per pipeline stage, 2-byte elements.  The
   * sm90 family adds 1 KiB of slack for the 1024-byte alignment that
   * 128-byte TMA swizzling needs and 256 bytes of mbarriers, all of it but
   * the slack once per task a CTA runs (TSR_SM90_SMEM_BYTES in
   * templates/attn_sm90.cuh). */
  int64_t elems = (int64_t)v->bm * v->head_dim + 2LL * v->stages * v->bn * v->head_dim;
  int64_t bytes;
  /* two tasks a CTA with 2 stages double-buffer Q (TSR_SM90_QPF) */
  if (v->family == TSR_FAMILY_SM90 && tsri_variant_tasks_per_cta(v) == 2 && v->stages == 2)
    elems += (int64_t)v->bm * v->head_dim;
  bytes = elems * (v->fp8 ? 1 : 2); /* int8 / e4m3: one byte an element */
  if (v->family == TSR_FAMILY_SM90) bytes = 1024 + tsri_variant_tasks_per_cta(v) * (bytes + 256);
  return bytes;
}

/* Accumulator registers per thread, a lower bound used for pruning. */
static int tsri_variant_reg_estimate(const tsr_variant *v)
{
  /* Accumulators per thread: each consumer thread holds its share of the
   * O tile (BM x D) and the S tile (BM x BN) in fp32, plus ~32 registers of
   * addresses, softmax state and fragments. */
  int consumers = v->family == TSR_FAMILY_SM90 ? 128 * (v->warpgroups - 1) : 32 * v->warps;
  int64_t rows = (int64_t)v->bm * tsri_variant_tasks_per_cta(v);
  if (consumers <= 0) return 1 << 20;
  return (int)((rows * (v->head_dim + v->bn)) / consumers) + 32;
}

tsr_status tsri_variant_check(const tsr_variant *v, tsr_error *err)
{
  char name[TSR_VARIANT_NAME_MAX];
  tsri_variant_format(v, name);
  if ((unsigned)v->family >= TSR_FAMILY_COUNT)
    return tsr_error_set(err, TSR_ERR_INVALID, "variant '%s': unknown family %d", name, (int)v->family);
  if (!tsri_variant_dtype_name(v->dtype))
    return tsr_error_set(err, TSR_ERR_INVALID, "variant '%s': dtype must be bf16 or fp16", name);
  if (v->head_dim < 64 || v->head_dim > 256 || v->head_dim % 64 != 0)
    return tsr_error_set(err, TSR_ERR_INVALID,
                         "variant '%s': head dim must be 64, 128, 192 or 256, got %d", name, v->head_dim);
  if (v->bn < 32 || v->bn > 256 || v->bn % 32 != 0)
    return tsr_error_set(err, TSR_ERR_INVALID,
                         "variant '%s': BN must be a multiple of 32 in [32, 256], got %d", name, v->bn);
  if (v->bm < 16 || v->bm > 256 || v->bm % 16 != 0)
    return tsr_error_set(err, TSR_ERR_INVALID,
                         "variant '%s': BM must be a multiple of 16 in [16, 256], got %d", name, v->bm);
  if ((unsigned)v->layout >= TSR_TL_COUNT)
    return tsr_error_set(err, TSR_ERR_INVALID, "variant '%s': unknown task layout", name);
  if (v->membership != 0 && v->membership != 1)
    return tsr_error_set(err, TSR_ERR_INVALID, "variant '%s': membership must be 0 or 1", name);
  if (v->gather != 0 && v->gather != 1)
    return tsr_error_set(err, TSR_ERR_INVALID, "variant '%s': gather must be 0 or 1", name);
  /* What templates/attn_sm90.cuh's TSR_KGATHER implements: two TMA half
   * tiles of BN/2 keys, full tiles only, the native precision (FP8 loads V
   * transposed, keys innermost, in one box), the static task layouts. */
  if (v->gather && (v->family != TSR_FAMILY_SM90 || v->membership || v->fp8 || v->bn != 128 ||
                    v->layout == TSR_TL_DYN))
    return tsr_error_set(err, TSR_ERR_INVALID,
                         "variant '%s': key gather (kg) needs the sm90 family, native precision, "
                         "tiles 128 keys wide and the flat or pers layout", name);
  if (v->layout == TSR_TL_DYN && v->family != TSR_FAMILY_SM90)
    return tsr_error_set(err, TSR_ERR_INVALID, "variant '%s': the dyn task layout needs the sm90 family", name);
  if (v->family == TSR_FAMILY_SM80) {
    if (v->warps != 2 && v->warps != 4 && v->warps != 8)
      return tsr_error_set(err, TSR_ERR_INVALID,
                           "variant '%s': sm80 warps must be 2, 4 or 8, got %d", name, v->warps);
    if (v->warpgroups != 0)
      return tsr_error_set(err, TSR_ERR_INVALID, "variant '%s': sm80 has no warpgroups", name);
    if (v->bm % (16 * v->warps) != 0)
      return tsr_error_set(err, TSR_ERR_INVALID,
                           "variant '%s': BM %d is not a multiple of 16 rows x %d warps",
                           name, v->bm, v->warps);
    if (v->bm / (16 * v->warps) > 2)
      return tsr_error_set(err, TSR_ERR_INVALID,
                           "variant '%s': at most 32 rows a warp, got %d", name, v->bm / v->warps);
    if (v->stages < 1 || v->stages > 4)
      return tsr_error_set(err, TSR_ERR_INVALID,
                           "variant '%s': sm80 stages must be 1 to 4, got %d", name, v->stages);
    /* One stage single-buffers K and V in split groups, which
     * templates/attn_sm80.cuh runs only with a key tile taken in one softmax
     * step (a static_assert there, the judge for the rest).  32-row warps
     * take at most 64 keys a step, so their wider tiles are refused here,
     * naming the rule rather than failing in the compiler. */
    if (v->stages == 1 && v->bm / (16 * v->warps) == 2 && v->bn > 64)
      return tsr_error_set(err, TSR_ERR_INVALID,
                           "variant '%s': sm80 stages 1 with 32 rows a warp needs BN at most 64, got %d", name,
                           v->bn);
    if (v->tma_box != 0)
      return tsr_error_set(err, TSR_ERR_INVALID, "variant '%s': the sm80 family does not use TMA", name);
    if (v->fp8)
      return tsr_error_set(err, TSR_ERR_INVALID, "variant '%s': FP8 precision needs the sm90 family", name);
  } else {
    if (v->warpgroups < 2 || v->warpgroups > 4 || v->warps != 4 * v->warpgroups)
      return tsr_error_set(err, TSR_ERR_INVALID,
                           "variant '%s': sm90 warpgroups must be 2 to 4, got %d", name, v->warpgroups);
    /* What templates/attn_sm90.cuh implements: one producer warpgroup and
     * one consumer warpgroup per 64 query rows, TMA boxes 64 elements wide. */
    if (v->bm != 64 && v->bm != 128)
      return tsr_error_set(err, TSR_ERR_INVALID, "variant '%s': sm90 BM must be 64 or 128, got %d", name, v->bm);
    if (v->bn != 64 && v->bn != 128)
      return tsr_error_set(err, TSR_ERR_INVALID, "variant '%s': sm90 BN must be 64 or 128, got %d", name, v->bn);
    if (v->head_dim != 64 && v->head_dim != 128)
      return tsr_error_set(err, TSR_ERR_INVALID, "variant '%s': sm90 head dim must be 64 or 128, got %d",
                           name, v->head_dim);
    /* BM 64 may also run two or three tasks a CTA (g3, g4), one consumer
     * warpgroup each */
    if (v->warpgroups != 1 + v->bm / 64 && !(v->bm == 64 && v->warpgroups >= 3))
      return tsr_error_set(err, TSR_ERR_INVALID,
                           "variant '%s': sm90 with BM %d needs %d warpgroups (producer + one per 64 rows)%s, got %d",
                           name, v->bm, 1 + v->bm / 64,
                           v->bm == 64 ? " or 3 or 4 (two or three tasks a CTA)" : "", v->warpgroups);
    /* FP8 rows of D bytes load whole (one swizzle panel of D bytes) */
    if (v->fp8 && v->tma_box != v->head_dim)
      return tsr_error_set(err, TSR_ERR_INVALID, "variant '%s': FP8 sm90 variants load whole rows through TMA "
                           "boxes of the head dim ('tma_box': %d), got %d", name, v->head_dim, v->tma_box);
    if (!v->fp8 && v->tma_box != 64)
      return tsr_error_set(err, TSR_ERR_INVALID, "variant '%s': the sm90 family loads through TMA boxes of 64 "
                           "elements ('tma_box': 64), got %d", name, v->tma_box);
    if (v->stages < 1 || v->stages > 4)
      return tsr_error_set(err, TSR_ERR_INVALID,
                           "variant '%s': sm90 stages must be 1 to 4, got %d", name, v->stages);
  }
  return TSR_OK;
}

int tsri_arch_index(const char *arch)
{
  int i;
  for (i = 0; arch && i < TSR_N_ARCHS; i++)
    if (strcmp(arch, tsri_variant_archs[i]) == 0) return i;
  return -1;
}

int64_t tsri_arch_smem_limit(const char *arch)
{
  /* Opt-in dynamic shared memory per block (CUDA programming guide). */
  static const int64_t limit[TSR_N_ARCHS] = { 166912, 101376, 232448, 232448, 101376 };
  int i = tsri_arch_index(arch);
  return i < 0 ? 0 : limit[i];
}

const char *tsri_arch_for_cc(int major, int minor)
{
  if (major == 8 && minor == 9) return "sm_89";
  if (major == 8) return "sm_80";   /* sm_86 / sm_87 run sm_80 cubins */
  if (major == 9 && minor == 0) return "sm_90a";
  if (major == 10 && minor == 0) return "sm_100a";
  if (major == 12) return "sm_120";
  return NULL;
}

int tsri_variant_fits(const tsr_variant *v, const char *arch, char *why)
{
  int64_t smem = tsri_variant_smem_bytes(v), lim = tsri_arch_smem_limit(arch);
  int regs = tsri_variant_reg_estimate(v);
  if (tsri_arch_index(arch) < 0) {
    if (why) snprintf(why, 160, "unknown arch '%s'", arch ? arch : "(null)");
    return 0;
  }
  if (v->family == TSR_FAMILY_SM90 && strcmp(arch, "sm_90a") != 0) {
    if (why) snprintf(why, 160, "the sm90 family needs sm_90a, not %s", arch);
    return 0;
  }
  if (smem > lim) {
    if (why)
      snprintf(why, 160, "needs %lld bytes of shared memory, %s has %lld",
               (long long)smem, arch, (long long)lim);
    return 0;
  }
  if (regs > 240) {
    if (why) snprintf(why, 160, "needs about %d accumulator registers a thread, more than 240", regs);
    return 0;
  }
  return 1;
}

int tsri_variant_serves(const tsr_variant *v, const char *arch, const tsr_variant_need *need)
{
  if (!tsri_variant_fits(v, arch, NULL)) return 0;
  if (v->dtype != need->dtype || v->head_dim != need->head_dim) return 0;
  if (!v->fp8 != !need->fp8) return 0; /* a precision is never swapped for another */
  if (v->bm != need->bm || v->bn != need->bn) return 0;
  if (!v->gather != !need->gather) return 0; /* gather tiles mean another record */
  if (need->membership && !v->membership) return 0;
  return 1;
}

/* Shared memory a multiprocessor and resident warps a multiprocessor of
 * each target (CUDA programming guide, compute capabilities 8.0, 8.9, 9.0,
 * 10.0, 12.0); sm_86 parts run sm_80 cubins with less, which ranks the same
 * where it matters (notes/sm80.md). */
static const int64_t sm_smem[TSR_N_ARCHS] = { 167936, 102400, 233472, 233472, 102400 };
static const int sm_warps[TSR_N_ARCHS] = { 64, 48, 64, 64, 48 };

int tsri_variant_resident_warps(const tsr_variant *v, const char *arch)
{
  int a = tsri_arch_index(arch);
  int64_t by_smem, by_regs, by_threads, ctas;
  if (a < 0 || v->warps <= 0) return 0;
  /* 1 KiB of shared memory is reserved a CTA; registers are taken at 255
   * (256 allocated a thread), what the sm80 cubins compile to within a few
   * except d64 64x64 w4 (156): an estimate that never ranks a variant above
   * what its cubin can hold. */
  by_smem = sm_smem[a] / (tsri_variant_smem_bytes(v) + 1024);
  by_regs = 65536 / (32LL * 256 * v->warps);
  by_threads = sm_warps[a] / v->warps;
  ctas = by_smem < by_regs ? by_smem : by_regs;
  if (by_threads < ctas) ctas = by_threads;
  return (int)(ctas * v->warps);
}

int tsri_variant_rank(const tsr_variant *v, const char *arch, const tsr_variant_need *need)
{
  int r = 0;
  if (v->family == TSR_FAMILY_SM90 && strcmp(arch, "sm_90a") == 0) r += 1000;
  /* The sm80 family (issue 17, notes/sm80.md): warps of 32 query rows feed
   * each K/V fragment to 4 HMMA instead of 2.  On the H200 they ran
   * 1.25-1.4x the 16-row variants of the same tile (d128 128x64 w4 against
   * w8, d64 128x128 w4 against w8, 8 warps a multiprocessor each) and, on
   * 64x64 tiles at two warps, 1.01-1.04x (d64: 8 warps against the w4's
   * 12) and 0.99-1.02x (d128 one stage: 8 against 8) where they hold 8
   * warps, 0.74x where they hold 4 (d128 two stages).  So they come first
   * at w4, and at w2 where the target holds 8 warps of them; then the warps
   * the target keeps resident (d128 128x64: the one-stage w4 holds 2 CTAs
   * on an A100's 164 KiB where the two-stage one holds 1), 50 a 4 warps,
   * more than stages weigh; then, below, deeper pipelines.  At most 400 +
   * 100 (registers at 255 hold 8 warps) + 100 + 40: under the sm90
   * family's 1000. */
  if (v->family == TSR_FAMILY_SM80) {
    int warps = tsri_variant_resident_warps(v, arch);
    if (v->bm == 32 * v->warps && (v->warps == 4 || warps >= 8)) r += 400;
    r += 50 * (warps / 4);
  }
  if (!need->membership && !v->membership) r += 100;
  r += 10 * v->stages;
  /* two 64-row tasks a CTA keep the tensor cores busier than one
   * (notes/sm90.md, v6): worth more than a pipeline stage */
  r += 50 * (tsri_variant_tasks_per_cta(v) - 1);
  if (v->layout == TSR_TL_PERS) r += 1;
  /* dyn against the same tile's flat variant (issue 20): at d64 dyn was
   * faster on both cards we have (H200 +6-10%, notes/sm90-sched-2026-12-02.md;
   * H100 at the power cap +3.3%, notes/sm90-2026-12-06c.md), so it comes
   * first there; at d128 the flat variants have FA3's tile step, which dyn's
   * registers cannot hold (H100: dense -2.7%, sparse equal), so a d128 dyn
   * variant runs only where a lookup-table row or the caller names it. */
  if (v->layout == TSR_TL_DYN) r += v->head_dim == 64 ? 5 : -5;
  return r;
}
