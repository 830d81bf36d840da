#!/bin/sh
# python-diffusers.sh: tessera.diffusers (python/tessera/diffusers.py) on small
# WanTransformer3DModel, HunyuanVideoTransformer3DModel and
# CogVideoXTransformer3DModel models (reduced configs, random weights, CPU
# tensors through the CPU plan executor), compared with the models' own
# attention under the same token-level mask in float64; the dense warm-up,
# the step counter, remove(), and the vLLM-Omni SPARSE_ATTN callable
# (tests/python_diffusers.py says what each check is).  Needs PyTorch and
# diffusers (scripts/setup-common installs both at pinned versions).
# Skips (77) without python3, torch, diffusers or the shared library, and in
# the sanitizer build (the ASan runtime would have to load before python).
top=${TSR_TOP_BUILDDIR:-.}
src=${TSR_TOP_SRCDIR:-.}
lib=$top/.libs/libtessera.so
command -v python3 >/dev/null 2>&1 || { echo "python-diffusers: no python3"; exit 77; }
[ -f "$lib" ] || { echo "python-diffusers: no $lib (static-only build)"; exit 77; }
if ldd "$lib" 2>/dev/null | grep -q libasan; then
  echo "python-diffusers: $lib is built with AddressSanitizer"
  exit 77
fi
python3 -c "import torch, diffusers" 2>/dev/null ||
  { echo "python-diffusers: no torch or diffusers (scripts/setup-common installs them)"; exit 77; }
TESSERA_LIBRARY=$lib TESSERA_BUNDLE=$top/bundle PYTHONPATH=$src/python \
  exec python3 "$src/tests/python_diffusers.py" "$@"
