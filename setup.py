"""Builds the native modules (the C++ CPU kernels in graphfuse/csrc) and lists what ships:
every package under graphfuse/, every bundled rule set under patterns/ (installed as
graphfuse.patterns.*), and graphfuse_cli (the console script's torch-free argument grammar).

``graphfuse._C`` is portable (baseline instruction set: the kernels' scalar paths); on x86-64
the same sources also build ``graphfuse._C_avx2`` (AVX2 + FMA + F16C), and
graphfuse/ops/_native.py imports one of them by the CPU's capability. ``-g0`` (no debug info)
keeps the two builds near the CPU time of the one with ``-g``."""

import glob
import platform

from setuptools import find_packages, setup
from torch.utils.cpp_extension import BuildExtension, CppExtension

flags = ["-O3", "-g0", "-fopenmp", "-std=c++17"]
variants = {"graphfuse._C": []}
if platform.machine() in ("x86_64", "AMD64"):
    variants["graphfuse._C_avx2"] = ["-mavx2", "-mfma", "-mf16c"]

packages = find_packages(include=["graphfuse", "graphfuse.*"])
packages += ["graphfuse.patterns"]
packages += [f"graphfuse.patterns.{name}" for name in find_packages("patterns")]

setup(
    packages=packages,
    py_modules=["graphfuse_cli"],
    package_dir={"graphfuse.patterns": "patterns"},
    ext_modules=[
        CppExtension(
            name,
            sorted(glob.glob("graphfuse/csrc/*.cpp")),
            extra_compile_args=flags + isa,
            extra_link_args=["-fopenmp"],
        )
        for name, isa in variants.items()
    ],
    cmdclass={"build_ext": BuildExtension},
)
