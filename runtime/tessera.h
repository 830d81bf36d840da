/*
 * tessera.h: public interface of libtessera, dynamic block-sparse attention
 * for video diffusion transformers.
 *
 * A logical mask says *what* to compute: per (batch, head) a boolean over
 * (query block, key block) pairs of a block geometry.  A plan says *how*: the
 * logical blocks mapped onto physical tiles of a generated kernel variant and
 * grouped into GPU tasks.  Every path (CPU reference, CPU plan executor, GPU)
 * computes, for each query token, softmax(q k^T * scale) over exactly the
 * selected key tokens, times V; a query row with no selected key yields zeros
 * and log-sum-exp -inf.
 *
 * Conventions
 *  - One prefix per module: tsr_npy_*, tsr_geom_*, tsr_mask_*, tsr_ref_*,
 *    tsr_plan_*, tsr_cpu_*, tsr_gpu_*, tsr_db_*, tsr_select_*.
 *  - This header is the request path, and libtessera.so exports exactly the
 *    functions it declares (the build derives the export list from it).
 *    The library's internals are named tsri_* (private headers of runtime/)
 *    and are not exported; tests/exports.sh holds both rules.  The
 *    mask corpus and the profiler's database writers belong to the tools:
 *    profiler/tools.h, tessera-tools(3).
 *  - Opaque handles with create/destroy pairs; destroy(NULL) is a no-op.
 *  - Every fallible call returns a tsr_status and fills a caller-owned
 *    tsr_error (may be NULL) with one lowercase line that names the subject,
 *    the problem and the value, git style:
 *        cannot read mask 'm.npy': expected 3 or 4 dimensions, got 2
 *    The first error set wins; later ones do not overwrite it.
 *  - No globals, no exit(), no output on stdout/stderr from library code.
 *  - Thread safety: distinct handles may be used from distinct threads; one
 *    handle must not be used concurrently unless its section says so.
 */
#ifndef TESSERA_H
#define TESSERA_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- Status codes ---------------------------------------------------- */

/* X-macro: name, message.  tsr_strerror() reads the same table. */
#define TSR_STATUS_LIST(X)                                              \
  X(TSR_OK, "success")                                                  \
  X(TSR_ERR_INVALID, "invalid argument")                                \
  X(TSR_ERR_NOMEM, "out of memory")                                     \
  X(TSR_ERR_IO, "input/output error")                                   \
  X(TSR_ERR_FORMAT, "malformed file")                                   \
  X(TSR_ERR_DTYPE, "unsupported data type")                             \
  X(TSR_ERR_SHAPE, "shape mismatch")                                    \
  X(TSR_ERR_UNSUPPORTED, "unsupported configuration")                   \
  X(TSR_ERR_NO_VARIANT, "no kernel variant for this problem")           \
  X(TSR_ERR_NO_DEVICE, "no CUDA device or driver")                      \
  X(TSR_ERR_CUDA, "CUDA driver error")                                  \
  X(TSR_ERR_NVRTC, "NVRTC compilation error")                           \
  X(TSR_ERR_DB, "database error")                                       \
  X(TSR_ERR_VERIFY, "plan verification failed")                         \
  X(TSR_ERR_CAPACITY, "capacity exceeded")

typedef enum {
#define TSR_X_ENUM(name, msg) name,
  TSR_STATUS_LIST(TSR_X_ENUM)
#undef TSR_X_ENUM
  TSR_STATUS_COUNT
} tsr_status;

/* Static message for a status code; never NULL. */
const char *tsr_strerror(tsr_status s);

/* Caller-owned error detail.  Zero-initialise (or tsr_error_clear) before
 * use; the first error recorded wins. */
#define TSR_ERROR_TEXT 320
typedef struct {
  tsr_status status;
  char text[TSR_ERROR_TEXT];
} tsr_error;

void tsr_error_clear(tsr_error *err);
/* Records (status, printf-style text) into err unless err is NULL or already
 * holds an error.  Returns status so callers can `return tsr_error_set(...)`. */
