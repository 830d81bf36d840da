#!/bin/sh
# python-op.sh: the torch op tessera::attention on CPU tensors: registration,
# opcheck, fake shapes, attention() through the op, torch.compile(fullgraph=True)
# with inductor against eager and the float64 reference (tests/python_op.py;
# tests/device/run BUILDDIR torch-op runs it on CUDA tensors).  Skips (77)
# without python3, PyTorch or the shared library, and in the sanitizer build.
TSR_PY_NEEDS_TORCH=1
. "${TSR_TOP_SRCDIR:-.}/tests/python-env.sh" python-op
# inductor's compiled kernels go to a private cache, removed afterwards
tmp=$(mktemp -d "${TMPDIR:-/tmp}/tsr-python-op.XXXXXX") || exit 99
trap 'rm -rf "$tmp"' EXIT
TORCHINDUCTOR_CACHE_DIR=$tmp/inductor TRITON_CACHE_DIR=$tmp/triton python3 "$src/tests/python_op.py"
