/*
 * cuda_impl.h: the CUDA driver API as libtessera sees it: a table of
 * function pointers resolved with dlopen("libcuda.so.1") on first use, so
 * nothing links against the driver and machines without one still run the
 * library, the tools and the tests (GPU calls then fail with
 * TSR_ERR_NO_DEVICE).  Also the context's internals that other internal
 * modules (the profiler) need to time launches with events.  Not installed.
 *
 * Use: const tsr_cu *cu = tsri_context_cu(ctx);
 *      tsri_cu_check(cu, cu->cuEventRecord(ev, stream), "cuEventRecord", err);
 * Names are the cuda.h macros, so cu->cuMemAlloc is cuMemAlloc_v2.
 */
#ifndef TSR_CUDA_IMPL_H
#define TSR_CUDA_IMPL_H

#include <cuda.h>

#include "tessera.h"

/* Every driver entry point libtessera uses. */
#define TSR_CU_FUNCS(X)                                                          \
  X(cuInit) X(cuGetErrorString) X(cuDriverGetVersion) X(cuDeviceGetCount)        \
  X(cuDeviceGet) X(cuDeviceGetAttribute) X(cuDeviceGetName)                      \
  X(cuDevicePrimaryCtxRetain) X(cuDevicePrimaryCtxRelease) X(cuCtxSetCurrent)    \
  X(cuCtxGetCurrent) X(cuCtxSynchronize) X(cuModuleLoadData) X(cuModuleUnload)   \
  X(cuModuleGetFunction) X(cuFuncSetAttribute) X(cuFuncGetAttribute)             \
  X(cuLaunchKernel) X(cuOccupancyMaxActiveBlocksPerMultiprocessor)               \
  X(cuMemAlloc) X(cuMemFree) X(cuMemcpyHtoD) X(cuMemcpyDtoH)                      \
  X(cuMemcpyHtoDAsync) X(cuMemcpyDtoHAsync) X(cuMemsetD32Async) X(cuMemsetD8)    \
  X(cuStreamCreate) X(cuStreamDestroy) X(cuStreamSynchronize)                    \
  X(cuEventCreate) X(cuEventDestroy) X(cuEventRecord) X(cuEventSynchronize)      \
  X(cuEventElapsedTime) X(cuTensorMapEncodeTiled) X(cuStreamBeginCapture)      \
  X(cuStreamEndCapture) X(cuGraphInstantiate) X(cuGraphLaunch)                   \
  X(cuGraphExecDestroy) X(cuGraphDestroy) X(cuMemAllocHost) X(cuMemFreeHost)    \
  X(cuLaunchKernelEx)

typedef struct {
  void *lib; /* dlopen handle */
#define TSR_CU_MEMBER(f) __typeof__(f) *f;
  TSR_CU_FUNCS(TSR_CU_MEMBER)
#undef TSR_CU_MEMBER
} tsr_cu;

/* Opens the driver and resolves every function; TSR_ERR_NO_DEVICE (with
 * the dlerror text) when libcuda.so.1 or a symbol is missing. */
tsr_status tsri_cu_open(tsr_cu *cu, tsr_error *err);
void tsri_cu_close(tsr_cu *cu);
/* TSR_OK for CUDA_SUCCESS; otherwise records "<what> failed: <driver text>"
 * as TSR_ERR_CUDA (TSR_ERR_NO_DEVICE for no device / no driver). */
tsr_status tsri_cu_check(const tsr_cu *cu, CUresult r, const char *what, tsr_error *err);

/* The context's driver table, device and properties (context.c). */
const tsr_cu *tsri_context_cu(const tsr_context *ctx);
CUdevice tsri_context_device(const tsr_context *ctx);
/* Compile target of the device ("sm_90a"), multiprocessor count. */
const char *tsri_context_arch(const tsr_context *ctx);
int tsri_context_num_sms(const tsr_context *ctx);
/* Makes the context's primary context current on the calling thread. */
tsr_status tsri_context_make_current(tsr_context *ctx, tsr_error *err);

/* Device-planned plans (gpuplan.c): the caller's device buffers, which it
 * keeps and frees, and the counts the planning kernels write there. */
typedef struct {
  CUdeviceptr tasks, tiles, members, membership, qblk, merges, part_o, part_m, part_l;
  CUdeviceptr counts;   /* [0] tasks, [1] merges (device ints) */
  int masking;          /* partial tiles may occur: pick a variant that masks */
  int may_merge;        /* rows may be split: launch the merge kernel */
  int64_t max_tasks;    /* the device task count's bound when known at bind (row
                           tasks: one a row), else 0: flat variants then get one
                           CTA a task, as host-planned launches do */
  int64_t cap_tasks;    /* the task buffers' capacity (FP8's fallback splits
                           the tasks into two lists of this size) */
} tsr_gpu_binding;
/* Chooses and loads pl's variant and attaches the binding, so that
 * tsr_gpu_launch reads its loop bounds from b->counts over a persistent
 * grid.  pl must have no device copies yet. */
tsr_status tsri_gpu_bind(tsr_context *ctx, tsr_plan *pl, const tsr_gpu_binding *b, tsr_error *err);

/* The FP8 copies and scales of a plan uploaded (or bound) with an FP8
 * variant, as templates/attn_sm90_fp8.cuh lays them out ("Buffers"): q8,
 * k8 [B][H][S][D] bytes, vt8 [B][Hkv][D][skp] bytes (keys permuted within
 * each 16), sq, sk, sv fp32, and the per-head fallback's kchan [B][Hkv]
 * fp32 and native [B][Hq] bytes (1: the head ran in the native dtype).
 * Valid after a launch; returns 0 (and zeros) for a plan without FP8
 * device copies.  For tests that compare the device's quantization with
 * the CPU's (tests/gpu_attn). */
typedef struct {
  CUdeviceptr q8, k8, vt8, sq, sk, sv, kchan, native;
  int skp;
} tsr_gpu_fp8_view;
int tsri_gpu_fp8_buffers(const tsr_plan *pl, tsr_gpu_fp8_view *out);
/* The device's per-head fallback of an FP8 plan's later launches: on (1,
 * the default at upload, as tsr_cpu_execute) or off (0: every head in
 * FP8, as tsri_cpu_execute_heads with no head native; for measuring the
 * scheme alone).  Returns 0 for a plan without FP8 device copies. */
int tsri_gpu_fp8_fallback(tsr_plan *pl, int on);
/* The plan a device planner binds and launches (its device copies: for
 * tsri_gpu_fp8_buffers and tsri_gpu_fp8_fallback in tests). */
tsr_plan *tsri_gpuplan_device_plan(tsr_gpuplan *gp);
/* Loads the bundle's GPU planner module for the context's target (the
 * caller unloads it with cuModuleUnload while the context lives). */
tsr_status tsri_gpu_load_planner(tsr_context *ctx, CUmodule *out, tsr_error *err);

#endif
