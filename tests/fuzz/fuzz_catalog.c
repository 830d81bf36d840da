/*
 * fuzz_catalog.c: libFuzzer harness of the two readers of kernel variant
 * descriptions that take user input: the catalog parser (gen/catalog.c,
 * `tessera-gen --catalog FILE`) and the variant name parser
 * (tsri_variant_parse: `variant=` of tessera.attention, Plan, GpuPlan,
 * lookup-table rows, the bundle's registry.json).
 *
 * Input: any bytes, read both ways: as catalog JSON text (cut at the first
 * NUL, as a file read into a C string is), and as a variant name (the
 * first MAX_NAME bytes, NUL-terminated).  The seeds are gen/catalog.json,
 * one-entry catalogs of it and every variant name it expands to (mkseeds
 * catalog), so both readers start from what they accept.
 *
 * Promises checked (a broken one aborts: a finding):
 *  - every failure returns a status with a message, and a refused catalog
 *    holds no entries;
 *  - every variant of an accepted catalog passes tsri_variant_check, its
 *    name is the canonical one (tsri_variant_format), parses back to the
 *    same variant, and tsri_variant_fits answers for every compile target
 *    (and refuses an unknown one) with a reason when it says no;
 *  - no two variants of a catalog share a name;
 *  - an accepted name round-trips (name -> variant -> name identical) and
 *    fits in TSR_VARIANT_NAME_MAX; tsri_variant_check of it either passes,
 *    and then fits and the sizes are computed as for a catalog variant, or
 *    refuses with a message;
 *  - a refused name leaves the caller's variant untouched.
 */
#include "catalog.h"
#include "fuzz.h"

/* Longer than any canonical name, so the parser sees over-long input. */
#define MAX_NAME (2 * TSR_VARIANT_NAME_MAX)

/* What every checked variant promises: canonical name, round trip, fit
 * answers for every target with a reason on refusal. */
static void check_variant(const tsr_variant *v, const char *name, const char *from)
{
  tsr_variant back;
  tsr_error err = {0};
  char fmt[TSR_VARIANT_NAME_MAX], why[160];
  int a;
  tsri_variant_format(v, fmt);
  if (strcmp(fmt, name) != 0)
    FZ_FINDING("%s: variant named '%s' formats as '%s'", from, name, fmt);
  if (tsri_variant_parse(name, &back, &err) != TSR_OK)
    FZ_FINDING("%s: name '%s' does not parse back: %s", from, name, err.text);
  if (memcmp(&back, v, sizeof back) != 0)
    FZ_FINDING("%s: name '%s' parses back to another variant", from, name);
  if (tsri_variant_threads(v) <= 0 || tsri_variant_tasks_per_cta(v) < 1 || tsri_variant_smem_bytes(v) <= 0)
    FZ_FINDING("%s: variant '%s': threads %d, tasks a CTA %d, smem %lld", from, name,
               tsri_variant_threads(v), tsri_variant_tasks_per_cta(v), (long long)tsri_variant_smem_bytes(v));
  for (a = 0; a < TSR_N_ARCHS; a++) {
    why[0] = '\0';
    if (!tsri_variant_fits(v, tsri_variant_archs[a], why) && !why[0])
      FZ_FINDING("%s: variant '%s' does not fit %s and says not why", from, name, tsri_variant_archs[a]);
  }
  why[0] = '\0';
  if (tsri_variant_fits(v, "sm_75", why) || !why[0])
    FZ_FINDING("%s: variant '%s' fits the unknown target sm_75 (or says not why)", from, name);
}

static void fuzz_catalog_text(const char *text)
{
  tsr_catalog cat;
  tsr_error err = {0};
  size_t i, j;
  tsr_status st = tsr_catalog_parse(text, "fuzz.json", &cat, &err);
  FZ_CHECK_ERR(st, err, "tsr_catalog_parse");
  if (st != TSR_OK) {
    if (cat.n || cat.items)
      FZ_FINDING("a refused catalog holds %zu entries", cat.n);
    return;
  }
  if (cat.n == 0)
    FZ_FINDING("an accepted catalog holds no variants");
  for (i = 0; i < cat.n; i++) {
    const tsr_catalog_entry *e = &cat.items[i];
    tsr_error ce = {0};
    if (tsri_variant_check(&e->v, &ce) != TSR_OK)
      FZ_FINDING("catalog variant '%s' fails the check: %s", e->name, ce.text);
    check_variant(&e->v, e->name, "catalog");
    for (j = 0; j < i; j++)
      if (!strcmp(cat.items[j].name, e->name))
        FZ_FINDING("catalog variants %zu and %zu are both '%s'", j, i, e->name);
  }
  tsr_catalog_free(&cat);
}

static void fuzz_name(const char *name)
{
  tsr_variant v, poison;
  tsr_error err = {0};
  char back[TSR_VARIANT_NAME_MAX];
  tsr_status st;
  memset(&poison, 0x5a, sizeof poison);
  v = poison;
  st = tsri_variant_parse(name, &v, &err);
  FZ_CHECK_ERR(st, err, "tsri_variant_parse");
  if (st != TSR_OK) {
    if (memcmp(&v, &poison, sizeof v) != 0)
      FZ_FINDING("a refused name changed the caller's variant");
    return;
  }
  if (strlen(name) >= TSR_VARIANT_NAME_MAX)
    FZ_FINDING("accepted a name of %zu bytes, the limit is %d", strlen(name), TSR_VARIANT_NAME_MAX - 1);
  tsri_variant_format(&v, back);
  if (strcmp(back, name) != 0)
    FZ_FINDING("name '%s' parses to a variant named '%s'", name, back);
  memset(&err, 0, sizeof err);
  st = tsri_variant_check(&v, &err);
  FZ_CHECK_ERR(st, err, "tsri_variant_check");
  if (st == TSR_OK)
    check_variant(&v, name, "name");
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
  char *text = malloc(size + 1), name[MAX_NAME + 1];
  size_t n = size < MAX_NAME ? size : MAX_NAME;
  if (!text)
    abort();
  memcpy(text, data, size);
  text[size] = '\0';
  fuzz_catalog_text(text);
  free(text);
  memcpy(name, data, n);
  name[n] = '\0';
  fuzz_name(name);
  return 0;
}
