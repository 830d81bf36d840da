-- db/schema.sql: the Tessera profiling and lookup database (SQLite).
--
-- runtime/db.c applies this file in steps: each "-- @version N" section runs
-- once, inside one transaction, when the database's PRAGMA user_version is
-- below N, and then sets user_version = N.  A released section is never
-- edited; a change of schema is a new section (a migration).
--
-- Writers: tessera-profile (sweep, build).  Readers: the runtime's plan
-- selection (runtime/select.c) and `tessera db`.  Every timing sample is kept,
-- not only a summary, so a lookup table can be derived again later with
-- other rules.

-- @version 1

-- One row per GPU as the driver reported it when a sweep ran.
CREATE TABLE gpus (
  id INTEGER PRIMARY KEY,
  name TEXT NOT NULL,                 -- "NVIDIA H200"
  arch TEXT NOT NULL,                 -- "sm_90a"
  multiprocessors INTEGER NOT NULL,
  memory_bytes INTEGER NOT NULL,
  l2_bytes INTEGER NOT NULL DEFAULT 0,
  driver TEXT NOT NULL,               -- driver version
  clock_sm_khz INTEGER NOT NULL DEFAULT 0,
  clock_mem_khz INTEGER NOT NULL DEFAULT 0,
  UNIQUE (name, arch, multiprocessors, memory_bytes, l2_bytes, driver,
          clock_sm_khz, clock_mem_khz)
);

-- Generated kernel variants.  The same name with another template hash,
-- generator, NVRTC version or options is another row, so timings taken with
-- a stale build are never reused.
CREATE TABLE variants (
  id INTEGER PRIMARY KEY,
  name TEXT NOT NULL,                 -- canonical procedural name (the key)
  params TEXT NOT NULL,               -- JSON: tile, layout, stages, dim, dtype, arch
  template_hash TEXT NOT NULL,
  generator TEXT NOT NULL,
  nvrtc_version TEXT NOT NULL,
  nvrtc_options TEXT NOT NULL,
  UNIQUE (name, template_hash, generator, nvrtc_version, nvrtc_options)
);

-- Masks of a corpus, identified by file and content.
CREATE TABLE masks (
  id INTEGER PRIMARY KEY,
  corpus TEXT NOT NULL,
  path TEXT NOT NULL,                 -- relative to the corpus folder
  split TEXT NOT NULL,                -- "profile" or "eval"
  family TEXT NOT NULL,
  model TEXT NOT NULL,
  geometry TEXT NOT NULL,             -- "128x64", or "variable"
  batch INTEGER NOT NULL,
  heads_q INTEGER NOT NULL,
  heads_kv INTEGER NOT NULL,
  seq_q INTEGER NOT NULL,
  seq_k INTEGER NOT NULL,
  head_dim INTEGER NOT NULL,
  dtype TEXT NOT NULL,                -- tsr_dtype_name: "bf16" / "fp16"
  content_hash TEXT NOT NULL,         -- FNV-1a 64 of the mask bits, hex
  UNIQUE (corpus, path, content_hash)
);

-- Cheap mask features (runtime/features.c), one row per feature; rows per
-- multiprocessor depends on the GPU, so features are per GPU.
CREATE TABLE mask_features (
  mask_id INTEGER NOT NULL REFERENCES masks(id),
  gpu_id INTEGER NOT NULL REFERENCES gpus(id),
  version INTEGER NOT NULL,           -- TSR_FEATURES_VERSION
  name TEXT NOT NULL,
  value REAL NOT NULL,
  PRIMARY KEY (mask_id, gpu_id, version, name)
) WITHOUT ROWID;

-- Candidate plans: mapping, physical tile, task layout, variant.
CREATE TABLE plans (
  id INTEGER PRIMARY KEY,
  mapping TEXT NOT NULL,              -- retain / combine / subdivide
  tile_m INTEGER NOT NULL,
  tile_n INTEGER NOT NULL,
  tasks TEXT NOT NULL,                -- row / split / pack
  variant TEXT NOT NULL,              -- variant name
  UNIQUE (mapping, tile_m, tile_n, tasks, variant)
);

