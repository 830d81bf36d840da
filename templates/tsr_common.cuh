/*
 * tsr_common.cuh: small device helpers shared by the kernel templates
 * (compiled by NVRTC through tessera-gen; no CUDA headers needed).
 * Elements are kept as raw 16-bit words; conversions and the tensor-core
 * instructions are PTX, so one template serves bf16 and fp16.
 */
#ifndef TSR_COMMON_CUH
#define TSR_COMMON_CUH

#ifndef TSR_DTYPE_BF16 /* 1 bf16, 0 fp16: the variant's, never a default */
#error "tsr_common.cuh: TSR_DTYPE_BF16 is not defined (tessera-gen defines it)"
#endif

typedef unsigned short tsr_u16;

#define TSR_NEG_INF __int_as_float(0xff800000)
#define TSR_LN2 0.69314718055994530942f

/* 2^x with the MUFU unit; ex2(-inf) = 0, which the masked softmax needs,
 * and ex2(NaN) = NaN, which carries a NaN score into the row sum. */
static __device__ __forceinline__ float tsr_ex2(float x)
{
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

/* Two floats to a packed pair of elements: lo in bits 0-15. */
static __device__ __forceinline__ unsigned tsr_pack2(float lo, float hi)
{
  unsigned r;
#if TSR_DTYPE_BF16
  asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
#else
  asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
#endif
  return r;
}

static __device__ __forceinline__ unsigned tsr_smem_u32(const void *p)
{
  unsigned r;
  asm("{ .reg .u64 a; cvta.to.shared.u64 a, %1; cvt.u32.u64 %0, a; }" : "=r"(r) : "l"(p));
  return r;
}

/* 16-byte global-to-shared copy; src_bytes = 0 fills zeros (ragged tiles). */
static __device__ __forceinline__ void tsr_cp_async16(unsigned dst, const void *src, int src_bytes)
{
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(dst), "l"(src), "r"(src_bytes)
               : "memory");
}

static __device__ __forceinline__ void tsr_cp_async_commit()
{
  asm volatile("cp.async.commit_group;" ::: "memory");
}

template <int N>
static __device__ __forceinline__ void tsr_cp_async_wait()
{
  asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory");
}

static __device__ __forceinline__ void tsr_ldmatrix_x4(unsigned addr, unsigned &r0, unsigned &r1,
                                                       unsigned &r2, unsigned &r3)
{
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"
               : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3)
               : "r"(addr));
}

static __device__ __forceinline__ void tsr_ldmatrix_x4_trans(unsigned addr, unsigned &r0, unsigned &r1,
                                                             unsigned &r2, unsigned &r3)
{
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];"
               : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3)
               : "r"(addr));
}

/* D += A * B, m16n8k16, fp32 accumulators. */
static __device__ __forceinline__ void tsr_mma16816(float *c, const unsigned *a, unsigned b0, unsigned b1)
{
#if TSR_DTYPE_BF16
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
               "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};"
               : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
#else
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 "
               "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};"
               : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
#endif
}

#endif
