#!/bin/sh
# Builds the standalone sm90 harness: one translation unit per variant (the
# template's helpers are file-static), a cubin each, loaded at run time.  Usage:
#   scripts/dev/sm90_build.sh OUTDIR
set -e
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
out=${1:-build-sm90}
mkdir -p "$out"
NVCC="nvcc -std=c++17 -O3 -gencode=arch=compute_90a,code=sm_90a -I$root/runtime -I$root/templates"
objs=""
# name:f16:D:BM:BN:stages:membership[:extra -D flags, comma-separated]
for v in v_bf16_d128_m128n128_s2_mb:0:128:128:128:2:1 v_bf16_d128_m128n128_s2_nm:0:128:128:128:2:0 \
         v_fp16_d128_m128n128_s2_mb:1:128:128:128:2:1 v_bf16_d64_m128n128_s2_mb:0:64:128:128:2:1 \
         v_bf16_d128_m128n64_s2_mb:0:128:128:64:2:1 v_bf16_d128_m64n128_s2_mb:0:128:64:128:2:1 \
         v_bf16_d128_m128n128_s3_nm:0:128:128:128:3:0 v_bf16_d64_m128n128_s3_nm:0:64:128:128:3:0 \
         v_bf16_d128_m64n64_s2_mb:0:128:64:64:2:1 v_bf16_d128_m128n64_s3_mb:0:128:128:64:3:1 \
         v_bf16_d64_m128n64_s2_mb:0:64:128:64:2:1 v_bf16_d128_m128n64_s2_nm:0:128:128:64:2:0 \
         v_bf16_d128_m128n64_s3_nm:0:128:128:64:3:0 \
         v_bf16_d128_m64n64_s2_mb_g3:0:128:64:64:2:1:-DTSR_WARPGROUPS=3 \
         v_bf16_d128_m64n64_s3_mb_g3:0:128:64:64:3:1:-DTSR_WARPGROUPS=3 \
         v_bf16_d64_m64n64_s3_mb_g3:0:64:64:64:3:1:-DTSR_WARPGROUPS=3 \
         v_fp16_d128_m64n64_s2_mb_g3:1:128:64:64:2:1:-DTSR_WARPGROUPS=3 v_bf16_d64_m64n64_s2_mb:0:64:64:64:2:1 \
         v_bf16_d64_m64n64_s2_mb_g3:0:64:64:64:2:1:-DTSR_WARPGROUPS=3 \
         v_bf16_d128_m64n64_s2_mb_g3_old:0:128:64:64:2:1:-DTSR_WARPGROUPS=3,-DTSR_SM90_QPF=0 \
         v_bf16_d64_m64n64_s2_mb_g3_old:0:64:64:64:2:1:-DTSR_WARPGROUPS=3,-DTSR_SM90_QPF=0; do
  IFS=: read name f16 d bm bn st mb extra <<EOT
$v
EOT
  $NVCC -Xptxas -v -cubin -x cu "$here/sm90_variant.cu.in" -o "$out/$name.cubin" $(echo "$extra" | tr , ' ') \
    -DTSR_KERNEL_NAME=$name -DTSR_DTYPE_F16=$f16 -DTSR_D=$d -DTSR_BM=$bm -DTSR_BN=$bn \
    -DTSR_STAGES=$st -DTSR_MEMBERSHIP=$mb 2>&1 | grep -E "registers|spill|error|warning" | sed "s/^/$name: /" &
  [ "$(jobs | wc -l)" -ge 2 ] && wait
done
wait
$NVCC -o "$out/sm90_harness" "$here/sm90_harness.cu"
echo "built $out/sm90_harness"
