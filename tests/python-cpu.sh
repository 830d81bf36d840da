#!/bin/sh
# python-cpu.sh: tessera.attention() on PyTorch CPU tensors (the lookup
# table's host plan through the CPU plan executor) against the float64
# reference; tests/python_cpu.py says what it covers.  Skips (77) without
# python3, PyTorch or the shared library, and in the sanitizer build
# (tests/python-env.sh).  SEED= repeats a run, CASES= sets the random cases.
TSR_PY_NEEDS_TORCH=1
. "${TSR_TOP_SRCDIR:-.}/tests/python-env.sh" python-cpu
exec python3 "$src/tests/python_cpu.py"
