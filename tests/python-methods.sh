#!/bin/sh
# python-methods.sh: tessera.methods (python/tessera/methods.py) against the
# corpus generator's rules, block for block on identical pooled inputs
# (tests/python_methods.py says what it checks), through tests/methods_rule.
# CPU tensors only.  Skips (77) without python3 with PyTorch and numpy.
top=${TSR_TOP_BUILDDIR:-.}
src=${TSR_TOP_SRCDIR:-.}
command -v python3 >/dev/null 2>&1 || { echo "python-methods: no python3"; exit 77; }
python3 -c "import torch, numpy" 2>/dev/null || { echo "python-methods: no torch/numpy"; exit 77; }
[ -x "$top/tests/methods_rule" ] || { echo "python-methods: no $top/tests/methods_rule"; exit 99; }
# The end-to-end part runs tessera.attention's CPU path: the build's library,
# unless it is built with AddressSanitizer (which must be loaded before python).
lib=$top/.libs/libtessera.so
if [ -f "$lib" ] && ! ldd "$lib" 2>/dev/null | grep -q libasan; then
  TESSERA_LIBRARY=$lib TESSERA_BUNDLE=$top/bundle
  export TESSERA_LIBRARY TESSERA_BUNDLE
fi
tmp=$(mktemp -d "${TMPDIR:-/tmp}/tsr-methods.XXXXXX") || exit 99
trap 'rm -rf "$tmp"' EXIT
TSR_METHODS_RULE=$top/tests/methods_rule TSR_METHODS_TMP=$tmp PYTHONPATH=$src/python \
  exec python3 "$src/tests/python_methods.py"
