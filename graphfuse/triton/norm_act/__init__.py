"""Norm / activation + quant kernels (``rms_norm_quant_fp8``, ``add_rms_norm_quant_fp8``,
``rms_norm_quant_nvfp4``, ``add_rms_norm_quant_nvfp4``, ``act_and_mul_quant_fp8``,
``act_and_mul_quant_nvfp4``): ``kernels.py`` holds the ``@triton.jit`` kernels, ``launch.py``
the ``*_into`` launchers.

The arithmetic is ``graphfuse/ops/norm_act_ref.py``'s (the C++ CPU kernels'): the act_and_mul
kernels are bit-exact with it; the RMSNorm kernels sum the squares in a tree, the one freedom
docs/numerics.md allows, so their bytes may differ by one step where that sum's last bit does.
RMSNorm runs one program per row (NVFP4 over many rows: programs that loop over rows);
act_and_mul one program per (row, 1024 columns). No host synchronisation: scales are read on
the device, swizzle padding is written by the kernels; from sm_90 a launch of few programs is
a programmatic dependent launch (``launch._launch``).
"""
