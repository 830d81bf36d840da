/*
 * sm90_sync.cuh: the mbarrier and bulk-copy primitives of the sm90 family
 * (attn_sm90.cuh), in a header of their own so that a device test of a
 * hand-off built on them (tests/device/ring_handoff.cu, compiled by nvcc on
 * the device) runs the kernel's own instructions rather than a copy.
 * Self-contained: shared-memory addresses as 32-bit unsigned ints.
 */
#ifndef TSR_SM90_SYNC_CUH
#define TSR_SM90_SYNC_CUH

static __device__ __forceinline__ void tsr_mbar_init(unsigned int bar, int count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}
static __device__ __forceinline__ void tsr_mbar_expect_tx(unsigned int bar, unsigned int bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes)
               : "memory");
}
static __device__ __forceinline__ void tsr_mbar_arrive(unsigned int bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
}
static __device__ __forceinline__ void tsr_mbar_wait(unsigned int bar, unsigned int parity) {
  unsigned int done;
  do {
    asm volatile(
        "{\n.reg .pred p;\n"
        "mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
        "selp.u32 %0, 1, 0, p;\n}\n"
        : "=r"(done)
        : "r"(bar), "r"(parity)
        : "memory");
  } while (!done);
}
/* A bulk copy of `bytes` (a multiple of 16, both addresses 16-byte
 * aligned) from global to shared memory, completing on barrier bar. */
static __device__ __forceinline__ void tsr_bulk_load(unsigned int dst, const void *src, unsigned int bytes,
                                                     unsigned int bar) {
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n"
               ::"r"(dst), "l"((unsigned long long)src), "r"(bytes), "r"(bar)
               : "memory");
}

#endif
