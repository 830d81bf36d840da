#!/bin/sh
# python-diffusers.sh: tessera.diffusers (python/tessera/diffusers.py) on small
# WanTransformer3DModel, HunyuanVideoTransformer3DModel and
# CogVideoXTransformer3DModel models (reduced configs, random weights, CPU
# tensors through the CPU plan executor), compared with the models' own
# attention under the same token-level mask in float64 (VSA, STA, SVG,
# XAttention); the dense warm-up, the step counter, remove(), the
# FlexAttention backend, the vLLM-Omni SPARSE_ATTN callable, and
# torch.compile of a whole model after apply() against eager
# (TSR_COMPILE_BACKEND: aot_eager by default; tests/python_diffusers.py
# says what each check is).
# Skips (77) without python3, PyTorch, diffusers or the shared library, and in
# the sanitizer build (tests/python-env.sh); scripts/setup-common installs
# PyTorch and diffusers at pinned versions.
TSR_PY_NEEDS_TORCH=1
. "${TSR_TOP_SRCDIR:-.}/tests/python-env.sh" python-diffusers
python3 -c "import diffusers" 2>/dev/null ||
  { echo "python-diffusers: diffusers is not installed (scripts/setup-common installs it)"; exit 77; }
exec python3 "$src/tests/python_diffusers.py" "$@"
