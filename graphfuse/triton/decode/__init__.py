"""Split-KV decode attention (one query token per sequence, paged or dense KV; output 16-bit,
FP8 or NVFP4): ``config.py`` (the launch configuration per shape class, as data),
``kernels.py`` / ``tiles.py`` (the ``@triton.jit`` kernels and their device helpers),
``launch.py`` (``decode_into``) and ``paged.py`` (``paged_into``: the paged ops' launch).

FP8 / fp16 KV tiles multiply in fp16 (e4m3 -> fp16 is exact; a bf16 / fp32 q is scaled per
row by a power of two into fp16 range first); the dequant scales fold into the logit scale
and the output. With several splits a merge kernel combines the partials, then quantizes.
"""
