/*
 * sm80_emu_variant.cc: one emulated kernel of a variant, compiled by
 * sm80_emu.sh from the generated source the bundle holds
 * (bundle/src/<variant>.cu, included as EMU_SRC) with stub headers so that
 * this object holds the attention kernel (EMU_MERGE=0, the stub replaces
 * merge.cuh) or the merge kernel (EMU_MERGE=1, the stub replaces
 * attn_sm80.cuh): the two need different meanings of __shared__.
 */
#define __CUDACC__ 1 /* plan_layout.h: the device typedefs */
#if !EMU_MERGE
#define __shared__   /* the kernel's extern __shared__ array */
#endif
#include "sm80_emu.h"
#include EMU_SRC

void emu_register(const char *name, void (*run)(const void *), size_t param_bytes);

#define EMU_STR2(x) #x
#define EMU_STR(x) EMU_STR2(x)
#if EMU_MERGE
#define EMU_FN TSR_MERGE_NAME
#else
#define EMU_FN TSR_KERNEL_NAME
#endif

static void emu_run(const void *p)
{
  const tsr_kernel_params *k = (const tsr_kernel_params *)p;
  if (getenv("EMU_DEBUG") && threadIdx.x == 0 && blockIdx.x == 0)
    fprintf(stderr, "emu: %s: tasks %d merges %d seq %d %d heads %d %d scale_log2 %g strides q %lld %lld %lld\n", EMU_STR(EMU_FN), k->n_tasks, k->n_merges, k->seq_q, k->seq_k, k->heads_q, k->heads_kv, k->scale_log2, k->q_stride[0], k->q_stride[1], k->q_stride[2]);
  EMU_FN(*k);
}
static int emu_reg = (emu_register(EMU_STR(EMU_FN), emu_run, sizeof(tsr_kernel_params)), 0);
