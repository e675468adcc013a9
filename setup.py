"""Builds torch_devx with CMake against the torch importable here.

With build isolation (pip's default) that is the torch the build backend asked for
(scripts/build_backend/devx_build.py: the user's own release when there is one); with
`--no-build-isolation` it is the installed one. The wheel requires the same torch X.Y, and the
package checks it again at import (torch_devx/_build_info.py, written here).
"""
import os
import shutil
import subprocess
import sys

from setuptools import Extension, find_packages, setup
from setuptools.command.build_ext import build_ext


class CMakeExtension(Extension):
    def __init__(self, name: str) -> None:
        super().__init__(name, sources=[])


class CMakeBuild(build_ext):
    def build_extension(self, ext: Extension) -> None:
        import torch

        out_dir = os.path.dirname(os.path.abspath(self.get_ext_fullpath(ext.name)))
        src_dir = os.path.dirname(os.path.abspath(__file__))
        # The libraries are always built into the source package (what an editable install runs
        # from) and copied to wherever setuptools wants the extension (a wheel's build dir).
        pkg_dir = os.path.join(src_dir, "src", "torch_devx")
        build_dir = os.environ.get("DEVX_BUILD_DIR", os.path.join(src_dir, "build"))
        os.makedirs(build_dir, exist_ok=True)
        # Prefer the cmake and ninja installed next to this interpreter (the Makefile's venv).
        bin_dir = os.path.dirname(sys.executable)
        cmake = shutil.which("cmake", path=bin_dir) or "cmake"
        ninja = shutil.which("ninja", path=bin_dir) or shutil.which("ninja")
        configure = [
            cmake, "-S", src_dir, "-B", build_dir,
            f"-DPython3_EXECUTABLE={sys.executable}",
            f"-DDEVX_PACKAGE_DIR={pkg_dir}",
            f"-DCMAKE_BUILD_TYPE={os.environ.get('DEVX_BUILD_TYPE', 'Release')}",
        ]
        if ninja and not os.path.exists(os.path.join(build_dir, "CMakeCache.txt")):
            configure += ["-G", "Ninja", f"-DCMAKE_MAKE_PROGRAM={ninja}"]
        if os.environ.get("DEVX_NO_CUDA", "0") not in ("", "0"):
            configure.append("-DDEVX_NO_CUDA=ON")
        subprocess.check_call(configure)
        jobs = os.environ.get("MAX_JOBS", str(os.cpu_count() or 2))
        subprocess.check_call([cmake, "--build", build_dir, "-j", jobs])
        with open(os.path.join(pkg_dir, "_build_info.py"), "w") as f:
            f.write(f'"""Written by setup.py at build time."""\nTORCH_VERSION = {torch.__version__!r}\n')
        if os.path.realpath(out_dir) != os.path.realpath(pkg_dir):
            # A wheel: build_py ran before this and saw none of the build's products.
            os.makedirs(out_dir, exist_ok=True)
            for name in os.listdir(pkg_dir):
                if name.endswith(".so") or name == "_build_info.py":
                    shutil.copy2(os.path.join(pkg_dir, name), os.path.join(out_dir, name))
            shutil.copytree(os.path.join(pkg_dir, "include"), os.path.join(out_dir, "include"), dirs_exist_ok=True)


def torch_requirement() -> str:
    """The torch the extension is built against, as X.Y.* (patch releases keep the C++ ABI); the
    supported range when torch is not importable (an sdist, whose wheel pins again)."""
    try:
        import torch
    except ImportError:
        return "torch>=2.11,<2.15"
    major, minor = torch.__version__.split("+")[0].split(".")[:2]
    return f"torch=={major}.{minor}.*"


setup(
    package_dir={"": "src"},
    packages=find_packages("src", include=["torch_devx", "torch_devx.*"]),
    install_requires=[torch_requirement(), "pyyaml", "scipy-openblas32"],
    ext_modules=[CMakeExtension("torch_devx._C")],
    cmdclass={"build_ext": CMakeBuild},
    # The headers and CMake config vendors build against (torch_devx.utils).
    package_data={"torch_devx": ["*.so", "include/*.h", "share/cmake/torch_devx/*.cmake"]},
)
