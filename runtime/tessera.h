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
 *    tsr_plan_*, tsr_cpu_*, tsr_corpus_*, tsr_gpu_*, tsr_db_*, tsr_select_*.
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
const char *tsr_dtype_name(tsr_dtype dt);
int64_t tsr_array_numel(const tsr_array *a);

/* Reads a version 1/2/3 .npy file.  Rejects Fortran order, big-endian data,
 * unsupported dtypes, truncated payloads and malformed headers with an error
 * naming the file.  On failure *out is left zeroed. */
tsr_status tsr_npy_load(const char *path, tsr_array *out, tsr_error *err);
/* Writes `a` atomically: to a temporary file beside `path`, then rename(2), so
 * a failure never leaves a partial file at `path`. */
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

/* Kernels index tokens with 32-bit integers: longer sequences are refused. */
#define TSR_GEOM_MAX_SEQ ((int64_t)INT32_MAX)

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
/* Row-major [batch][heads][nq][nk] bytes, each 0 or 1. */
const uint8_t *tsr_mask_bits(const tsr_mask *m);
/* Pointer to the [nq][nk] plane used by (b, h), honouring broadcast. */
const uint8_t *tsr_mask_plane(const tsr_mask *m, int64_t b, int64_t h);
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
 * float arrays (float16/32/64) of equal element count; infinities must agree
 * exactly (lse of empty rows).  A count, NaN or infinity mismatch gives
 * INFINITY; an all-zero `want` gives the absolute difference. */
double tsr_ref_max_rel_error(const tsr_array *got, const tsr_array *want);

/* ---- Plans (runtime/plan.c, map.c, tasks.c, verify.c) ----------------- */

typedef enum {
  TSR_MAP_AUTO,
  TSR_MAP_RETAIN,    /* tile = logical block (needs uniform blocks equal to the tile) */
  TSR_MAP_COMBINE,   /* a tile spans several blocks or parts of them */
  TSR_MAP_SUBDIVIDE  /* a block spans several tiles */
} tsr_mapping;

typedef enum {
  TSR_TASKS_AUTO,
  TSR_TASKS_ROW,     /* one task per (head, query tile) walking its key tiles */
  TSR_TASKS_SPLIT,   /* long rows split into chunks, merged afterwards */
  TSR_TASKS_PACK     /* query tiles / GQA heads with identical key lists share a task */
} tsr_tasks;

typedef struct {
  int tile_m, tile_n;  /* physical tile; 0 = let the planner choose */
  tsr_mapping mapping;
  tsr_tasks tasks;
  int num_sms;         /* persistent grid size; 0 = 132 (H200) */
  const char *arch;    /* "sm_90a", ...; NULL = "sm_90a" */
  const char *variant; /* kernel variant name; NULL = choose */
} tsr_plan_opts;

typedef struct tsr_plan tsr_plan;

void tsr_plan_opts_init(tsr_plan_opts *o);
/* Maps the mask onto physical tiles and organises tasks.  The problem's
 * geometry is borrowed.  Pure host work. */
tsr_status tsr_plan_create(const tsr_problem *p, const tsr_mask *m,
                           const tsr_plan_opts *o, tsr_plan **out, tsr_error *err);
void tsr_plan_destroy(tsr_plan *pl);

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
} tsr_plan_summary;

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
 * Arrays as for tsr_ref_attention. */
tsr_status tsr_cpu_execute(const tsr_plan *pl, const tsr_array *q, const tsr_array *k,
                           const tsr_array *v, tsr_array *out, tsr_array *lse,
                           tsr_error *err);

/* ---- GPU execution (runtime/cuda.c, bundle.c, gpu.c) ------------------- */

/* A context owns the loaded driver (dlopen of libcuda.so.1 on first use), the
 * kernel bundle for the device's arch and the lookup database. */
typedef struct tsr_context tsr_context;

typedef struct {
  int device;            /* CUDA device ordinal */
  const char *bundle_dir;/* NULL = $TESSERA_BUNDLE, then the installed bundle */
  const char *db_path;   /* NULL = the embedded default lookup database */
} tsr_context_opts;

void tsr_context_opts_init(tsr_context_opts *o);
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

#ifdef __cplusplus
}
#endif
#endif /* TESSERA_H */
