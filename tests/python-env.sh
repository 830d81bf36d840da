# tests/python-env.sh: sourced by the Python tests (tests/python-*.sh) to run
# the binding of this build: sets top, src and lib, skips (77) without
# python3, without the shared library or in the sanitizer build (its library
# needs the ASan runtime loaded before python itself), and, when
# TSR_PY_NEEDS_TORCH=1, without PyTorch; exports TESSERA_LIBRARY,
# TESSERA_BUNDLE and PYTHONPATH for python/tessera/.  $1: the test's name.
top=${TSR_TOP_BUILDDIR:-.}
src=${TSR_TOP_SRCDIR:-.}
lib=$top/.libs/libtessera.so
command -v python3 >/dev/null 2>&1 || { echo "$1: no python3"; exit 77; }
[ -f "$lib" ] || { echo "$1: no $lib (static-only build)"; exit 77; }
if ldd "$lib" 2>/dev/null | grep -q libasan; then
  echo "$1: $lib is built with AddressSanitizer"
  exit 77
fi
if [ "${TSR_PY_NEEDS_TORCH:-0}" = 1 ] && ! python3 -c "import torch" 2>/dev/null; then
  echo "$1: PyTorch is not installed (scripts/setup-common installs it)"
  exit 77
fi
TESSERA_LIBRARY=$lib TESSERA_BUNDLE=$top/bundle PYTHONPATH=$src/python
export TESSERA_LIBRARY TESSERA_BUNDLE PYTHONPATH
