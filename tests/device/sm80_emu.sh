#!/bin/sh
# sm80_emu.sh: runs tests/gpu_attn (or EMU_PROG, e.g. gpu_plan) on the CPU
# over the sm80 kernels of a build's bundle and the GPU planner, through a
# fake libcuda.so.1 whose kernels are the templates compiled for the host
# (sm80_emu.h, sm80_emu_rt.cc, sm80_emu_planner.cc).  A check of
# the kernels' logic for machines without a GPU: fragment layouts, masking,
# the cp.async pipeline's waits and barriers (EMU_LATE=1 lands copies only
# at wait_group), the merge; not of timing, occupancy or the real compiler.
# Cost: a minute or two to build (two g++ compiles a variant), then minutes.
#
#   tests/device/sm80_emu.sh BUILDDIR [gpu_attn arguments]
#   EMU_PROG=gpu_plan tests/device/sm80_emu.sh BUILDDIR --no-timing   (the planner)
#   EMU_CC=8.9 (the sm_89 subset), EMU_LATE=1, EMU_SEED=n, EMU_SMS=n; see sm80_emu_rt.cc
#   EMU_VARIANTS="name ..." limits the build to those variants; EMU_OUT=DIR builds
#   there instead of BUILDDIR/emu.
set -eu
b=$(cd "${1:?usage: sm80_emu.sh BUILDDIR [gpu_attn args]}" && pwd)
shift
here=$(cd "$(dirname "$0")" && pwd)
top=$(cd "$here/../.." && pwd)
tdir=${EMU_TEMPLATES:-$top/templates}
out=${EMU_OUT:-$b/emu}
mkdir -p "$out/stub-attn" "$out/stub-merge" "$out/obj"
: > "$out/stub-attn/merge.cuh"
: > "$out/stub-merge/attn_sm80.cuh"
cxx="g++ -std=c++17 -O1 -g -fno-strict-aliasing -w -Wno-psabi"
inc="-I$here -I$tdir -I$top/runtime -I/usr/local/cuda/include"
vars=${EMU_VARIANTS:-$(cd "$b/bundle/src" && ls tsr_sm80_*.cu | sed 's/\.cu$//')}
objs=""
for v in $vars; do
  src=$b/bundle/src/$v.cu
  # sm80_emu.h converts elements before the generated source defines the dtype
  case $v in *_bf16_*) bf=1 ;; *) bf=0 ;; esac
  for part in 0 1; do
    o=$out/obj/$v.$part.o
    stub=$out/stub-attn
    test $part = 1 && stub=$out/stub-merge
    if ! test -f "$o" || test "$src" -nt "$o" || test "$tdir/attn_sm80.cuh" -nt "$o" ||
       test "$tdir/merge.cuh" -nt "$o" || test "$here/sm80_emu.h" -nt "$o" || test "$here/sm80_emu_variant.cc" -nt "$o"; then
      echo "emu: compiling $v ($part)"
      $cxx -fPIC -I"$stub" $inc -DEMU_MERGE=$part -DTSR_DTYPE_BF16=$bf -DEMU_SRC="\"$src\"" -c "$here/sm80_emu_variant.cc" -o "$o"
    fi
    objs="$objs $o"
  done
done
$cxx -fPIC $inc -c "$here/sm80_emu_rt.cc" -o "$out/obj/rt.o"
$cxx -fPIC $inc -c "$here/sm80_emu_planner.cc" -o "$out/obj/planner.o"
$cxx -shared -o "$out/libcuda.so.1" "$out/obj/rt.o" "$out/obj/planner.o" $objs
echo "emu: $out/libcuda.so.1 ($(echo $vars | wc -w) variants)"
LD_LIBRARY_PATH=$out${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH} TSR_TOP_BUILDDIR=$b "$b/tests/${EMU_PROG:-gpu_attn}" "$@"
