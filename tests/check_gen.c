/*
 * check_gen.c: kernel variants and the bundle: canonical names round-trip,
 * malformed names and catalog entries are rejected with clear errors,
 * pruning follows shared memory / registers / arch, and the bundle built by
 * this tree holds every catalog variant for every target it fits, each as a
 * plain CUDA ELF, with a registry that the runtime's loader accepts.
 */
#include <check.h>

#include "bundle.h"
#include "catalog.h"
#include "variant.h"
#include "util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* A seeded generator of its own (splitmix64); the seed is printed. */
typedef struct {
  uint64_t s;
} gen_rng;

static uint64_t gen_next(gen_rng *r)
{
  uint64_t z = (r->s += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

static int64_t gen_range(gen_rng *r, int64_t lo, int64_t hi)
{
  return lo + (int64_t)(gen_next(r) % (uint64_t)(hi - lo + 1));
}

static uint64_t gen_seed(const char *test, uint64_t dflt)
{
  const char *e = getenv("TSR_SEED");
  uint64_t s = e && *e ? strtoull(e, NULL, 0) : dflt;
  fprintf(stderr, "%s: seed %llu\n", test, (unsigned long long)s);
  return s;
}

static tsr_variant random_variant(gen_rng *r)
{
  tsr_variant v;
  memset(&v, 0, sizeof v);
  v.family = gen_range(r, 0, 1) ? TSR_FAMILY_SM90 : TSR_FAMILY_SM80;
  v.dtype = gen_range(r, 0, 1) ? TSR_DT_BF16 : TSR_DT_F16;
  v.head_dim = 64 * (int)gen_range(r, 1, 4);
  v.bn = 32 * (int)gen_range(r, 1, 8);
  v.stages = (int)gen_range(r, 1, 4);
  v.layout = (tsr_task_layout)gen_range(r, 0, TSR_TL_COUNT - 1); /* pers, flat, dyn */
  v.membership = (int)gen_range(r, 0, 1);
  v.gather = v.membership ? 0 : (int)gen_range(r, 0, 1); /* kg takes mb/nm's place */
  v.fp8 = (int)gen_range(r, 0, 1); /* the name carries it whatever the family */
  if (v.family == TSR_FAMILY_SM90) {
    v.bm = 64 * (int)gen_range(r, 1, 2);
    v.warpgroups = (int)gen_range(r, 2, 4);
    v.warps = 4 * v.warpgroups;
    v.tma_box = gen_range(r, 0, 1) ? 64 : 0;
  } else {
    v.warps = 2 << gen_range(r, 0, 2);
    v.bm = 16 * v.warps * (int)gen_range(r, 1, 2);
  }
  return v;
}

START_TEST(test_name_roundtrip)
{
  gen_rng r = { gen_seed("name_roundtrip", 5) };
  int i;
  for (i = 0; i < 2000; i++) {
    tsr_variant v = random_variant(&r), w;
    char a[TSR_VARIANT_NAME_MAX], b[TSR_VARIANT_NAME_MAX];
    tsr_error err = { 0 };
    tsri_variant_format(&v, a);
    ck_assert_msg(tsri_variant_parse(a, &w, &err) == TSR_OK, "%s: %s", a, err.text);
    ck_assert_msg(memcmp(&v, &w, sizeof v) == 0, "parse(format(v)) != v for %s", a);
    tsri_variant_format(&w, b);
    ck_assert_str_eq(a, b);
  }
}
END_TEST

START_TEST(test_name_examples)
{
  tsr_variant v;
  tsr_error err = { 0 };
  char buf[TSR_VARIANT_NAME_MAX];
  ck_assert_int_eq(tsri_variant_parse("tsr_sm80_bf16_d128_m128n64_s2_w4_pers_mb", &v, &err), TSR_OK);
  ck_assert_int_eq(v.family, TSR_FAMILY_SM80);
  ck_assert_int_eq(v.dtype, TSR_DT_BF16);
  ck_assert_int_eq(v.head_dim, 128);
  ck_assert_int_eq(v.bm, 128);
  ck_assert_int_eq(v.bn, 64);
  ck_assert_int_eq(v.stages, 2);
  ck_assert_int_eq(v.warps, 4);
  ck_assert_int_eq(v.layout, TSR_TL_PERS);
  ck_assert_int_eq(v.membership, 1);
  ck_assert_int_eq(v.tma_box, 0);
  ck_assert_int_eq(tsri_variant_threads(&v), 128);
  ck_assert_int_eq(tsri_variant_smem_bytes(&v), (128 * 128 + 2 * 2 * 64 * 128) * 2);
  ck_assert_int_eq(tsri_variant_parse("tsr_sm90_fp16_d64_m128n128_s3_g3_flat_nm_tma64", &v, &err), TSR_OK);
  ck_assert_int_eq(v.family, TSR_FAMILY_SM90);
  ck_assert_int_eq(v.warpgroups, 3);
  ck_assert_int_eq(v.warps, 12);
  ck_assert_int_eq(v.tma_box, 64);
  ck_assert_int_eq(v.membership, 0);
  ck_assert_int_eq(tsri_variant_threads(&v), 384);
  ck_assert_int_eq(tsri_variant_check(&v, &err), TSR_OK);
  ck_assert_int_eq(tsri_variant_tasks_per_cta(&v), 1);
  {
    tsr_variant w;
    /* BM 64 with 3 warpgroups: two 64-row tasks a CTA, each with its own Q
     * tile, K/V ring and barriers */
    ck_assert_int_eq(tsri_variant_parse("tsr_sm90_bf16_d128_m64n64_s3_g3_flat_mb_tma64", &w, &err), TSR_OK);
    ck_assert_int_eq(tsri_variant_check(&w, &err), TSR_OK);
    ck_assert_int_eq(tsri_variant_tasks_per_cta(&w), 2);
    ck_assert_int_eq(tsri_variant_threads(&w), 384);
    ck_assert_int_eq(tsri_variant_smem_bytes(&w), 1024 + 2 * ((64 * 128 + 2 * 3 * 64 * 128) * 2 + 256));
    ck_assert(tsri_variant_fits(&w, "sm_90a", NULL));
    ck_assert_int_eq(tsri_variant_parse("tsr_sm90_bf16_d128_m64n64_s3_g2_flat_mb_tma64", &w, &err), TSR_OK);
    ck_assert_int_eq(tsri_variant_tasks_per_cta(&w), 1);
    ck_assert_int_eq(tsri_variant_smem_bytes(&w), 1024 + (64 * 128 + 2 * 3 * 64 * 128) * 2 + 256);
    /* three tasks a CTA (g4): one Q buffer a stream */
    ck_assert_int_eq(tsri_variant_parse("tsr_sm90_bf16_d128_m64n64_s1_g4_flat_mb_tma64", &w, &err), TSR_OK);
    ck_assert_int_eq(tsri_variant_check(&w, &err), TSR_OK);
    ck_assert_int_eq(tsri_variant_tasks_per_cta(&w), 3);
    ck_assert_int_eq(tsri_variant_threads(&w), 512);
    ck_assert_int_eq(tsri_variant_smem_bytes(&w), 1024 + 3 * ((64 * 128 + 2 * 64 * 128) * 2 + 256));
    ck_assert(tsri_variant_fits(&w, "sm_90a", NULL));
    ck_assert_int_eq(tsri_variant_parse("tsr_sm90_bf16_d64_m64n64_s2_g4_flat_mb_tma64", &w, &err), TSR_OK);
    ck_assert_int_eq(tsri_variant_smem_bytes(&w), 1024 + 3 * ((64 * 64 + 2 * 2 * 64 * 64) * 2 + 256));
    {
      /* the automatic plan takes g4 over g3 (flat and dyn) on the same
       * tile: at the power cap on the H100, uniform 64x64 blocks, +1-6% at
       * d128 and +13% at d64 (BENCHMARKS.md, 2026-12-07) */
      static const char *const below[] = {"tsr_sm90_bf16_d128_m64n64_s2_g3_flat_mb_tma64",
                                          "tsr_sm90_bf16_d128_m64n64_s2_g3_dyn_mb_tma64",
                                          "tsr_sm90_bf16_d128_m64n64_s3_g3_flat_mb_tma64"};
      tsr_variant g4, g3;
      tsr_variant_need need = {TSR_DT_BF16, 128, 64, 64, 1, 0, 0};
      size_t k;
      ck_assert_int_eq(tsri_variant_parse("tsr_sm90_bf16_d128_m64n64_s1_g4_flat_mb_tma64", &g4, &err), TSR_OK);
      ck_assert(tsri_variant_serves(&g4, "sm_90a", &need));
      for (k = 0; k < sizeof below / sizeof below[0]; k++) {
        ck_assert_int_eq(tsri_variant_parse(below[k], &g3, &err), TSR_OK);
        ck_assert_msg(tsri_variant_rank(&g4, "sm_90a", &need) > tsri_variant_rank(&g3, "sm_90a", &need),
                      "g4 ranks below %s", below[k]);
      }
    }
    /* two tasks a CTA with 2 stages: a second Q buffer a stream (v7) */
    ck_assert_int_eq(tsri_variant_parse("tsr_sm90_bf16_d128_m64n64_s2_g3_pers_mb_tma64", &w, &err), TSR_OK);
    ck_assert_int_eq(tsri_variant_tasks_per_cta(&w), 2);
    ck_assert_int_eq(tsri_variant_smem_bytes(&w), 1024 + 2 * ((2 * 64 * 128 + 2 * 2 * 64 * 128) * 2 + 256));
    ck_assert(tsri_variant_fits(&w, "sm_90a", NULL));
  }
  {
    /* the dyn task layout (issue 20): sm90 only, ranked below the same
     * tile's flat variant at d128, where FA3's step makes flat faster */
    tsr_variant w, f;
    tsr_variant_need need = { TSR_DT_BF16, 128, 64, 64, 1, 0, 0 };
    ck_assert_int_eq(tsri_variant_parse("tsr_sm90_bf16_d128_m64n64_s2_g3_dyn_mb_tma64", &w, &err), TSR_OK);
    ck_assert_int_eq(w.layout, TSR_TL_DYN);
    ck_assert_int_eq(tsri_variant_check(&w, &err), TSR_OK);
    ck_assert_int_eq(tsri_variant_tasks_per_cta(&w), 2);
    ck_assert_int_eq(tsri_variant_parse("tsr_sm90_bf16_d128_m64n64_s2_g3_flat_mb_tma64", &f, &err), TSR_OK);
    ck_assert(tsri_variant_serves(&w, "sm_90a", &need));
    ck_assert_int_lt(tsri_variant_rank(&w, "sm_90a", &need), tsri_variant_rank(&f, "sm_90a", &need));
    /* at d64 above it (measured faster on the H200 and the H100) */
    need.head_dim = 64;
    ck_assert_int_eq(tsri_variant_parse("tsr_sm90_bf16_d64_m128n128_s2_g3_dyn_nm_tma64", &w, &err), TSR_OK);
    ck_assert_int_eq(tsri_variant_parse("tsr_sm90_bf16_d64_m128n128_s2_g3_flat_nm_tma64", &f, &err), TSR_OK);
    need.bm = need.bn = 128;
    need.membership = 0;
    ck_assert(tsri_variant_serves(&w, "sm_90a", &need) && tsri_variant_serves(&f, "sm_90a", &need));
    ck_assert_int_gt(tsri_variant_rank(&w, "sm_90a", &need), tsri_variant_rank(&f, "sm_90a", &need));
    ck_assert_int_eq(tsri_variant_parse("tsr_sm80_bf16_d128_m128n64_s2_w4_dyn_mb", &w, &err), TSR_OK);
    ck_assert_int_eq(tsri_variant_check(&w, &err), TSR_ERR_INVALID);
    ck_assert_msg(strstr(err.text, "the dyn task layout needs the sm90 family") != NULL, "%s", err.text);
  }
  tsri_variant_format(&v, buf);
  ck_assert_str_eq(buf, "tsr_sm90_fp16_d64_m128n128_s3_g3_flat_nm_tma64");
  ck_assert_int_eq(v.fp8, 0);
  {
    /* FP8 (issue 18): one byte an element, whole rows a TMA box */
    tsr_variant w;
    ck_assert_int_eq(tsri_variant_parse("tsr_sm90_bf16_fp8_d128_m128n128_s2_g3_flat_mb_tma128", &w, &err), TSR_OK);
    ck_assert_int_eq(w.fp8, 1);
    ck_assert_int_eq(w.dtype, TSR_DT_BF16);
    ck_assert_int_eq(w.head_dim, 128);
    ck_assert_int_eq(w.tma_box, 128);
    ck_assert_int_eq(tsri_variant_check(&w, &err), TSR_OK);
    ck_assert_int_eq(tsri_variant_smem_bytes(&w), 1024 + (128 * 128 + 2 * 2 * 128 * 128) + 256);
    ck_assert(tsri_variant_fits(&w, "sm_90a", NULL));
    ck_assert(!tsri_variant_fits(&w, "sm_80", NULL));
    w.fp8 = 0;
    tsri_variant_format(&w, buf);
    ck_assert_str_eq(buf, "tsr_sm90_bf16_d128_m128n128_s2_g3_flat_mb_tma128");
    ck_assert_int_eq(tsri_variant_parse("tsr_sm90_fp16_fp8_d64_m64n64_s3_g3_flat_mb_tma64", &w, &err), TSR_OK);
    ck_assert_int_eq(tsri_variant_check(&w, &err), TSR_OK);
    ck_assert_int_eq(tsri_variant_smem_bytes(&w), 1024 + 2 * ((64 * 64 + 2 * 3 * 64 * 64) + 256));
  }
  {
    /* key gather (gather plans): kg in the membership's place; serves
     * gather plans only, and only a kg variant serves them */
    tsr_variant w, n;
    tsr_variant_need need = { TSR_DT_BF16, 128, 128, 128, 0, 0, 1 };
    ck_assert_int_eq(tsri_variant_parse("tsr_sm90_bf16_d128_m128n128_s2_g3_flat_kg_tma64", &w, &err), TSR_OK);
    ck_assert_int_eq(w.gather, 1);
    ck_assert_int_eq(w.membership, 0);
    ck_assert_int_eq(tsri_variant_check(&w, &err), TSR_OK);
    ck_assert_int_eq(tsri_variant_parse("tsr_sm90_bf16_d128_m128n128_s2_g3_flat_nm_tma64", &n, &err), TSR_OK);
    ck_assert_int_eq(tsri_variant_smem_bytes(&w), tsri_variant_smem_bytes(&n));
    ck_assert(tsri_variant_serves(&w, "sm_90a", &need));
    ck_assert(!tsri_variant_serves(&n, "sm_90a", &need));
    need.gather = 0;
    ck_assert(!tsri_variant_serves(&w, "sm_90a", &need));
    ck_assert(tsri_variant_serves(&n, "sm_90a", &need));
    /* 64-row tiles too (64x64 blocks), two tasks a CTA as their nm twin */
    ck_assert_int_eq(tsri_variant_parse("tsr_sm90_bf16_d64_m64n128_s2_g3_flat_kg_tma64", &w, &err), TSR_OK);
    ck_assert_int_eq(tsri_variant_check(&w, &err), TSR_OK);
    ck_assert_int_eq(tsri_variant_parse("tsr_sm90_bf16_d64_m64n128_s2_g3_flat_nm_tma64", &n, &err), TSR_OK);
    ck_assert_int_eq(tsri_variant_smem_bytes(&w), tsri_variant_smem_bytes(&n));
    ck_assert_int_eq(tsri_variant_smem_bytes(&w), 1024 + 2 * ((2 * 64 * 64 + 2 * 2 * 128 * 64) * 2 + 256));
    /* what the template implements, named */
    {
      static const char *const bad[] = { "tsr_sm80_bf16_d128_m128n128_s2_w8_flat_kg",
                                         "tsr_sm90_bf16_d128_m128n64_s2_g3_flat_kg_tma64",
                                         "tsr_sm90_bf16_d64_m64n64_s3_g3_flat_kg_tma64",
                                         "tsr_sm90_bf16_fp8_d128_m128n128_s2_g3_flat_kg_tma128",
                                         "tsr_sm90_bf16_d128_m128n128_s2_g3_dyn_kg_tma64" };
      size_t i;
      for (i = 0; i < sizeof bad / sizeof *bad; i++) {
        tsr_error_clear(&err); /* a set error keeps its first message */
        ck_assert_msg(tsri_variant_parse(bad[i], &w, &err) == TSR_OK, "%s: %s", bad[i], err.text);
        ck_assert_msg(tsri_variant_check(&w, &err) == TSR_ERR_INVALID, "%s passed the check", bad[i]);
        ck_assert_msg(strstr(err.text, "key gather (kg) needs") != NULL, "%s: %s", bad[i], err.text);
      }
    }
  }
}
END_TEST

static const struct {
  const char *name, *want;
} bad_names[] = {
  { "", "prefix" },
  { "tsr_", "family" },
  { "xsr_sm80_bf16_d128_m128n64_s2_w4_pers_mb", "prefix" },
  { "tsr_sm70_bf16_d128_m128n64_s2_w4_pers_mb", "family" },
  { "tsr_sm80_fp32_d128_m128n64_s2_w4_pers_mb", "dtype" },
  { "tsr_sm80_bf16_128_m128n64_s2_w4_pers_mb", "head dim" },
  { "tsr_sm80_bf16_d128_m128x64_s2_w4_pers_mb", "tile" },
  { "tsr_sm80_bf16_d128_m128n64_w4_pers_mb", "stages" },
  { "tsr_sm80_bf16_d128_m128n64_s2_g4_pers_mb", "warps" },
  { "tsr_sm90_bf16_d128_m128n64_s2_w4_pers_mb", "warpgroups" },
  { "tsr_sm80_bf16_d128_m128n64_s2_w4_grid_mb", "task layout" },
  { "tsr_sm80_bf16_d128_m128n64_s2_w4_pers_yes", "membership" },
  { "tsr_sm80_bf16_d128_m128n64_s2_w4_pers_mb_", "suffix" },
  { "tsr_sm80_bf16_d128_m128n64_s2_w4_pers_mb_tma", "suffix" },
  { "tsr_sm80_bf16_d128_m128n64_s2_w4_pers_mbx", "suffix" },
  { "tsr_sm80_bf16_d0128_m128n64_s2_w4_pers_mb", "not canonical" },
  { "tsr_sm80_bf16_d1234567_m128n64_s2_w4_pers_mb", "head dim" },
  { "tsr_sm80_bf16_d128_m128n64_s2_w4_pers_mb_tma064", "not canonical" },
};

START_TEST(test_name_rejects)
{
  tsr_variant v;
  tsr_error err = { 0 };
  const char *name = bad_names[_i].name;
  ck_assert_int_eq(tsri_variant_parse(name, &v, &err), TSR_ERR_INVALID);
  ck_assert_msg(strstr(err.text, bad_names[_i].want) != NULL, "'%s': error '%s' lacks '%s'", name, err.text,
                bad_names[_i].want);
  ck_assert_msg(strstr(err.text, name) != NULL, "error '%s' does not name '%s'", err.text, name);
}
END_TEST

static const struct {
  const char *name, *want;
} bad_params[] = {
  { "tsr_sm80_bf16_d96_m64n64_s2_w4_pers_mb", "head dim must be" },
  { "tsr_sm80_bf16_d128_m64n48_s2_w4_pers_mb", "BN must be" },
  { "tsr_sm80_bf16_d128_m96n64_s2_w4_pers_mb", "not a multiple of 16 rows" },
  { "tsr_sm80_bf16_d128_m256n64_s2_w4_pers_mb", "at most 32 rows" },
  { "tsr_sm80_bf16_d128_m64n64_s5_w4_pers_mb", "stages must be 1 to 4" },
  { "tsr_sm80_bf16_d128_m128n128_s1_w4_pers_mb", "stages 1 with 32 rows a warp needs BN at most 64" },
  { "tsr_sm80_bf16_d128_m64n64_s2_w3_pers_mb", "warps must be 2, 4 or 8" },
  { "tsr_sm80_bf16_d128_m64n64_s2_w4_pers_mb_tma64", "does not use TMA" },
  { "tsr_sm90_bf16_d128_m128n128_s2_g2_pers_mb_tma64", "needs 3 warpgroups" },
  { "tsr_sm90_bf16_d128_m128n128_s1_g4_flat_mb_tma64", "needs 3 warpgroups" },
  { "tsr_sm90_bf16_d128_m64n64_s1_g5_flat_mb_tma64", "warpgroups must be 2 to 4, got 5" },
  { "tsr_sm90_bf16_d128_m128n128_s2_g3_pers_mb", "TMA boxes of 64" },
  { "tsr_sm90_bf16_d128_m192n128_s2_g4_pers_mb_tma64", "BM must be 64 or 128" },
  { "tsr_sm90_bf16_d256_m128n128_s2_g3_pers_mb_tma64", "head dim must be 64 or 128" },
  { "tsr_sm90_bf16_fp8_d128_m128n128_s2_g3_flat_mb_tma64", "whole rows through TMA boxes of the head dim ('tma_box': 128)" },
  { "tsr_sm90_bf16_fp8_d64_m128n128_s2_g3_flat_mb_tma128", "('tma_box': 64), got 128" },
  { "tsr_sm80_bf16_fp8_d128_m128n64_s2_w4_pers_mb", "FP8 precision needs the sm90 family" },
};

START_TEST(test_param_rejects)
{
  tsr_variant v;
  tsr_error err = { 0 };
  ck_assert_int_eq(tsri_variant_parse(bad_params[_i].name, &v, &err), TSR_OK);
  ck_assert_int_eq(tsri_variant_check(&v, &err), TSR_ERR_INVALID);
  ck_assert_msg(strstr(err.text, bad_params[_i].want) != NULL, "'%s': error '%s' lacks '%s'",
                bad_params[_i].name, err.text, bad_params[_i].want);
}
END_TEST

START_TEST(test_fits)
{
  tsr_variant v;
  tsr_error err = { 0 };
  char why[160];
  /* 160 KiB: sm_80 (163 KiB), sm_90a, sm_100a yes; sm_89, sm_120 (99 KiB) no. */
  ck_assert_int_eq(tsri_variant_parse("tsr_sm80_bf16_d128_m128n128_s2_w8_pers_mb", &v, &err), TSR_OK);
  ck_assert(tsri_variant_fits(&v, "sm_80", why));
  ck_assert(tsri_variant_fits(&v, "sm_90a", why));
  ck_assert(tsri_variant_fits(&v, "sm_100a", why));
  ck_assert(!tsri_variant_fits(&v, "sm_89", why));
  ck_assert_msg(strstr(why, "163840 bytes of shared memory") != NULL, "%s", why);
  ck_assert(!tsri_variant_fits(&v, "sm_120", why));
  ck_assert(!tsri_variant_fits(&v, "sm_75", why));
  ck_assert_msg(strstr(why, "unknown arch") != NULL, "%s", why);
  /* Registers: 4 warps holding 128 x (128 + 128) fp32 accumulators. */
  ck_assert_int_eq(tsri_variant_parse("tsr_sm80_bf16_d128_m128n128_s2_w4_pers_mb", &v, &err), TSR_OK);
  ck_assert(!tsri_variant_fits(&v, "sm_80", why));
  ck_assert_msg(strstr(why, "registers") != NULL, "%s", why);
  /* The sm90 family only on sm_90a. */
  ck_assert_int_eq(tsri_variant_parse("tsr_sm90_bf16_d128_m128n128_s2_g3_pers_mb_tma64", &v, &err), TSR_OK);
  ck_assert(tsri_variant_fits(&v, "sm_90a", why));
  ck_assert(!tsri_variant_fits(&v, "sm_100a", why));
  ck_assert_msg(strstr(why, "needs sm_90a") != NULL, "%s", why);
  ck_assert_int_eq(tsri_variant_smem_bytes(&v), 1024 + 128 * 128 * 2 + 2 * 2 * 128 * 128 * 2 + 256);
  ck_assert_str_eq(tsri_arch_for_cc(9, 0), "sm_90a");
  ck_assert_str_eq(tsri_arch_for_cc(8, 6), "sm_80");
  ck_assert_str_eq(tsri_arch_for_cc(8, 9), "sm_89");
  ck_assert_str_eq(tsri_arch_for_cc(10, 0), "sm_100a");
  ck_assert_str_eq(tsri_arch_for_cc(12, 0), "sm_120");
  ck_assert_ptr_null(tsri_arch_for_cc(7, 5));
}
END_TEST

START_TEST(test_catalog_ok)
{
  tsr_catalog c;
  tsr_error err = { 0 };
  const char *text =
      "{\"version\": 1, \"variants\": ["
      "{\"family\": \"sm80\", \"dtype\": [\"bf16\", \"fp16\"], \"head_dim\": [64, 128],"
      " \"tile\": [[64, 64], [128, 64]], \"stages\": 2, \"warps\": 4},"
      "{\"family\": \"sm90\", \"dtype\": \"bf16\", \"head_dim\": 128, \"tile\": [128, 128],"
      " \"stages\": 2, \"warpgroups\": 3, \"tma_box\": 64, \"layout\": \"flat\", \"membership\": false}]}";
  ck_assert_msg(tsr_catalog_parse(text, "t.json", &c, &err) == TSR_OK, "%s", err.text);
  ck_assert_int_eq(c.n, 9);
  ck_assert_str_eq(c.items[0].name, "tsr_sm80_bf16_d64_m64n64_s2_w4_pers_mb");
  ck_assert_str_eq(c.items[7].name, "tsr_sm80_fp16_d128_m128n64_s2_w4_pers_mb");
  ck_assert_str_eq(c.items[8].name, "tsr_sm90_bf16_d128_m128n128_s2_g3_flat_nm_tma64");
  tsr_catalog_free(&c);
}
END_TEST

static const struct {
  const char *entry, *want;
} bad_entries[] = {
  { "{\"family\": \"sm80\", \"dtype\": \"bf16\", \"head_dim\": 64, \"tile\": [64, 64], \"stages\": 2, \"warps\": 4, \"color\": 1}", "unknown key 'color'" },
  { "{\"family\": \"sm70\", \"dtype\": \"bf16\", \"head_dim\": 64, \"tile\": [64, 64], \"stages\": 2, \"warps\": 4}", "unknown family 'sm70'" },
  { "{\"family\": \"sm80\", \"dtype\": \"fp8\", \"head_dim\": 64, \"tile\": [64, 64], \"stages\": 2, \"warps\": 4}", "unknown dtype" },
  { "{\"family\": \"sm80\", \"dtype\": \"bf16\", \"tile\": [64, 64], \"stages\": 2, \"warps\": 4}", "missing key 'head_dim'" },
  { "{\"family\": \"sm80\", \"dtype\": \"bf16\", \"head_dim\": \"64\", \"tile\": [64, 64], \"stages\": 2, \"warps\": 4}", "key 'head_dim' must be an integer" },
  { "{\"family\": \"sm80\", \"dtype\": \"bf16\", \"head_dim\": 64, \"tile\": [64], \"stages\": 2, \"warps\": 4}", "key 'tile'" },
  { "{\"family\": \"sm80\", \"dtype\": \"bf16\", \"head_dim\": 64, \"tile\": [64, 64], \"warps\": 4}", "missing key 'stages'" },
  { "{\"family\": \"sm80\", \"dtype\": \"bf16\", \"head_dim\": 64, \"tile\": [64, 64], \"stages\": 2, \"warps\": 4, \"tma_box\": 64}", "does not use TMA" },
  { "{\"family\": \"sm90\", \"dtype\": \"bf16\", \"head_dim\": 64, \"tile\": [128, 64], \"stages\": 2, \"warps\": 4}", "takes 'warpgroups'" },
  { "{\"family\": \"sm80\", \"dtype\": \"bf16\", \"head_dim\": 64, \"tile\": [64, 64], \"stages\": 2, \"warps\": 4, \"layout\": \"grid\"}", "key 'layout'" },
  { "{\"family\": \"sm80\", \"dtype\": \"bf16\", \"head_dim\": 64, \"tile\": [64, 64], \"stages\": 2, \"warps\": 4, \"membership\": 1}", "key 'membership'" },
  { "{\"family\": \"sm80\", \"dtype\": \"bf16\", \"head_dim\": 64, \"tile\": [[64, 64], [64, 64]], \"stages\": 2, \"warps\": 4}", "duplicate variant 'tsr_sm80_bf16_d64_m64n64_s2_w4_pers_mb'" },
  { "{\"family\": \"sm80\", \"dtype\": \"bf16\", \"head_dim\": 64, \"tile\": [100, 64], \"stages\": 2, \"warps\": 4}", "BM must be a multiple of 16" },
  { "{\"family\": \"sm80\", \"dtype\": \"bf16\", \"head_dim\": 80, \"tile\": [64, 64], \"stages\": 2, \"warps\": 4}", "head dim must be" },
  { "[1, 2]", "must be an object" },
  { "{\"family\": \"sm90\", \"precision\": \"fp9\", \"dtype\": \"bf16\", \"head_dim\": 64, \"tile\": [128, 64], \"stages\": 2, \"warpgroups\": 3, \"tma_box\": 64}", "key 'precision' must be" },
  { "{\"family\": \"sm80\", \"precision\": \"fp8\", \"dtype\": \"bf16\", \"head_dim\": 64, \"tile\": [64, 64], \"stages\": 2, \"warps\": 4}", "FP8 precision needs the sm90 family" },
  /* integers no name can spell are refused, never wrapped into an int
   * (4294967360 would be head dim 64) nor overflowed (4 * warpgroups):
   * fuzz_catalog */
  { "{\"family\": \"sm90\", \"dtype\": \"bf16\", \"head_dim\": 64, \"tile\": [128, 64], \"stages\": 2, \"warpgroups\": 2147483647, \"tma_box\": 64}", "key 'warpgroups' holds 2147483647, out of range [0, 99999]" },
  { "{\"family\": \"sm80\", \"dtype\": \"bf16\", \"head_dim\": 4294967360, \"tile\": [64, 64], \"stages\": 2, \"warps\": 4}", "key 'head_dim' holds 4294967360, out of range" },
  { "{\"family\": \"sm80\", \"dtype\": \"bf16\", \"head_dim\": [64, -64], \"tile\": [64, 64], \"stages\": 2, \"warps\": 4}", "key 'head_dim' holds -64, out of range" },
  { "{\"family\": \"sm80\", \"dtype\": \"bf16\", \"head_dim\": 64, \"tile\": [4294967360, 64], \"stages\": 2, \"warps\": 4}", "key 'tile' holds 4294967360, out of range" },
  { "{\"family\": \"sm80\", \"dtype\": \"bf16\", \"head_dim\": 64, \"tile\": [[64, 64], [64, -1]], \"stages\": 2, \"warps\": 4}", "key 'tile' holds -1, out of range" },
  { "{\"family\": \"sm80\", \"dtype\": \"bf16\", \"head_dim\": 64, \"tile\": [64, 64], \"stages\": -2, \"warps\": 4}", "key 'stages' holds -2, out of range" },
};

START_TEST(test_catalog_rejects)
{
  tsr_catalog c;
  tsr_error err = { 0 };
  char text[1024];
  snprintf(text, sizeof text, "{\"version\": 1, \"variants\": [%s]}", bad_entries[_i].entry);
  ck_assert_int_ne(tsr_catalog_parse(text, "bad.json", &c, &err), TSR_OK);
  ck_assert_msg(strstr(err.text, bad_entries[_i].want) != NULL, "error '%s' lacks '%s'", err.text,
                bad_entries[_i].want);
  ck_assert_ptr_null(c.items);
  ck_assert_int_eq(c.n, 0);
}
END_TEST

START_TEST(test_catalog_rejects_file)
{
  tsr_catalog c;
  tsr_error err = { 0 };
  ck_assert_int_eq(tsr_catalog_parse("{\"version\": 1, \"variants\": [", "x.json", &c, &err), TSR_ERR_FORMAT);
  ck_assert_msg(strstr(err.text, "bad catalog 'x.json': line 1") != NULL, "%s", err.text);
  tsr_error_clear(&err);
  ck_assert_int_eq(tsr_catalog_parse("{\"version\": 2, \"variants\": []}", "x.json", &c, &err), TSR_ERR_FORMAT);
  ck_assert_msg(strstr(err.text, "\"version\": 1") != NULL, "%s", err.text);
  tsr_error_clear(&err);
  ck_assert_int_eq(tsr_catalog_parse("{\"version\": 1, \"variants\": []}", "x.json", &c, &err), TSR_ERR_FORMAT);
  ck_assert_msg(strstr(err.text, "non-empty") != NULL, "%s", err.text);
  tsr_error_clear(&err);
  ck_assert_int_eq(tsr_catalog_parse("{\"version\": 1, \"extra\": 0, \"variants\": [{}]}", "x.json", &c, &err),
                   TSR_ERR_FORMAT);
  ck_assert_msg(strstr(err.text, "unknown top-level key 'extra'") != NULL, "%s", err.text);
  tsr_error_clear(&err);
  ck_assert_int_eq(tsr_catalog_load("/nonexistent/catalog.json", &c, &err), TSR_ERR_IO);
  ck_assert_msg(strstr(err.text, "cannot read catalog '/nonexistent/catalog.json'") != NULL, "%s", err.text);
}
END_TEST

static const char *builddir(void)
{
  const char *b = getenv("TSR_TOP_BUILDDIR");
  return b && *b ? b : ".";
}

static const char *srcdir(void)
{
  const char *s = getenv("TSR_TOP_SRCDIR");
  return s && *s ? s : "..";
}

/* The built bundle holds every catalog variant for every target it fits. */
START_TEST(test_bundle_complete)
{
  char path[4096];
  tsr_catalog cat;
  tsr_bundle b;
  tsr_error err = { 0 };
  size_t i;
  int a, sm80_on_sm90 = 0;
  snprintf(path, sizeof path, "%s/gen/catalog.json", srcdir());
  ck_assert_msg(tsr_catalog_load(path, &cat, &err) == TSR_OK, "%s", err.text);
  snprintf(path, sizeof path, "%s/bundle", builddir());
  ck_assert_msg(tsri_bundle_load(path, &b, &err) == TSR_OK, "%s", err.text);
  ck_assert_str_eq(b.generator, TSR_GEN_VERSION);
  ck_assert_msg(strlen(b.nvrtc) >= 3, "nvrtc version '%s'", b.nvrtc);
  for (i = 0; i < cat.n; i++) {
    long k = tsri_bundle_find(&b, cat.items[i].name);
    ck_assert_msg(k >= 0, "variant %s missing from the registry", cat.items[i].name);
    for (a = 0; a < TSR_N_ARCHS; a++) {
      const char *arch = tsri_variant_archs[a];
      int fits = tsri_variant_fits(&cat.items[i].v, arch, NULL);
      ck_assert_msg(!!(b.items[k].targets & (1u << a)) == fits, "%s for %s: built %d, fits %d",
                    cat.items[i].name, arch, !!(b.items[k].targets & (1u << a)), fits);
      if (fits) {
        void *data;
        size_t size;
        const unsigned char *e;
        ck_assert_msg(tsri_bundle_read_cubin(&b, (size_t)k, arch, &data, &size, &err) == TSR_OK, "%s", err.text);
        e = data;
        /* A plain ELF: class 64, e_machine EM_CUDA (190). */
        ck_assert(size > 64 && e[4] == 2 && (e[18] | e[19] << 8) == 190);
        free(data);
        ck_assert_int_eq(strlen(b.items[k].hash[a]), 16);
        if (cat.items[i].v.family == TSR_FAMILY_SM80 && strcmp(arch, "sm_90a") == 0) sm80_on_sm90++;
      }
    }
  }
  ck_assert_int_eq(b.n, cat.n);
  ck_assert_msg(sm80_on_sm90 > 0, "the sm_90a bundle holds no sm80-family variant");
  tsri_bundle_free(&b);
  tsr_catalog_free(&cat);
}
END_TEST

/* Issue 17: every target keeps a 64-row and a 128-row variant for head
 * dims 64 and 128 in both dtypes, among the variants that fit it; the
 * sm_80 cubins also run on sm_86 parts (99 KiB a block, tsri_arch_for_cc),
 * so that target must keep them within 99 KiB too. */
START_TEST(test_catalog_coverage)
{
  char path[4096];
  tsr_catalog cat;
  tsr_error err = { 0 };
  static const int dims[] = { 64, 128 }, rows[] = { 64, 128 };
  static const tsr_dtype dts[] = { TSR_DT_BF16, TSR_DT_F16 };
  int a, di, ri, ti;
  snprintf(path, sizeof path, "%s/gen/catalog.json", srcdir());
  ck_assert_msg(tsr_catalog_load(path, &cat, &err) == TSR_OK, "%s", err.text);
  for (a = 0; a <= TSR_N_ARCHS; a++) {
    /* a == TSR_N_ARCHS: sm_80 cubins on an sm_86 part */
    const char *arch = a < TSR_N_ARCHS ? tsri_variant_archs[a] : "sm_80";
    int64_t lim = a < TSR_N_ARCHS ? tsri_arch_smem_limit(arch) : tsri_arch_smem_limit("sm_89");
    for (ti = 0; ti < 2; ti++)
      for (di = 0; di < 2; di++)
        for (ri = 0; ri < 2; ri++) {
          size_t i;
          int found = 0;
          for (i = 0; i < cat.n && !found; i++) {
            const tsr_variant *v = &cat.items[i].v;
            found = v->dtype == dts[ti] && v->head_dim == dims[di] && v->bm == rows[ri] &&
                    tsri_variant_fits(v, arch, NULL) && tsri_variant_smem_bytes(v) <= lim;
          }
          ck_assert_msg(found, "no %s d%d %d-row variant fits %s%s", tsri_variant_dtype_name(dts[ti]), dims[di],
                        rows[ri], arch, a < TSR_N_ARCHS ? "" : " within 99 KiB (sm_86)");
        }
  }
  tsr_catalog_free(&cat);
}
END_TEST

START_TEST(test_bundle_pick)
{
  char path[4096];
  tsr_bundle b;
  tsr_error err = { 0 };
  tsr_variant_need need = {0}; /* native precision unless set */
  long k;
  snprintf(path, sizeof path, "%s/bundle", builddir());
  ck_assert_msg(tsri_bundle_load(path, &b, &err) == TSR_OK, "%s", err.text);
  need.dtype = TSR_DT_BF16;
  need.head_dim = 128;
  need.bm = 128;
  need.bn = 64;
  need.membership = 1;
  k = tsri_bundle_pick(&b, "sm_80", &need, 166912);
  ck_assert(k >= 0);
  ck_assert(b.items[k].v.membership && b.items[k].v.bm == 128 && b.items[k].v.bn == 64);
  need.head_dim = 96;
  ck_assert_int_eq(tsri_bundle_pick(&b, "sm_80", &need, 166912), -1);
  need.head_dim = 128;
  ck_assert_int_eq(tsri_bundle_pick(&b, "sm_75", &need, 166912), -1);
  ck_assert_int_eq(tsri_bundle_pick(&b, "sm_80", &need, 1024), -1);
  /* FP8 (issue 18): an FP8 need gets an FP8 variant or none, a native need
   * never an FP8 one */
  need.fp8 = 1;
  ck_assert_int_eq(tsri_bundle_pick(&b, "sm_80", &need, 166912), -1);
  k = tsri_bundle_pick(&b, "sm_90a", &need, 232448);
  ck_assert(k >= 0);
  ck_assert_msg(b.items[k].v.fp8 && strstr(b.items[k].name, "_fp8_"), "%s", b.items[k].name);
  need.bm = 64;
  need.bn = 128; /* no FP8 variant of this tile */
  ck_assert_int_eq(tsri_bundle_pick(&b, "sm_90a", &need, 232448), -1);
  need.fp8 = 0;
  for (k = 0; k < (long)b.n; k++)
    if (tsri_variant_serves(&b.items[k].v, "sm_90a", &need)) ck_assert(!b.items[k].v.fp8);
  need.bm = need.bn = 128;
  k = tsri_bundle_pick(&b, "sm_90a", &need, 232448);
  ck_assert(k >= 0 && !b.items[k].v.fp8 && !b.items[k].v.gather);
  /* a gather plan gets a kg variant (the catalog has them for sm_90a) and
   * none on the targets without the sm90 family */
  need.gather = 1;
  need.membership = 0;
  k = tsri_bundle_pick(&b, "sm_90a", &need, 232448);
  ck_assert_msg(k >= 0 && b.items[k].v.gather && strstr(b.items[k].name, "_kg_"), "%ld", k);
  ck_assert_int_eq(tsri_bundle_pick(&b, "sm_80", &need, 166912), -1);
  tsri_bundle_free(&b);
}
END_TEST

/* The current plan layout version as text, for hand-written registries. */
#define LAYOUT_STR2(x) #x
#define LAYOUT_STR1(x) LAYOUT_STR2(x)
#define LAYOUT_STR LAYOUT_STR1(TSR_PLAN_LAYOUT_VERSION)

/* A registry whose fields disagree with a name, or that names an unknown
 * target or another plan layout, is refused. */
START_TEST(test_registry_rejects)
{
  static const struct {
    const char *json, *want;
  } bad[] = {
    { "{\"format\": 1, \"layout_version\": " LAYOUT_STR ", \"variants\": [{\"name\": \"tsr_sm80_bf16_d64_m64n64_s2_w4_pers_mb\", "
      "\"head_dim\": 128, \"bm\": 64, \"bn\": 64, \"stages\": 2, \"warps\": 4, \"warpgroups\": 0, \"tma_box\": 0, "
      "\"threads\": 128, \"smem\": 40960, \"membership\": true, \"targets\": {}}]}",
      "disagree with its name" },
    { "{\"format\": 1, \"layout_version\": " LAYOUT_STR ", \"variants\": [{\"name\": \"tsr_sm80_bf16_d64_m64n64_s2_w4_pers_mb\", "
      "\"head_dim\": 64, \"bm\": 64, \"bn\": 64, \"stages\": 2, \"warps\": 4, \"warpgroups\": 0, \"tma_box\": 0, "
      "\"threads\": 128, \"smem\": 40960, \"membership\": true, \"targets\": {\"sm_75\": {\"hash\": \"0123456789abcdef\"}}}]}",
      "unknown target 'sm_75'" },
    /* parses, but no kernel has it: refused before its sizes are computed
     * (fuzz_catalog: its shared memory overflowed int64) */
    { "{\"format\": 1, \"layout_version\": " LAYOUT_STR ", \"variants\": [{\"name\": "
      "\"tsr_sm90_bf16_d99999_m64n99999_s99999_g99999_pers_mb_tma99999\", \"head_dim\": 99999, \"bm\": 64, "
      "\"bn\": 99999, \"stages\": 99999, \"warps\": 399996, \"warpgroups\": 99999, \"tma_box\": 99999, "
      "\"threads\": 12799872, \"smem\": 0, \"membership\": true, \"targets\": {}}]}",
      "variant 'tsr_sm90_bf16_d99999_m64n99999_s99999_g99999_pers_mb_tma99999': head dim must be" },
    { "{\"format\": 1, \"layout_version\": 99, \"variants\": []}", "plan layout 99" },
    { "{\"format\": 1, \"layout_version\": " LAYOUT_STR ", \"variants\": [{\"name\": \"tsr_bogus\"}]}", "bad variant name 'tsr_bogus'" },
    { "{\"format\": 1, \"layout_version\": " LAYOUT_STR ", \"variants\": [", "bad kernel registry" },
    { "{\"format\": 1, \"layout_version\": " LAYOUT_STR ", \"variants\": [], \"planner\": {\"sm_75\": {}}}",
      "planner target 'sm_75' is unknown" },
  };
  char dir[] = "/tmp/tsr-registry-XXXXXX", path[4096];
  tsr_bundle b;
  tsr_error err = { 0 };
  size_t i;
  ck_assert_ptr_nonnull(mkdtemp(dir));
  snprintf(path, sizeof path, "%s/registry.json", dir);
  for (i = 0; i < sizeof bad / sizeof *bad; i++) {
    FILE *f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    fputs(bad[i].json, f);
    fclose(f);
    tsr_error_clear(&err);
    ck_assert_int_ne(tsri_bundle_load(dir, &b, &err), TSR_OK);
    ck_assert_msg(strstr(err.text, bad[i].want) != NULL, "error '%s' lacks '%s'", err.text, bad[i].want);
    ck_assert_ptr_null(b.items);
  }
  unlink(path);
  tsr_error_clear(&err);
  ck_assert_int_eq(tsri_bundle_load(dir, &b, &err), TSR_ERR_IO);
  ck_assert_msg(strstr(err.text, "cannot read kernel registry") != NULL, "%s", err.text);
  rmdir(dir);
}
END_TEST

/* Without a driver the context fails cleanly, naming libcuda.so.1; with one
 * (the GPU machine) it must come up with this tree's bundle.  Null handles
 * are refused either way. */
START_TEST(test_context)
{
  tsr_context_opts o;
  tsr_context *ctx = (tsr_context *)1;
  tsr_error err = { 0 };
  char path[4096];
  tsr_status st;
  tsr_gpu_tensors t;
  snprintf(path, sizeof path, "%s/bundle", builddir());
  tsr_context_opts_init(&o);
  o.bundle_dir = path;
  st = tsr_context_create(&o, &ctx, &err);
  if (st == TSR_ERR_NO_DEVICE) {
    ck_assert_ptr_null(ctx);
    ck_assert_msg(strstr(err.text, "libcuda.so.1") != NULL || strstr(err.text, "device") != NULL, "%s",
                  err.text);
  } else {
    ck_assert_msg(st == TSR_OK, "%s", err.text);
    tsr_context_destroy(ctx);
  }
  tsr_context_destroy(NULL);
  memset(&t, 0, sizeof t);
  tsr_error_clear(&err);
  ck_assert_int_eq(tsr_gpu_upload(NULL, NULL, &err), TSR_ERR_INVALID);
  tsr_error_clear(&err);
  ck_assert_int_eq(tsr_gpu_launch(NULL, NULL, &t, NULL, &err), TSR_ERR_INVALID);
}
END_TEST

int main(void)
{
  Suite *s = suite_create("gen");
  TCase *tc = tcase_create("core");
  tcase_set_timeout(tc, 60);
  tcase_add_test(tc, test_name_roundtrip);
  tcase_add_test(tc, test_name_examples);
  tcase_add_loop_test(tc, test_name_rejects, 0, (int)(sizeof bad_names / sizeof *bad_names));
  tcase_add_loop_test(tc, test_param_rejects, 0, (int)(sizeof bad_params / sizeof *bad_params));
  tcase_add_test(tc, test_fits);
  tcase_add_test(tc, test_catalog_ok);
  tcase_add_loop_test(tc, test_catalog_rejects, 0, (int)(sizeof bad_entries / sizeof *bad_entries));
  tcase_add_test(tc, test_catalog_rejects_file);
  tcase_add_test(tc, test_bundle_complete);
  tcase_add_test(tc, test_catalog_coverage);
  tcase_add_test(tc, test_bundle_pick);
  tcase_add_test(tc, test_registry_rejects);
  tcase_add_test(tc, test_context);
  suite_add_tcase(s, tc);
  return tu_run_suite(s);
}
