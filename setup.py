"""Builds the native module graphfuse._C: the C++ CPU kernels in graphfuse/csrc."""

import glob
import platform

from setuptools import setup
from torch.utils.cpp_extension import BuildExtension, CppExtension

flags = ["-O3", "-fopenmp", "-std=c++17"]
if platform.machine() in ("x86_64", "AMD64"):
    flags += ["-mavx2", "-mfma", "-mf16c"]

setup(
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