tsr_status tsr_error_set(tsr_error *err, tsr_status status, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;

/* ---- Size limits ------------------------------------------------------ */

/* Every size a caller or an input file gives (options, .npy shapes, corpus
 * manifests, lookup rows) is checked against these before anything is
 * allocated for it, and refused with a message naming the size, its value
 * and the limit: TSR_ERR_INVALID or TSR_ERR_SHAPE for a size out of range,
 * TSR_ERR_CAPACITY for a plan that would outgrow its records.  Each limit is
 * what the kernels and the plan records (plan_layout.h) can address: they
 * index tokens, tiles, rows, tasks and records with 32-bit signed integers
 * (tsr_i32); only element offsets (index x stride) are 64-bit.  tessera(3)
 * and the LIMITS sections of the man pages list them with the memory each
 * unit costs. */

/* Largest physical tile edge the planner accepts (rows a multiple of 16,
 * columns of 32; map.c). */
#define TSR_MAX_TILE 512
/* Tokens of a query or key sequence.  A kernel computes token = q_tile * BM
 * + row (k_tile * BN + column) in 32 bits, up to the end of the last tile,
 * so a sequence leaves room for one largest tile below 2^31:
 * 2,147,483,136. */
#define TSR_MAX_SEQ ((int64_t)INT32_MAX - TSR_MAX_TILE + 1)
/* Batch, heads and head dim: 32-bit kernel parameters and record fields
 * (tsr_kernel_params, tsr_task_rec). */
#define TSR_MAX_DIM ((int64_t)INT32_MAX)
/* Problem rows, batch x query heads x query tiles: task, member and merge
 * records and the planner's row tables number them in 32 bits (and so does
 * the device planner, tsr_gpuplan_params.n_rows). */
#define TSR_MAX_ROWS ((int64_t)INT32_MAX)
/* Tile records of a plan: tasks address them by 32-bit tile_begin and
 * tile_end.  Counted over the mask's planes (a broadcast plane once), before
 * GQA heads with identical rows share theirs. */
#define TSR_MAX_TILE_RECORDS ((int64_t)INT32_MAX)
/* Membership words of a plan: a tile addresses its words by a 32-bit
 * offset (tsr_tile_rec.mem).  Counted like the tile records. */
#define TSR_MAX_MEMBERSHIP_WORDS ((int64_t)INT32_MAX)
/* Block pairs of a logical mask (batch x heads x query blocks x key
 * blocks): one byte each, 16 GiB at the limit, which keeps every size the
 * planner derives from a mask (words, bytes) clear of 64-bit overflow. */
#define TSR_MAX_MASK_PAIRS ((int64_t)1 << 34)
/* Not from addressing but from what a lookup database holds: the steps of
 * SQLite's virtual machine one statement on a tsr_db handle may take, 2^26
 * (about a second of one core; the largest statement of tessera-profile
 * build over the H200 timings of db/h200-timings.sql.gz takes 89,000), so
 * that a recursive trigger or a table of billions of rows fails with a
 * message instead of running for hours (a tool sets another budget with
 * tsri_db_set_budget, tessera-tools(3); views are refused at open); and the
 * rows one GPU's lookup table may have when loaded (tsr_select_load; the
 * shipped H200 table has 28). */
#define TSR_DB_MAX_STEPS ((int64_t)1 << 26)
#define TSR_SELECT_MAX_ROWS ((int64_t)1 << 16)

/* ---- NumPy .npy arrays (runtime/npy.c) -------------------------------- */

typedef enum {
  TSR_DT_BOOL,
  TSR_DT_U8,
  TSR_DT_I32,
  TSR_DT_I64,
  TSR_DT_F16,
  TSR_DT_BF16, /* device-side only; never read from .npy */
  TSR_DT_F32,
  TSR_DT_F64
} tsr_dtype;

#define TSR_MAX_DIMS 8

/* A dense C-order host array.  Plain data: the loader allocates `data` with
 * malloc and tsr_npy_free releases it. */
typedef struct {
  tsr_dtype dtype;
  int ndim;
  int64_t shape[TSR_MAX_DIMS];
  void *data;
} tsr_array;

size_t tsr_dtype_size(tsr_dtype dt);
/* The one spelling of each dtype, everywhere (messages, kernel variant
 * names, catalogs, lookup tables): "bool", "uint8", "int32", "int64",
 * "fp16", "bf16", "float32", "float64"; "unknown" for other values. */
const char *tsr_dtype_name(tsr_dtype dt);
/* Parses those names; returns 0 on success, -1 for an unknown name. */
int tsr_dtype_parse(const char *name, tsr_dtype *out);
/* The product of the shape (1 for 0 dimensions); -1 when a dimension is
 * negative or the product overflows int64, 0 for a NULL array or an ndim
 * outside 0..TSR_MAX_DIMS. */
int64_t tsr_array_numel(const tsr_array *a);

/* Reads a version 1/2/3 .npy file.  Rejects Fortran order, big-endian data,
 * unsupported dtypes, truncated payloads and malformed headers with an error
 * naming the file.  On failure *out is left zeroed. */
tsr_status tsr_npy_load(const char *path, tsr_array *out, tsr_error *err);
/* Writes `a` atomically: to a temporary file beside `path`, then rename(2), so
 * a failure never leaves a partial file at `path`.  A symbolic link is
 * written through (the link stays), a character device or FIFO directly; a
 * directory or other non-regular file is refused. */
tsr_status tsr_npy_save(const char *path, const tsr_array *a, tsr_error *err);
void tsr_npy_free(tsr_array *a);

/* Half precision conversions (round to nearest even). */
float tsr_half_to_float(uint16_t h);
uint16_t tsr_float_to_half(float f);
float tsr_bf16_to_float(uint16_t h);
uint16_t tsr_float_to_bf16(float f);

/* ---- Logical block geometry (runtime/geom.c) -------------------------- */

/* Query and key boundaries in tokens.  Uniform: blocks bq x bk with a ragged
 * last block.  Variable: per-block sizes (all positive) that sum to the
 * sequence lengths. */
typedef struct tsr_geom tsr_geom;

/* The longest sequence (TSR_MAX_SEQ, "Size limits" below); kept for callers
 * that used the name before the limits had their own section. */
#define TSR_GEOM_MAX_SEQ TSR_MAX_SEQ

tsr_status tsr_geom_uniform(int64_t seq_q, int64_t seq_k, int64_t bq, int64_t bk,
                            tsr_geom **out, tsr_error *err);
tsr_status tsr_geom_variable(const int64_t *q_sizes, int64_t nq,
                             const int64_t *k_sizes, int64_t nk,
                             tsr_geom **out, tsr_error *err);
void tsr_geom_destroy(tsr_geom *g);

int64_t tsr_geom_seq_q(const tsr_geom *g);
int64_t tsr_geom_seq_k(const tsr_geom *g);
int64_t tsr_geom_nq(const tsr_geom *g);  /* number of query blocks */
int64_t tsr_geom_nk(const tsr_geom *g);  /* number of key blocks */
/* Block i spans tokens [q_start(i), q_start(i+1)); q_start(nq) == seq_q.
 * An index outside [0, nq] (or [0, nk]) gives -1. */
int64_t tsr_geom_q_start(const tsr_geom *g, int64_t i);
int64_t tsr_geom_k_start(const tsr_geom *g, int64_t j);
/* Nonzero when the geometry was made by tsr_geom_uniform; then *bq, *bk are set. */
int tsr_geom_is_uniform(const tsr_geom *g, int64_t *bq, int64_t *bk);

/* ---- Logical masks (runtime/mask.c) ------------------------------------ */

/* A boolean [batch, heads, nq, nk] mask, one byte per block pair (0 or 1).
 * batch == 1 or heads == 1 broadcast over the problem's batch / heads. */
typedef struct tsr_mask tsr_mask;

/* From a .npy (bool or uint8; [H, NQ, NK] or [B, H, NQ, NK]; nonzero = selected). */
tsr_status tsr_mask_load(const char *path, tsr_mask **out, tsr_error *err);
/* From memory; bits are copied and normalised to 0/1. */
tsr_status tsr_mask_from_bytes(int64_t batch, int64_t heads, int64_t nq, int64_t nk,
                               const uint8_t *bits, tsr_mask **out, tsr_error *err);
tsr_status tsr_mask_save(const char *path, const tsr_mask *m, tsr_error *err);
void tsr_mask_destroy(tsr_mask *m);

int64_t tsr_mask_batch(const tsr_mask *m);
int64_t tsr_mask_heads(const tsr_mask *m);
int64_t tsr_mask_nq(const tsr_mask *m);
int64_t tsr_mask_nk(const tsr_mask *m);
/* Row-major [batch][heads][nq][nk] bytes, each 0 or 1.  A packed mask
 * expands them on first use (NULL when out of memory); do not make that
 * first call on one mask from two threads at once. */
const uint8_t *tsr_mask_bits(const tsr_mask *m);
/* Pointer to the [nq][nk] plane used by (b, h), honouring broadcast
 * (expanded as tsr_mask_bits for a packed mask). */
const uint8_t *tsr_mask_plane(const tsr_mask *m, int64_t b, int64_t h);
/* Packed masks: bit j % 8 of byte j / 8 of a block row (one query block's
 * nk entries) selects key block j (LSB first: numpy.packbits(mask,
 * axis=-1, bitorder='little'), or the words of TSR_MASK_BITS on a
 * little-endian host with row_bytes = 4 * ceil(nk / 32)).  The block rows
 * of [batch][heads][nq] are row_bytes apart (at least ceil(nk / 8));
 * bits past nk are ignored.  The mask keeps the bits, and tsr_plan_create /
 * tsr_plan_update read them as they are, skipping the pass over a byte per
 * block pair; the bits are copied (B*H*NQ*ceil(NK/64) words). */
tsr_status tsr_mask_from_packed(int64_t batch, int64_t heads, int64_t nq, int64_t nk,
                                const uint8_t *packed, int64_t row_bytes, tsr_mask **out,
                                tsr_error *err);
/* From a .npy of uint8 packed rows, [H, NQ, ceil(NK/8)] or [B, H, NQ, ceil(NK/8)];
 * nk (the key blocks, from the geometry) must pack into the last dimension. */
tsr_status tsr_mask_load_packed(const char *path, int64_t nk, tsr_mask **out, tsr_error *err);
/* The packed [nq][*words] plane used by (b, h): row i's words at
 * plane + i * *words, bit j % 64 of word j / 64, bits past nk clear.
 * Every mask has them, built once when it is made (from the bytes of a
 * byte mask); NULL for b, h out of range.  *words = ceil(nk / 64) either
 * way. */
const uint64_t *tsr_mask_packed_plane(const tsr_mask *m, int64_t b, int64_t h, int64_t *words);
/* Fraction of selected block pairs (by block count, not tokens). */
double tsr_mask_density(const tsr_mask *m);
/* Checks the mask against a geometry and the problem's batch / query heads:
 * names the mismatching dimension and both values.  `name` is used in the
 * message (a file name, say) and may be NULL. */
tsr_status tsr_mask_check(const tsr_mask *m, const tsr_geom *g, int64_t batch,
                          int64_t heads_q, const char *name, tsr_error *err);

/* ---- Problems ---------------------------------------------------------- */

/* Tensor layout of q, k, v, o in device memory (CPU arrays are always BHSD). */
typedef enum { TSR_LAYOUT_BHSD, TSR_LAYOUT_BSHD } tsr_layout;

typedef struct {
  int64_t batch;
  int64_t heads_q;
  int64_t heads_kv;  /* heads_q % heads_kv == 0 (GQA) */
  int64_t seq_q;
  int64_t seq_k;
  int64_t head_dim;
  double scale;      /* 0 = default 1/sqrt(head_dim); must be finite */
  tsr_dtype dtype;   /* device dtype: TSR_DT_BF16 or TSR_DT_F16 */
  tsr_layout layout;
  const tsr_geom *geom; /* borrowed; must outlive any plan made from it */
} tsr_problem;

/* Validates sizes, head ratio, scale; fills in the default scale. */
tsr_status tsr_problem_check(tsr_problem *p, tsr_error *err);
/* Fills p's batch, heads_q, heads_kv, seq_q, seq_k and head_dim from CPU
 * arrays q [B, Hq, Sq, D], k and v [B, Hkv, Sk, D] (3-D arrays mean B = 1)
 * after checking them: float32 or float16, 3 or 4 dimensions, positive and
 * agreeing sizes, Hq a multiple of Hkv.  names (NULL, or three strings such
 * as file names) name the arrays in messages.  Other fields are untouched. */
tsr_status tsr_problem_from_arrays(tsr_problem *p, const tsr_array *q, const tsr_array *k,
                                   const tsr_array *v, const char *const names[3],
                                   tsr_error *err);

/* ---- CPU reference attention (runtime/ref.c) --------------------------- */

/* q [B, Hq, Sq, D], k and v [B, Hkv, Sk, D] (float32 or float16 arrays, 3-D
 * arrays mean B = 1); out [B, Hq, Sq, D] float32 and lse [B, Hq, Sq] float32
 * are allocated here.  Accumulates in double.  scale 0 = 1/sqrt(D).
 * Query head h reads key/value head h / (Hq / Hkv) and mask plane (b, h).
 * out and lse have q's number of dimensions (a 3-D q gives [Hq, Sq, D] and
 * [Hq, Sq]); lse is the natural log-sum-exp of the scaled scores; lse may be
 * NULL (not computed).  Free them with tsr_npy_free. */
tsr_status tsr_ref_attention(const tsr_geom *g, const tsr_mask *m,
                             const tsr_array *q, const tsr_array *k, const tsr_array *v,
                             double scale, tsr_array *out, tsr_array *lse,
                             tsr_error *err);
/* Normwise relative difference max|got - want| / max|want| between two
 * float arrays (float16/32/64) of equal element count, over the elements
 * finite in both; NaN and infinities must sit in the same places (NaN with
 * NaN, an infinity with the same infinity: lse of empty rows, non-finite
 * inputs).  A count, NaN or infinity mismatch gives INFINITY; an all-zero
 * `want` gives the absolute difference. */
double tsr_ref_max_rel_error(const tsr_array *got, const tsr_array *want);

/* ---- Plans (runtime/plan.c, map.c, tasks.c, verify.c) ----------------- */

/* A plan's rows are its (batch, query head, query tile) triples: a row task
 * walks one row's key tiles, a split row is cut into chunks, an empty row
 * has no tile.  (A mask has block rows, a lookup table has table rows.) */

typedef enum {
  TSR_MAP_AUTO,
  TSR_MAP_RETAIN,    /* tile = logical block (needs uniform blocks equal to the tile) */
  TSR_MAP_COMBINE,   /* a tile spans several blocks or parts of them */
  TSR_MAP_SUBDIVIDE, /* a block spans several tiles */
  TSR_MAP_GATHER     /* uniform blocks bq x bk with tile_m == bq and tile_n == 2 * bk:
                        a key tile is two selected key blocks of the row, any two (the
                        row's blocks paired in ascending order; an odd count leaves the
                        last tile's second half masked), so 128x64 blocks run on
                        128x128 tiles (plan_layout.h, "Gather plans"); native precision
                        only; n_k_tiles is ceil(key blocks / 2), the most tiles a row.
                        Never AUTO's choice: asked for, or the device's selection
                        upgrades retained 128x64 blocks to it (tsr_context_select) */
} tsr_mapping;

typedef enum {
  TSR_TASKS_AUTO,
  TSR_TASKS_ROW,     /* one task per (head, query tile) walking its key tiles */
  TSR_TASKS_SPLIT,   /* long rows split into chunks, merged afterwards */
  TSR_TASKS_PACK     /* query tiles / GQA heads with identical key lists share a task */
} tsr_tasks;

/* What a plan is made for when the options do not say: the H200's grid and
 * compile target, which the shipped lookup tables were profiled on (also
 * what a host-only context stands for, and whose table rows it reads when
 * the table has them). */
#define TSR_DEFAULT_NUM_SMS 132
#define TSR_DEFAULT_ARCH "sm_90a"
#define TSR_DEFAULT_GPU "NVIDIA H200"

/* Arithmetic of the attention products.  NATIVE: the problem's dtype (bf16
 * or fp16) into fp32 accumulators, as always.  FP8: the opt-in scheme of
 * docs/fp8.md: K smoothed by its per-channel mean, Q and K quantized to
 * int8 per 64-token chunk (Q K^T in s32), V to OCP e4m3 per channel, P to
 * e4m3 against 1/256 (P V in fp32).  The CPU plan executor emulates it exactly (tsr_cpu_execute);
 * a backend that cannot serve it refuses it (never a silent native run). */
typedef enum { TSR_PREC_NATIVE = 0, TSR_PREC_FP8 = 1 } tsr_precision;

/* "native", "fp8"; "unknown" for other values. */
const char *tsr_precision_name(tsr_precision p);
/* Parses those names; returns 0 on success, -1 for an unknown name. */
int tsr_precision_parse(const char *s, tsr_precision *out);

typedef struct {
  int tile_m, tile_n;  /* physical tile; 0 = let the planner choose */
  tsr_mapping mapping;
  tsr_tasks tasks;
  int num_sms;         /* persistent grid size; 0 = TSR_DEFAULT_NUM_SMS */
  const char *arch;    /* "sm_90a", ...; NULL = TSR_DEFAULT_ARCH */
  const char *variant; /* kernel variant name; NULL = choose */
  int split_tiles;     /* most key tiles per split chunk; 0 = planner's choice
                          (AUTO: from the balance target, SPLIT: the mean row) */
  tsr_precision precision; /* TSR_PREC_NATIVE (default) or TSR_PREC_FP8 (opt-in;
                              docs/fp8.md); last, so older callers' layouts keep
                              every other field's offset */
} tsr_plan_opts;

typedef struct tsr_plan tsr_plan;

void tsr_plan_opts_init(tsr_plan_opts *o);
/* Checks what the options say on their own, before any problem: tile sizes
 * (0 = the planner's; else rows a multiple of 16, columns of 32, each at
 * most TSR_MAX_TILE), mapping and task names, multiprocessors, split chunk,
 * arch and variant names.  tsr_plan_create checks them too; tools call it
 * first to refuse bad options before reading any input. */
tsr_status tsr_plan_opts_check(const tsr_plan_opts *o, tsr_error *err);
/* Maps the mask onto physical tiles and organises tasks.  The problem's
 * geometry is borrowed.  Pure host work. */
tsr_status tsr_plan_create(const tsr_problem *p, const tsr_mask *m,
                           const tsr_plan_opts *o, tsr_plan **out, tsr_error *err);
void tsr_plan_destroy(tsr_plan *pl);
/* Replans into an existing plan (a new mask, problem or options), reusing
 * its memory: once its buffers have grown to the problem, planning makes no
 * allocation and touches no fresh page.  Device copies made by
 * tsr_gpu_upload are dropped (upload again).  On failure the plan is left
 * empty, still valid to update again or destroy. */
tsr_status tsr_plan_update(tsr_plan *pl, const tsr_problem *p, const tsr_mask *m,
                           const tsr_plan_opts *o, tsr_error *err);

typedef struct {
  int tile_m, tile_n;
  tsr_mapping mapping;
  tsr_tasks tasks;
  int64_t tiles;          /* emitted (head, q tile, k tile) work items */
  int64_t partial_tiles;  /* tiles carrying membership bits */
  int64_t tasks_count;
  int64_t split_rows;     /* rows split into chunks */
  int64_t empty_rows;     /* (head, q tile) rows with no tile */
  double selected_pairs;  /* selected query-key token pairs */
  double computed_pairs;  /* pairs the kernel computes (tiles x BM x BN, clipped) */
  double wasted_fraction; /* (computed - selected) / selected */
  double balance;         /* max SM load / mean SM load over the persistent grid */
  char variant[96];
  int combined;           /* some tile spans (parts of) several logical blocks */
  int subdivided;         /* some logical block spans several tiles */
  int64_t members;        /* member records (rows written by tasks) */
  int64_t merges;         /* merge records (split rows) */
  int64_t slots;          /* partial slots */
  int64_t membership_words;
} tsr_plan_summary;

/* "retain", "combine", "subdivide", "gather", "auto"; "row", "split", "pack", "auto". */
const char *tsr_plan_mapping_name(tsr_mapping m);
const char *tsr_plan_tasks_name(tsr_tasks t);
/* Parses those names; returns 0 on success, -1 for an unknown name. */
int tsr_plan_parse_mapping(const char *s, tsr_mapping *out);
int tsr_plan_parse_tasks(const char *s, tsr_tasks *out);

void tsr_plan_summarize(const tsr_plan *pl, tsr_plan_summary *s);
/* Plan as JSON text (malloc'ed; caller frees).  detail 0 = summary only,
 * 1 = with task and tile arrays. */
char *tsr_plan_explain_json(const tsr_plan *pl, int detail);
/* Proves on the CPU that every selected query-key token pair is covered
 * exactly once and no unselected pair reaches the output; on failure returns
 * TSR_ERR_VERIFY naming the first violation. */
tsr_status tsr_plan_verify(const tsr_plan *pl, const tsr_mask *m, tsr_error *err);

/* Executes the plan tile by tile on the CPU with the online softmax and the
 * split-row merges the GPU uses (float32 arithmetic as the kernels do).
 * Arrays as for tsr_ref_attention (out and lse mirror q's dimensions; lse
 * may be NULL).  The plan must come from tsr_plan_create (or pass
 * tsr_plan_verify): its indices are trusted. */
tsr_status tsr_cpu_execute(const tsr_plan *pl, const tsr_array *q, const tsr_array *k,
                           const tsr_array *v, tsr_array *out, tsr_array *lse,
                           tsr_error *err);

/* ---- GPU execution (runtime/cuda.c, bundle.c, context.c, gpu.c) -------- */

/* A context owns the loaded driver (dlopen of libcuda.so.1 on first use), the
 * kernel bundle for the device's arch and the plan selector: the lookup
 * table of the device (its name and multiprocessor count), read once at
 * create (see tsr_context_select). */
typedef struct tsr_context tsr_context;

typedef struct {
  int device;            /* CUDA device ordinal, or TSR_CONTEXT_NO_DEVICE */
  const char *bundle_dir;/* NULL = $TESSERA_BUNDLE, then the installed bundle */
  const char *db_path;   /* NULL = the embedded default lookup database */
} tsr_context_opts;

/* device: a host-only context, with the bundle (TSR_DEFAULT_ARCH) and the
 * lookup table (TSR_DEFAULT_GPU's rows, else its only GPU's;
 * TSR_DEFAULT_NUM_SMS multiprocessors) but no
 * driver: selection works
 * on a machine without a GPU; every device call fails with
 * TSR_ERR_NO_DEVICE. */
#define TSR_CONTEXT_NO_DEVICE (-1)

void tsr_context_opts_init(tsr_context_opts *o);
/* Loads the driver, the bundle and the lookup table.  A db_path that is
 * missing, not SQLite or not a tessera database is an error naming the
 * path; the embedded default always opens (a GPU it has no rows for selects
 * the automatic plan every time). */
tsr_status tsr_context_create(const tsr_context_opts *o, tsr_context **out, tsr_error *err);
void tsr_context_destroy(tsr_context *ctx);

/* Device pointers and element strides for q, k, v, o ([B, H, S, D] indices);
 * lse is float32 [B, Hq, Sq] contiguous, may be 0 (not written). */
typedef struct {
  uint64_t q, k, v, o, lse;
  int64_t q_stride[4], k_stride[4], v_stride[4], o_stride[4];
} tsr_gpu_tensors;

/* Uploads the plan's metadata to the device (once; replays reuse it). */
tsr_status tsr_gpu_upload(tsr_context *ctx, tsr_plan *pl, tsr_error *err);
/* Launches asynchronously on `stream` (a CUstream; 0 = legacy default). No
 * host synchronisation: capturable in a CUDA graph. */
tsr_status tsr_gpu_launch(tsr_context *ctx, const tsr_plan *pl, const tsr_gpu_tensors *t,
                          void *stream, tsr_error *err);
/* Convenience for tools and tests, synchronous: converts host q, k, v
 * (float32 or float16, [B, H, S, D] or [H, S, D]) to the plan's dtype,
 * uploads them in the plan's layout (BHSD or BSHD strides), uploads the plan
 * if needed, launches on a private stream, waits, and returns out (float32,
 * shaped like q) and, when lse is not NULL, lse (float32 [B, Hq, Sq], or
 * [Hq, Sq] for 3-D q), allocated here.  Frees its device buffers. */
tsr_status tsr_gpu_run_arrays(tsr_context *ctx, tsr_plan *pl, const tsr_array *q,
                              const tsr_array *k, const tsr_array *v, tsr_array *out,
                              tsr_array *lse, tsr_error *err);

/* Nonzero when the context's bundle holds kernel variant `name` for the
 * device's arch.  A lookup table row names the variant build it was timed
 * with; when the bundle no longer has it (the catalog changed since the
 * sweep), callers drop the name and let tsr_gpu_upload pick the bundle's
 * variant for the same tile. */
int tsr_gpu_has_variant(const tsr_context *ctx, const char *name);

/* ---- Lookup database (runtime/db.c) ------------------------------------ */

/* The lookup database of db/schema.sql, as the request path reads it: a
 * handle to pass to tsr_select_load (tsr_select_open and tsr_context_create
 * open one themselves).  Before anything is read, the file's tables are
 * checked against the schema at its version; opening a writable handle
 * migrates an older schema through PRAGMA user_version.  Writing timings
 * and running queries of one's own are the tools' side (tessera-tools(3)).
 * One handle must not be used from two threads. */
typedef struct tsr_db tsr_db;

#define TSR_DB_SCHEMA_VERSION 2

enum {
  TSR_DB_READONLY = 1, /* open an existing file for reading only */
  TSR_DB_CREATE = 2    /* create the file (and its schema) when absent */
};

/* path NULL: a private in-memory database holding the embedded default
 * (db/schema.sql and the shipped tables, compiled into the library).
 * A missing file (without TSR_DB_CREATE), a file that is not SQLite, or a
 * schema newer than this library is an error naming the path. */
tsr_status tsr_db_open(const char *path, int flags, tsr_db **out, tsr_error *err);
void tsr_db_close(tsr_db *db);
int tsr_db_version(const tsr_db *db);
const char *tsr_db_path(const tsr_db *db); /* ":memory:" for the default */

/* ---- Mask features (runtime/features.c) -------------------------------- */

#define TSR_FEATURES_VERSION 1
/* Candidate physical tiles, in this order: 64x64, 64x128, 128x64, 128x128. */
#define TSR_FEATURE_TILES 4
/* Tile i (0 <= i < TSR_FEATURE_TILES) as tile_m x tile_n. */
void tsr_features_tile(int i, int *tile_m, int *tile_n);

/* Cheap features of a mask for one problem.  Token-weighted over the mask's
 * own planes (broadcast planes count once). */
typedef struct {
  double density;          /* selected / all query-key token pairs */
  double block_density;    /* selected / all logical block pairs */
  double row_cv;           /* row spread: std / mean (0 when the mean is 0) of the
                              key tokens each logical row (a query block of a
                              plane) selects, each logical row counted once */
  double empty_rows;       /* fraction of logical rows with nothing selected */
  double fill[TSR_FEATURE_TILES];    /* selected pairs / pairs of touched tiles; < 0:
                                        not measured (tsr_gpuplan_features knows the
                                        planner's tile only) */
  int64_t touched[TSR_FEATURE_TILES];/* touched tiles (over planes); < 0: not measured */
  double rows_per_sm;      /* batch * heads_q * ceil(seq_q / 128) / num_sms */
  int64_t bq, bk;          /* uniform block sizes; 0 when variable */
  int64_t seq_q, seq_k, head_dim;
  tsr_dtype dtype;
  int num_sms;
} tsr_features;

/* num_sms 0 = TSR_DEFAULT_NUM_SMS.  The mask must fit the problem
 * (tsr_mask_check). */
tsr_status tsr_features_compute(const tsr_problem *p, const tsr_mask *m, int num_sms,
                                tsr_features *f, tsr_error *err);
/* Features as (name, value) pairs for storage; returns the count (<= 32). */
#define TSR_FEATURES_MAX 32
int tsr_features_list(const tsr_features *f, const char **names, double *values);
/* Sets the feature `name` (as tsr_features_list names it); 0 if unknown. */
int tsr_features_set(tsr_features *f, const char *name, double value);

/* ---- Plan selection (runtime/select.c) --------------------------------- */

/* A lookup table for one GPU, loaded once into a compact sorted array; a
 * lookup is a binary search per level.  Safe to share between threads after
 * loading (read only). */
typedef struct tsr_selector tsr_selector;

/* Region of feature space: the binned features the table is keyed on. */
typedef struct {
  int dtype, head_dim, bq, bk;  /* exact */
  int seq_bin, density_bin, spread_bin, fill_bin;
} tsr_region;
/* Lookup levels, finest first: 0 the exact region (table rows of level 0),
 * 1 the nearest region (no table rows of its own: it borrows the level-0 row
 * of the nearest profiled region of the same dtype, head dimension and
 * geometry), 2 the geometry alone (table rows of level 2, bins -1).
 * tessera-profile build writes table rows of levels 0 and 2 only, and
 * selection reads no row of level 1. */
#define TSR_SELECT_LEVELS 3
void tsr_select_region(const tsr_features *f, tsr_region *r);
/* The key of level `level` (coarser levels set bins to -1). */
void tsr_select_region_at(const tsr_region *r, int level, tsr_region *out);

/* gpu: the device's name ("NVIDIA H200") and multiprocessor count; NULL /
 * 0 = TSR_DEFAULT_GPU when the table has rows for it, else the table's
 * first GPU by name (its only one, in a table swept on one card).  A table
 * with no rows for the GPU loads as empty: every selection falls back. */
tsr_status tsr_select_load(tsr_db *db, const char *gpu, int multiprocessors,
                           tsr_selector **out, tsr_error *err);
/* db_path NULL = the embedded default database. */
tsr_status tsr_select_open(const char *db_path, const char *gpu, int multiprocessors,
                           tsr_selector **out, tsr_error *err);
void tsr_select_destroy(tsr_selector *s);
int64_t tsr_select_rows(const tsr_selector *s);
const char *tsr_select_gpu(const tsr_selector *s); /* "" when empty */

typedef struct {
  tsr_plan_opts opts;    /* ready for tsr_plan_create; opts.variant -> variant */
  char variant[96];      /* "" = the planner chooses */
  int from_table;        /* 1 = a table row, 0 = base plan */
  int level;             /* 0 exact region, 1 nearest region, 2 geometry; -1 base */
  int64_t row_id;        /* lookup.id of the row hit; -1 on fallback */
  tsr_region region;
  char reason[384];      /* why this plan: row hit, or why it fell back */
} tsr_selection;

/* Picks the plan for the features.  s may be NULL (base plan).  Never fails
 * for a valid problem: a miss, an ineligible row or an empty table falls
 * back to the base plan (retain when the geometry is uniform with a block
 * shape that is a candidate tile, else combine at 128x128, row tasks).
 * A row is returned as the table holds it; for variable blocks its combine
 * or subdivide may not apply to the mask (the planner then refuses it as
 * unsupported), which tsr_select_request leaves to the planner. */
tsr_status tsr_select_plan(const tsr_selector *s, const tsr_features *f,
                           tsr_selection *out, tsr_error *err);
/* Whether (mapping, tile) applies to the features' geometry; 0 with *why set. */
int tsr_select_eligible(const tsr_features *f, tsr_mapping mapping, int tile_m,
                        int tile_n, const char **why);
/* The base plan for the features (what tsr_select_plan falls back to). */
void tsr_select_base(const tsr_features *f, tsr_plan_opts *o);
/* Features, region, row hit and reason as JSON (malloc'ed; caller frees). */
char *tsr_select_explain_json(const tsr_features *f, const tsr_selection *sel);
/* The request path's selection: tsr_select_plan, except that a fallback
 * gives the caller's options `base` (NULL = tsr_plan_opts_init: the
 * automatic planner) instead of the base plan, and a row hit gives base
 * with the row's tile, mapping, task layout and variant.  For variable
 * blocks the mapping is TSR_MAP_AUTO (the planner's for the row's tile):
 * the features do not tell whether the row's combine or subdivide applies
 * to this mask's blocks, and where it does the plan is the same.  The variant is
 * the table's name, unchecked: tsr_context_select checks it against a
 * bundle.  s may be NULL (always the fallback). */
tsr_status tsr_select_request(const tsr_selector *s, const tsr_features *f,
                              const tsr_plan_opts *base, tsr_selection *out, tsr_error *err);

/* ---- Selection in the request path (runtime/context.c) ----------------- */

/* Turns (problem, mask) into plan options through the context's lookup
 * table: features (tsr_features_compute, base->num_sms or the device's
 * multiprocessors), the table row and its eligibility (tsr_select_request),
 * and the row's fate on the device, settled against the bundle once at
 * tsr_context_create: the row's variant when the bundle serves the row's
 * plan with it, else no name (tsr_gpu_upload picks the bundle's variant for
 * the same tile, dtype and head dim; the reason says so), else, when the
 * bundle has no variant for that tile at all, the automatic plan (base).
 * On a device context (not a host-only one), a native plan retaining
 * uniform 128x64 (64x64) blocks on tiles of the block then becomes
 * TSR_MAP_GATHER on 128x128 (64x128) tiles when the bundle has a gather
 * (kg) variant for it, unless
 * the fallback is the caller's own tile, mapping or variant, or the
 * environment sets TESSERA_GATHER=0 (the reason says so; context.c has
 * why).  out->opts is ready for tsr_plan_create while *out lives (opts.variant
 * points into it).  from_table, level (0 region, 1 nearest region, 2
 * geometry, -1 fallback), row_id and reason say why.  Host work only,
 * microseconds on top of the features; works on a host-only context
 * (TSR_CONTEXT_NO_DEVICE).  It only reads the context, so selections may
 * run concurrently on one context (but not with other calls on it). */
tsr_status tsr_context_select(tsr_context *ctx, const tsr_problem *p, const tsr_mask *m,
                              const tsr_plan_opts *base, tsr_selection *out, tsr_error *err);
/* The same from features already computed (from tsr_gpuplan_features, say). */
tsr_status tsr_context_select_features(tsr_context *ctx, const tsr_features *f,
                                       const tsr_plan_opts *base, tsr_selection *out,
                                       tsr_error *err);
/* The context's selector (read only; owned by the context): the table
 * with its rows settled against the bundle, so tsr_select_request on it
 * chooses as tsr_context_select does. */
const tsr_selector *tsr_context_selector(const tsr_context *ctx);

/* ---- GPU planning (runtime/gpuplan.c, templates/plan_gpu.cuh) --------- */

/* Planning where the mask already is.  A GPU plan is a template chosen once
 * per shape and regime (tile, mapping, task layout, variant, capacities)
 * and bound to device buffers; every launch turns a device-resident block
 * mask into the plan records on the caller's stream with two small kernels
 * and runs the attention kernel after them on the same stream.  No host
 * synchronisation, no allocation per launch: plan-and-run can be captured
 * in a CUDA graph once and replayed while the mask buffer's contents
 * change.  The planner writes features (density, row spread) to
 * host-visible memory, so the caller can re-select the regime (another
 * template) between steps without synchronising.
 *
 * Scope: uniform blocks bq x bk (ragged last blocks included) or variable
 * geometries (tsr_geom_variable: the block maps are uploaded once, at
 * create) on any tile the bundle has a variant for; row tasks, or rows
 * split into near-equal chunks of at most opts.split_tiles key tiles (tasks
 * SPLIT, or AUTO with split_tiles > 0); empty rows become tasks without
 * tiles.  PACK is refused (plan on the host for it).  The host
 * planner is the reference: tsr_gpuplan_download + tsr_plan_verify check a
 * device plan exactly.
 *
 * One gpuplan must not be launched on two streams concurrently (its buffers
 * hold one plan at a time); launches on one stream queue correctly. */
typedef struct tsr_gpuplan tsr_gpuplan;

typedef enum {
  TSR_MASK_BYTES, /* one byte a block pair (bool / uint8), nonzero = selected, C order */
  TSR_MASK_BITS   /* bit j % 32 of 32-bit word j / 32 of each row, rows padded to words */
} tsr_mask_format;

typedef struct {
  int64_t mask_batch, mask_heads; /* planes of the device mask: 1 broadcasts; 0 = batch, heads_q */
  int64_t max_tiles;  /* tile records; 0 = every tile of every row */
  int64_t max_words;  /* membership words; 0 = the worst case */
  int64_t max_slots;  /* partial slots of split rows; 0 = the worst case, at most 256 MiB of
                         partials; rows past the slots stay whole (never an error) */
  int no_host_stats;  /* 1: do not publish features to host memory (tsr_gpuplan_stats_read
                         then reads nothing); saves two system-scope fences a step */
} tsr_gpuplan_caps;

void tsr_gpuplan_caps_init(tsr_gpuplan_caps *c);
/* Resolves the template (as tsr_plan_create would for tile and mapping),
 * picks and loads the variant, allocates the bounded buffers.  opts.num_sms
 * 0 = the device's.  The problem's geometry is borrowed. */
tsr_status tsr_gpuplan_create(tsr_context *ctx, const tsr_problem *p, const tsr_plan_opts *o,
                              const tsr_gpuplan_caps *caps, tsr_gpuplan **out, tsr_error *err);
void tsr_gpuplan_destroy(tsr_gpuplan *gp);
/* Plans the device mask at `mask` (a CUdeviceptr) on `stream` (a CUstream). */
tsr_status tsr_gpuplan_plan(tsr_gpuplan *gp, uint64_t mask, tsr_mask_format format, void *stream,
                            tsr_error *err);
/* Runs attention with the plan the last tsr_gpuplan_plan on this stream made. */
tsr_status tsr_gpuplan_run(tsr_gpuplan *gp, const tsr_gpu_tensors *t, void *stream, tsr_error *err);
/* Both: plan, then run, on one stream. */
tsr_status tsr_gpuplan_launch(tsr_gpuplan *gp, uint64_t mask, tsr_mask_format format,
                              const tsr_gpu_tensors *t, void *stream, tsr_error *err);
/* Synchronises the context and copies the current plan back as a host plan
 * (for tsr_plan_verify, tsr_cpu_execute, explain).  TSR_ERR_CAPACITY when
 * the last planning overflowed a capacity (then nothing ran). */
tsr_status tsr_gpuplan_download(tsr_gpuplan *gp, tsr_plan **host_copy, tsr_error *err);
/* Template facts: tile, mapping, task layout, variant (counts are zero). */
void tsr_gpuplan_summarize(const tsr_gpuplan *gp, tsr_plan_summary *s);

/* Features of the latest completed planning, read from host-visible memory
 * without synchronising (a step behind while one is in flight). */
typedef struct {
  int64_t step;           /* plannings completed; 0 = none yet */
  double density;         /* selected / all query-key token pairs */
  double row_cv;          /* row spread as tsr_features.row_cv, each query token
                             counted once (the same when all query blocks are
                             equally long) */
  double empty_rows;      /* fraction of (batch, head, q tile) rows with no tile */
  int64_t tiles, partial_tiles, tasks, merges, slots, membership_words;
  int overflow;           /* a capacity was exceeded: the step computed nothing */
} tsr_gpuplan_stats;

/* Returns the step read (0 when no planning has completed). */
int64_t tsr_gpuplan_stats_read(const tsr_gpuplan *gp, tsr_gpuplan_stats *s);
/* Features for tsr_select_plan from stats: density, spread, empty rows and
 * the geometry exactly; block_density = density; fill[] and touched[] at
 * this template's tile only, -1 (not measured) at the others: the selector
 * estimates those (select.c, fill_est) and lets no larger tile gamble on
 * an estimate. */
void tsr_gpuplan_features(const tsr_gpuplan *gp, const tsr_gpuplan_stats *s, tsr_features *f);

/* Re-selection between steps, the policy of the Python binding's
 * attention() for a CUDA mask, so that C callers choose alike: from the
 * stats of a template's latest completed planning (tsr_gpuplan_stats_read),
 * the regime the context's table selects for the next steps
 * (tsr_gpuplan_features, then tsr_context_select_features with the
 * automatic planner as the fallback).  The caller keeps one template per
 * regime and switches to it (tsr_gpuplan_create on first use), unless
 * tsr_gpuplan_hold_step holds it back. */
typedef struct {
  int changed;          /* 0: nothing to select from (no completed step, or it
                           overflowed a capacity): keep the current template */
  tsr_plan_opts opts;   /* the regime, for tsr_gpuplan_create: the row's tile, mapping
                           and variant (opts.variant points into sel) with row tasks,
                           or split tasks with split_tiles the mean row of the step
                           (its tiles per row, in the row's key tiles, rounded half to
                           even, at least 1); the GPU planner takes no packed tasks,
                           so a pack row runs row tasks.  On a fallback
                           (sel.from_table 0): the automatic template's options */
  tsr_selection sel;    /* the selection behind it: level, row, reason */
} tsr_gpuplan_regime;

tsr_status tsr_gpuplan_reselect(tsr_context *ctx, const tsr_gpuplan *gp, const tsr_gpuplan_stats *s,
                                tsr_gpuplan_regime *out, tsr_error *err);

/* Holding a template back, the rest of the policy, by measured step
 * times: a switch from template A to B is judged at B's first step with a
 * time (A's latest known too).  B more than 2% slower than A: back to A,
 * and B is held, whatever the selection says (the table's rows are
 * averages; this mask on this card is what ran).  B's step selecting A
 * again (at B the selector measures B's tile and estimates the others', so
 * an estimate can send masks to a template whose first measured step sends
 * them straight back): the slower of the two is held, B unless it was at
 * least 2% faster.  Until B has a time, a selection of A returns there
 * with neither held (the two may alternate).  Selections of a held
 * template are refused, the current template staying, for 4 steps, then
 * 8, 16, ... up to 256 after each further hold, so masks that change over
 * the steps still reach it.  The caller numbers a shape's templates from 0
 * (the Python binding: 0 the automatic one); a number of
 * TSR_GPUPLAN_HOLD_MAX or more is never held. */
#define TSR_GPUPLAN_HOLD_MAX 64
typedef struct {
  int64_t steps;                       /* completed steps seen */
  int came_to, came_from;              /* the switch awaiting its judgement; -1 none */
  int holds[TSR_GPUPLAN_HOLD_MAX];     /* times each template was held */
  int64_t until[TSR_GPUPLAN_HOLD_MAX]; /* held while steps < until */
  double ms[TSR_GPUPLAN_HOLD_MAX];     /* each template's latest step time known; 0 none */
} tsr_gpuplan_hold;

void tsr_gpuplan_hold_init(tsr_gpuplan_hold *h);
/* After tsr_gpuplan_reselect: one completed step of template cur, which
 * took cur_ms (0: not known; any unit the caller keeps to: the Python
 * binding's is milliseconds divided by the step's density, so that layers'
 * masks of different densities compare), selected template chosen (both
 * numbers >= 0).  *next is the template to run from now on: chosen; cur
 * where chosen is held; or the template cur was switched from, where the
 * switch was judged and cur lost; *held_for the steps chosen stays held
 * when *next is cur and not chosen (0 otherwise; may be NULL). */
tsr_status tsr_gpuplan_hold_step(tsr_gpuplan_hold *h, int cur, int chosen, double cur_ms, int *next,
                                 int64_t *held_for, tsr_error *err);

/* ---- Mask producers on the GPU (runtime/produce.c, templates/produce_gpu.cuh) */

/* The fused stages of tessera.methods' producers: tile means of
 * q or k over a 3-D token grid, and pooled scores with the corpus's top-k or
 * CDF rule, each one launch on the caller's stream: no allocation, no
 * synchronisation (a CUDA graph captures them).  Pointers are CUdeviceptrs
 * the caller owns.  Every call checks its arguments before it touches the
 * device: TSR_ERR_INVALID, _SHAPE or _DTYPE naming the value. */
typedef struct tsr_producer tsr_producer;
/* Loads the kernels (the bundle's planner module) on ctx's device. */
tsr_status tsr_producer_create(tsr_context *ctx, tsr_producer **out, tsr_error *err);
void tsr_producer_destroy(tsr_producer *p);

typedef struct {
  uint64_t x;                  /* [batch, heads, tokens, dim] at the strides below */
  tsr_dtype dtype;             /* TSR_DT_F32, F16, BF16 or F64 */
  int64_t batch, heads, tokens, dim;
  int64_t stride_b, stride_h, stride_s; /* in elements; channels contiguous */
  int64_t grid[3];             /* (T, H, W), T * H * W = tokens, frame-major */
  int64_t tile[3];             /* tile sizes; boundary tiles keep what exists */
  uint64_t out;                /* [batch, heads, tiles, dim] means, raster tile order, float32
                                  (float64 for F64), contiguous */
  uint64_t sq;                 /* 0, or [batch, heads, tiles]: mean of |x|^2 over each tile's tokens */
  /* A second tensor pooled in the same launch (k beside q: one launch and
   * one tail instead of two), or x2 = 0.  Same dtype, batch, tokens, dim
   * and tiling as x; heads2 its heads (GQA: fewer), its strides, and its
   * outputs as out and sq (sq2 written when sq is). */
  uint64_t x2;
  int64_t heads2;
  int64_t stride2_b, stride2_h, stride2_s;
  uint64_t out2, sq2;
  /* runs = 0: tiles of the frame-major grid above.  runs = 1-8: x is
   * already in tile order (tessera.methods.tile_order's, e.g. hoisted to
   * the model's entry), each tile's tokens consecutive: run r is
   * run_tiles[r] tiles of run_size[r] tokens, runs one after the other,
   * sum run_tiles[r] * run_size[r] = tokens; grid and tile are ignored and
   * out is in that order. */
  int64_t runs;
  int64_t run_tiles[8], run_size[8];
  int64_t kernel;              /* 0 = automatic: a warp a tile; 1 = a CTA a tile (the previous
                                  kernel, kept to compare); the same means within float32
                                  rounding (sums in another order) */
  /* 0, or (runs = 0) a device array of int32 [tiles]: out's tile i is the
   * grid's raster tile order[i] (tessera.methods.tile_order's cube order,
   * pooled straight into it rather than gathered after; a 4-byte aligned
   * address).  An index outside [0, tiles) pools no tokens: its means are
   * NaN (read on the device, it cannot be checked here). */
  uint64_t order;
} tsr_pool_args;
tsr_status tsr_produce_pool(tsr_producer *p, const tsr_pool_args *a, void *stream, tsr_error *err);

typedef enum {
  TSR_SELECT_TOPK, /* the k largest of each row, ties to the lower index (the corpus's top-k) */
  TSR_SELECT_CDF   /* the fewest, in decreasing order, whose sum reaches tau of the row's, at
                      least min_keep (the corpus's CDF rule) */
} tsr_select_rule;
typedef struct {
  uint64_t pq, pk;             /* contiguous [batch, heads, nq, dim], [batch, kv_heads, nk, dim] */
  tsr_dtype dtype;             /* TSR_DT_F32 or F64 */
  int64_t batch, heads, kv_heads, nq, nk, dim;
  double scale;                /* scores are softmax(pq pk^T * scale) per row */
  tsr_select_rule rule;
  int64_t k;                   /* TOPK: blocks kept a row */
  double tau;                  /* CDF: threshold in [0, 1] */
  int64_t min_keep;            /* CDF: at least this many a row */
  uint64_t out;                /* bytes [batch, heads, nq, nk]: 1 kept, 0 not */
  int64_t rows;                /* query rows a CTA, 1-32; 0 = automatic: 32 for kernel 0's
                                  float32 top k with dim % 16 == 0 and nk <= 1024 where 32
                                  rows fit in shared memory (two m16 tiles; the only kernels
                                  that take over 16), else 16 for TOPK and 8 for CDF (tuning:
                                  the grid is batch x heads x nq / rows CTAs) */
  int64_t kernel;              /* 0 = automatic: TOPK's k-th largest by an 8-bit radix select
                                  (a warp's histogram in shared memory, 4 passes for float32);
                                  1 = the bitwise search (30 passes), kept to compare;
                                  2 = as 0, pk transposed ([batch, kv_heads, dim, nk]),
                                  float32 top-k, dim % 4 == 0, nk <= 1024 (an experiment
                                  in coalesced loads of k); the same mask every way */
} tsr_select_args;
tsr_status tsr_produce_select(tsr_producer *p, const tsr_select_args *a, void *stream, tsr_error *err);

/* Sampled attention's errors under two token patterns (Sparse VideoGen's
 * online profile): `samples` query rows of each (batch, head) attend to
 * every key densely and restricted to each pattern, and out holds, per
 * (batch, head), the mean over samples x dim of the squared difference of
 * each pattern's output from the dense one.  Three launches (chunks of
 * keys, their merge, the sum over rows; produce_sampled.cuh), working
 * space from the caller: tsr_produce_sampled_work_bytes. */
typedef struct {
  uint64_t q, k, v;            /* [batch, heads, tokens, dim] at their strides below */
  tsr_dtype dtype;             /* TSR_DT_F16 or BF16 (all three) */
  int64_t batch, heads, tokens, dim; /* dim 64 or 128 */
  int64_t q_stride[3], k_stride[3], v_stride[3]; /* (batch, head, token), in elements;
                                  channels contiguous; 16-byte aligned rows */
  uint64_t rows;               /* int32 [samples] on the device: the sampled query tokens, the
                                  same for every head; one outside [0, tokens) makes every
                                  head's errors NaN */
  int64_t samples;             /* 1 to 65535 */
  uint64_t planes;             /* uint32 [2][samples][ceil(tokens / 32)]: bit j % 32 of word
                                  j / 32 of (pattern, row) set where the row keeps key j */
  double scale;                /* scores q k^T * scale, positive */
  uint64_t work;               /* tsr_produce_sampled_work_bytes bytes, 16-byte aligned */
  int64_t work_bytes;
  uint64_t out;                /* float32 [batch, heads, 2]: pattern 0's error, pattern 1's */
  int64_t stages;              /* 0 = automatic: the key pipeline's depth, 3 where shared memory
                                  holds it (not D 128 on a 99 KiB SM), else 2; 2 or 3 to compare
                                  (a tuning knob: the same errors, bit for bit) */
} tsr_sampled_args;
/* The working space a call with these arguments needs on p's device (its
 * key chunks depend on the multiprocessors); 0 with err set when the
 * arguments are refused. */
int64_t tsr_produce_sampled_work_bytes(tsr_producer *p, const tsr_sampled_args *a, tsr_error *err);
tsr_status tsr_produce_sampled(tsr_producer *p, const tsr_sampled_args *a, void *stream, tsr_error *err);

/* ---- ABI (runtime/abi.c) ---------------------------------------------- */

/* sizeof the public struct named `type_name` ("tsr_problem", "tsr_features",
 * ...: every plain struct passed by pointer, tsr_error, tsr_problem,
 * tsr_plan_opts, tsr_plan_summary, tsr_context_opts, tsr_gpu_tensors,
 * tsr_features, tsr_region, tsr_selection, tsr_gpuplan_caps,
 * tsr_gpuplan_stats, tsr_gpuplan_regime, tsr_gpuplan_hold), as this
 * library was built; 0 for an unknown name or NULL.  Bindings that copy
 * the structs compare their copies' sizes. */
size_t tsr_abi_sizeof(const char *type_name);

#ifdef __cplusplus
}
#endif
#endif /* TESSERA_H */
