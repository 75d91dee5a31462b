"""Installs rcoll's PyTorch backend into the current Python environment.

    pip install --no-build-isolation ./python

builds the extension against the torch already installed here (hence no build
isolation) with CMake, from the repository this folder belongs to, and
installs the `rcoll` package (`import rcoll.torch` registers the "rcoll"
backend). torch itself is not a declared dependency: the build needs the one
already here, and pip must not replace it (or pull its CUDA wheels). RCOLL_BUILD_DIR picks the CMake build folder, RCOLL_JOBS the
parallelism.
"""
import os
import shutil
import subprocess
import sys
import sysconfig

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


class CMakeBuild(build_ext):
    def build_extension(self, ext):
        build_dir = os.path.abspath(os.environ.get("RCOLL_BUILD_DIR") or os.path.join(self.build_temp, "cmake"))
        configure = ["cmake", "-S", ROOT, "-B", build_dir, "-DCMAKE_BUILD_TYPE=Release",
                     f"-DRCOLL_TORCH_PYTHON={sys.executable}", "-DRCOLL_BUILD_TESTS=OFF", "-DRCOLL_BUILD_BENCH=OFF",
                     # several sources compiled as one: a third less time for a build made once
                     "-DCMAKE_UNITY_BUILD=ON"]
        if shutil.which("ninja"):
            configure += ["-G", "Ninja"]
        subprocess.check_call(configure)
        jobs = os.environ.get("RCOLL_JOBS", str(os.cpu_count() or 2))
        subprocess.check_call(["cmake", "--build", build_dir, "--target", "rcoll_torch", "-j", jobs])
        built = os.path.join(build_dir, "python", "rcoll", "_C" + sysconfig.get_config_var("EXT_SUFFIX"))
        if not os.path.exists(built):
            raise RuntimeError(f"rcoll: the extension was not built ({built} is missing); is torch 2.x importable "
                               f"from {sys.executable}? See the CMake output above")
        dest = self.get_ext_fullpath(ext.name)
        os.makedirs(os.path.dirname(dest), exist_ok=True)
        shutil.copy2(built, dest)


setup(
    name="rcoll",
    version="0.1.0",
    description="rcoll: resilient collective communication, as a torch.distributed backend",
    packages=["rcoll", "rcoll.torch"],
    ext_modules=[Extension("rcoll._C", sources=[])],
    cmdclass={"build_ext": CMakeBuild},
    python_requires=">=3.9",
    zip_safe=False,
)
