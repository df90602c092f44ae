"""Prefill attention (any Sq): two kernels side by side, and the rule for which one runs.

- ``gluon_kernel.py``: the warp-specialised Gluon kernel for Hopper (FlashAttention-3's
  structure: a TMA producer warp, two consumer warpgroups with no barrier between them).
  ``gluon_nvfp4.py`` holds its NVFP4 output.
- ``triton_kernel.py``: the plain Triton kernel, which handles every op argument.
- ``config.py``: the Triton kernel's tile table (``default_config``) and ``ws_eligible``;
  ``launch.py``: ``attention_into``, which applies the rule and launches either kernel.

**The rule** (``launch.uses_gluon``): the Gluon kernel runs when the device is sm_90 and
this Triton has Gluon's Hopper layer, and ``config.ws_eligible`` accepts the call -- q, k,
v all bf16 or all fp16, or all FP8 (FP8 ``Q K^T``; 16-bit P·V in the default precision,
FP8 P·V in fast mode; dequant scales allowed); no mask; D of 64 or 128; Sq and Skv
multiples of 128; q and k (and a 16-bit v) addressable as one 2-D TMA view (``[B, H, S,
D]`` or ``[B, S, H, D]`` memory, fused-QKV slices, broadcast heads); 16/32-bit, FP8 or
NVFP4 output. Everything else -- masks, Sq <= 16, fp32 or mixed inputs, other head dims,
ragged lengths, other GPUs or a Triton without Gluon -- runs the Triton kernel;
``config={"WS": False}`` keeps a call on it (tests compare the two). On the H200 (B=4
S=4096 causal, 2026-12-03, docs/gpu.md) the Gluon kernel ran bf16 at 0.96x cuDNN's SDPA
against 0.81x and FP8 at 1.05x SDPA + quant against 0.97x for the Triton kernel.

FP8 v in fast mode is copied once per call to K-major memory, the operand layout FP8 wgmma
reads for P·V (Triton's MN-major FP8 P·V runs at about half speed): ``launch.k_major`` for
the Triton kernel (not when v is already stored K-major, or Sq <= 16),
``launch.fast_v_tiles`` for the Gluon kernel (always: its keys are reordered within each
16, ``config.wgmma_key_order``); one read + write of V, which the kernel reads
``Sq / BLOCK_M * G`` times.
"""
