#!/bin/sh
# gpu-python-leak.sh: runs tests/gpu_python_leak.py (1,000 tessera.attention
# calls without a context leave RSS, live tensors and device memory flat)
# against this build's library and bundle.  Skips (77) without python3, the
# shared library, PyTorch or a CUDA device, and in the sanitizer build.
top=${TSR_TOP_BUILDDIR:-.}
src=${TSR_TOP_SRCDIR:-.}
lib=$top/.libs/libtessera.so
command -v python3 >/dev/null 2>&1 || { echo "gpu-python-leak: no python3"; exit 77; }
[ -f "$lib" ] || { echo "gpu-python-leak: no $lib (static-only build)"; exit 77; }
if ldd "$lib" 2>/dev/null | grep -q libasan; then
  echo "gpu-python-leak: $lib is built with AddressSanitizer"
  exit 77
fi
TESSERA_LIBRARY=$lib TESSERA_BUNDLE=${TESSERA_BUNDLE:-$top/bundle} PYTHONPATH=$src/python \
  exec python3 "$src/tests/gpu_python_leak.py"
