"""Builds the native module graphfuse._C (the C++ CPU kernels in graphfuse/csrc) and lists
what ships: every package under graphfuse/, every bundled rule set under patterns/
(installed as graphfuse.patterns.*), and graphfuse_cli (the console script's torch-free
argument grammar)."""

import glob
import platform

from setuptools import find_packages, setup
from torch.utils.cpp_extension import BuildExtension, CppExtension

flags = ["-O3", "-fopenmp", "-std=c++17"]
if platform.machine() in ("x86_64", "AMD64"):
    flags += ["-mavx2", "-mfma", "-mf16c"]

packages = find_packages(include=["graphfuse", "graphfuse.*"])
packages += ["graphfuse.patterns"]
packages += [f"graphfuse.patterns.{name}" for name in find_packages("patterns")]

setup(
    packages=packages,
    py_modules=["graphfuse_cli"],
    package_dir={"graphfuse.patterns": "patterns"},
    ext_modules=[
        CppExtension(
            "graphfuse._C",
            sorted(glob.glob("graphfuse/csrc/*.cpp")),
            extra_compile_args=flags,
            extra_link_args=["-fopenmp"],
        )
    ],
    cmdclass={"build_ext": BuildExtension},
)
