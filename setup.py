"""Builds torch_devx with CMake against the torch that is already installed.

Install with `pip install --no-build-isolation -e .`: the build must see the same torch the
extension will run with, so it cannot happen in an isolated environment.
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
        pkg_dir = os.path.join(src_dir, "torch_devx")
        build_dir = os.environ.get("DEVX_BUILD_DIR", os.path.join(src_dir, "build"))
        os.makedirs(build_dir, exist_ok=True)
        # Prefer the cmake and ninja installed next to this interpreter (the Makefile's venv).
        bin_dir = os.path.dirname(sys.executable)
        cmake = shutil.which("cmake", path=bin_dir) or "cmake"
        ninja = shutil.which("ninja", path=bin_dir) or shutil.which("ninja")
        configure = [
            cmake, "-S", src_dir, "-B", build_dir,
            f"-DCMAKE_PREFIX_PATH={torch.utils.cmake_prefix_path}",
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
        if os.path.realpath(out_dir) != os.path.realpath(pkg_dir):
            os.makedirs(out_dir, exist_ok=True)
            for name in os.listdir(pkg_dir):
                if name.endswith(".so"):
                    shutil.copy2(os.path.join(pkg_dir, name), os.path.join(out_dir, name))


setup(
    packages=find_packages(include=["torch_devx", "torch_devx.*"]),
    ext_modules=[CMakeExtension("torch_devx._C")],
    cmdclass={"build_ext": CMakeBuild},
    # The headers and CMake config vendors build against (torch_devx.utils).
    package_data={"torch_devx": ["*.so", "include/*.h", "share/cmake/torch_devx/*.cmake"]},
)
