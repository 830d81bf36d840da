#!/bin/sh
# pip-install.sh: `pip wheel` of the source tree gives a wheel with
# libtessera.so and the kernel bundle inside the tessera package; installed
# into a private --target folder, `import tessera` finds both there with
# TESSERA_LIBRARY and TESSERA_BUNDLE unset and runs attention() on CPU
# tensors against the float64 reference; TESSERA_LIBRARY still overrides.
# The wheel reuses this build folder (TESSERA_BUILD_DIR) rather than
# building the kernels again (minutes); `pip install .` without it runs the
# whole autotools build (setup.py).  The build requirement is the pinned
# setuptools of pyproject.toml: the installed one when it is that version,
# else pip's isolated build fetches it.  Skips (77) as tests/python-env.sh,
# and without pip.
TSR_PY_NEEDS_TORCH=1
. "${TSR_TOP_SRCDIR:-.}/tests/python-env.sh" pip-install
python3 -m pip --version >/dev/null 2>&1 || { echo "pip-install: no pip"; exit 77; }
top=$(cd "$top" && pwd) src=$(cd "$src" && pwd)
tmp=$(mktemp -d "${TMPDIR:-/tmp}/tsr-pip.XXXXXX") || exit 99
trap 'rm -rf "$tmp"' EXIT
# The package's sources only (the source tree may be read-only: distcheck).
mkdir -p "$tmp/src/python" || exit 99
cp "$src/pyproject.toml" "$src/setup.py" "$src/configure.ac" "$src/README.md" "$tmp/src/" &&
  cp -R "$src/python/tessera" "$tmp/src/python/" || exit 99
rm -rf "$tmp/src/python/tessera/_lib" "$tmp/src/python/tessera/__pycache__"
pin=$(sed -n 's/.*"setuptools==\([0-9.]*\)".*/\1/p' "$src/pyproject.toml")
have=$(python3 -c 'import setuptools; print(setuptools.__version__)' 2>/dev/null)
iso=
[ -n "$pin" ] && [ "$have" = "$pin" ] && iso=--no-build-isolation
echo "pip-install: setuptools $have installed, $pin pinned: pip wheel ${iso:-with build isolation}"
export PIP_ROOT_USER_ACTION=ignore PIP_DISABLE_PIP_VERSION_CHECK=1
(cd "$tmp/src" && TESSERA_BUILD_DIR=$top python3 -m pip wheel -q --no-deps $iso -w "$tmp/wheel" .) ||
  { echo "pip-install: pip wheel failed"; exit 1; }
set -- "$tmp"/wheel/tessera-*.whl
[ -f "$1" ] || { echo "pip-install: no wheel in $tmp/wheel"; exit 1; }
echo "pip-install: built $(basename "$1")"
python3 -m pip install -q --no-deps --target "$tmp/site" "$1" || { echo "pip-install: pip install failed"; exit 1; }
cd "$tmp" || exit 99
export TSR_PIP_SITE="$tmp/site" TSR_PIP_TOP="$top" TSR_PIP_TESTS="$src/tests"
env -u TESSERA_LIBRARY -u TESSERA_BUNDLE PYTHONPATH="$tmp/site" python3 - <<'PY' || exit 1
import glob, os, sys
import torch
import tessera
site, top = os.environ["TSR_PIP_SITE"], os.environ["TSR_PIP_TOP"]
own = os.path.join(site, "tessera", "_lib")
assert tessera.__file__ == os.path.join(site, "tessera", "__init__.py"), tessera.__file__
assert tessera.library()._path == os.path.join(own, "libtessera.so"), tessera.library()._path
# every cubin of the build's bundle, and its registry, inside the package
names = lambda d: sorted(os.path.relpath(p, d) for p in glob.glob(os.path.join(d, "*", "*.cubin")))
want = names(os.path.join(top, "bundle"))
assert want and names(os.path.join(own, "bundle")) == want, (len(want), len(names(os.path.join(own, "bundle"))))
with open(os.path.join(top, "bundle", "registry.json"), "rb") as a, \
        open(os.path.join(own, "bundle", "registry.json"), "rb") as b:
    assert a.read() == b.read(), "registry.json differs from the build's"
ctx = tessera.default_context(tessera.NO_DEVICE)
assert ctx._keep[1] == os.path.join(own, "bundle").encode(), ctx._keep
sys.path.insert(0, os.environ["TSR_PIP_TESTS"])
import python_ref as ref
assert ref.tessera is tessera
q, k, v = torch.randn(2, 300, 4, 64), torch.randn(2, 200, 2, 64), torch.randn(2, 200, 2, 64)
m = torch.rand(2, 4, 3, 2) < 0.6
m[0, 0, 1] = False
o, lse = tessera.attention(q, k, v, m, block=(128, 100), layout="bshd", return_lse=True)
want, wlse = ref.reference(q, k, v, m, (128, 100), "bshd")
err = ref.rel_error(o, want)
fin = torch.isfinite(wlse)
assert err < 2e-5 and torch.equal(torch.isneginf(lse), ~fin) and ref.rel_error(lse[fin], wlse[fin]) < 1e-5, err
print("pip-install: the installed package runs attention on CPU tensors: error %.2e" % err)
PY
# TESSERA_LIBRARY still overrides the package's library (and then the
# package's bundle is not paired with it: TESSERA_BUNDLE or the default).
env -u TESSERA_BUNDLE TESSERA_LIBRARY="$lib" PYTHONPATH="$tmp/site" python3 -c '
import os, sys, tessera
assert tessera.library()._path == sys.argv[1], tessera.library()._path
assert tessera._bundle_dir(None) is None and tessera._bundle_dir("/x") == "/x"
' "$lib" || { echo "pip-install: TESSERA_LIBRARY did not override the package library"; exit 1; }
echo "pip-install: ok"
