"""setup.py: the one build step pyproject.toml cannot declare.  build_py
runs the autotools build (autoreconf when there is no configure script,
configure once, make) in build-py/autotools, or takes the build folder
$TESSERA_BUILD_DIR as it is (already built: make check's wheel test reuses
its own), and copies libtessera.so and the kernel bundle (registry.json and
the cubins, as `make install` installs them) into tessera/_lib/.  The wheel
is platform-specific (it carries a shared library).  The cubins come from
$TESSERA_GEN_CACHE when set (unchanged kernels are not recompiled)."""
import glob
import os
import re
import shutil
import subprocess

from setuptools import setup
from setuptools.command.build_py import build_py
from setuptools.dist import Distribution

SRC = os.path.dirname(os.path.abspath(__file__))


def autotools(build):
    """configure (once) and make in `build`; autoreconf first in a git checkout."""
    if not os.path.exists(os.path.join(SRC, "configure")):
        subprocess.run(["autoreconf", "-fi"], cwd=SRC, check=True)
    os.makedirs(build, exist_ok=True)
    if not os.path.exists(os.path.join(build, "Makefile")):
        subprocess.run([os.path.join(SRC, "configure"), "-q"], cwd=build, check=True)
    subprocess.run(["make", "-j%d" % (os.cpu_count() or 1)], cwd=build, check=True)


class BuildPy(build_py):
    def run(self):
        super().run()
        build = os.environ.get("TESSERA_BUILD_DIR")
        if build:
            build = os.path.abspath(build)
        else:
            build = os.path.join(os.path.abspath(self.get_finalized_command("build").build_base),
                                 "autotools")
            autotools(build)
        lib = os.path.join(build, ".libs", "libtessera.so")
        registry = os.path.join(build, "bundle", "registry.json")
        for f in (lib, registry):
            if not os.path.exists(f):
                raise SystemExit(f"tessera: no {f}: build folder {build} is not built (run make there)")
        dest = os.path.join(self.build_lib, "tessera", "_lib")
        shutil.rmtree(dest, ignore_errors=True)
        os.makedirs(os.path.join(dest, "bundle"))
        shutil.copyfile(lib, os.path.join(dest, "libtessera.so"))  # the file, not the symlink
        shutil.copyfile(registry, os.path.join(dest, "bundle", "registry.json"))
        for cubin in glob.glob(os.path.join(build, "bundle", "*", "*.cubin")):
            arch = os.path.join(dest, "bundle", os.path.basename(os.path.dirname(cubin)))
            os.makedirs(arch, exist_ok=True)
            shutil.copyfile(cubin, os.path.join(arch, os.path.basename(cubin)))


class BinaryDistribution(Distribution):
    def has_ext_modules(self):  # a platform wheel: it carries libtessera.so
        return True


with open(os.path.join(SRC, "configure.ac")) as f:
    VERSION = re.search(r"AC_INIT\(\[tessera\], \[([^]]+)\]", f.read())[1]

setup(version=VERSION, cmdclass={"build_py": BuildPy}, distclass=BinaryDistribution,
      options={"build": {"build_base": "build-py"}})
