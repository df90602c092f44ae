"""Quant op kernels (``fp8_static_quant``, ``fp8_dequant``, ``nvfp4_quant``, ``nvfp4_dequant``):
``kernels.py`` holds the ``@triton.jit`` kernels, ``launch.py`` the ``*_into`` launchers.

Bit-exact with docs/numerics.md: every division is ``div_rn``, the fp32 -> e4m3 conversion is
the hardware's rne/satfinite one, e2m1 rounding is done in software (Hopper has no FP4
convert). No host synchronisation anywhere: scales are read on the device.
"""