-- One row per sweep invocation.
CREATE TABLE sweeps (
  id INTEGER PRIMARY KEY,
  gpu_id INTEGER NOT NULL REFERENCES gpus(id),
  corpus TEXT NOT NULL,
  started TEXT NOT NULL,
  finished TEXT,
  command TEXT NOT NULL
);

-- One row per (GPU, mask, plan, variant build): ok with its median, or why it
-- was not timed.  Written in the same transaction as its samples, so a sweep
-- cut off at any point leaves whole measurements only; the unique key makes
-- a resumed or concurrent sweep skip what is there.
CREATE TABLE measurements (
  id INTEGER PRIMARY KEY,
  gpu_id INTEGER NOT NULL REFERENCES gpus(id),
  mask_id INTEGER NOT NULL REFERENCES masks(id),
  plan_id INTEGER NOT NULL REFERENCES plans(id),
  variant_id INTEGER NOT NULL,        -- variants.id; 0 when none applied
  sweep_id INTEGER NOT NULL REFERENCES sweeps(id),
  status TEXT NOT NULL CHECK (status IN ('ok', 'ineligible', 'failed')),
  detail TEXT NOT NULL DEFAULT '',
  median_ms REAL,
  warmup INTEGER NOT NULL DEFAULT 0,
  repeats INTEGER NOT NULL DEFAULT 0,
  UNIQUE (gpu_id, mask_id, plan_id, variant_id)
);

-- Every timed repetition, in milliseconds (CUDA events).
CREATE TABLE samples (
  measurement_id INTEGER NOT NULL REFERENCES measurements(id),
  rep INTEGER NOT NULL,
  ms REAL NOT NULL,
  PRIMARY KEY (measurement_id, rep)
) WITHOUT ROWID;

-- The derived lookup table: a region of feature space -> the best plan.
-- Level 0 keys on every binned feature; higher levels on fewer, so a miss
-- at one level falls through to a coarser one, then to the base plan.
-- Self-contained (GPU by name) so shipped tables load without the sweep.
CREATE TABLE lookup (
  id INTEGER PRIMARY KEY,
  gpu_name TEXT NOT NULL,
  arch TEXT NOT NULL,
  multiprocessors INTEGER NOT NULL,
  feature_version INTEGER NOT NULL,
  level INTEGER NOT NULL,
  dtype TEXT NOT NULL,
  head_dim INTEGER NOT NULL,
  bq INTEGER NOT NULL,                -- 0 = variable blocks
  bk INTEGER NOT NULL,
  seq_bin INTEGER NOT NULL,           -- -1 = any
  density_bin INTEGER NOT NULL,
  spread_bin INTEGER NOT NULL,
  fill_bin INTEGER NOT NULL,
  mapping TEXT NOT NULL,
  tile_m INTEGER NOT NULL,
  tile_n INTEGER NOT NULL,
  tasks TEXT NOT NULL,
  variant TEXT NOT NULL,
  masks INTEGER NOT NULL,             -- profiled masks in the region
  regret REAL NOT NULL,               -- geometric mean of t(plan) / t(best)
  speedup REAL NOT NULL,              -- geometric mean of t(base) / t(plan)
  UNIQUE (gpu_name, multiprocessors, feature_version, level, dtype, head_dim,
          bq, bk, seq_bin, density_bin, spread_bin, fill_bin)
);

-- @version 2

-- When and from what each GPU's lookup table was derived.
CREATE TABLE lookup_meta (
  gpu_name TEXT NOT NULL,
  multiprocessors INTEGER NOT NULL,
  feature_version INTEGER NOT NULL,
  built TEXT NOT NULL,
  masks INTEGER NOT NULL,
  measurements INTEGER NOT NULL,
  note TEXT NOT NULL DEFAULT '',
  PRIMARY KEY (gpu_name, multiprocessors, feature_version)
);

-- Resume checks and the derivation read measurements by GPU and mask.
CREATE INDEX measurements_by_gpu_mask ON measurements (gpu_id, mask_id);
