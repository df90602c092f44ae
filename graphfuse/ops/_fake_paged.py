"""Fake (meta) impls of the paged decode-attention ops, and their shared argument checks.

Conventions (schemas in ``graphfuse/ops/_library.py``, semantics in ``docs/gpu.md``):
q ``[B, Hq, D]``; kv_cache ``[num_blocks, 2, block_size, Hkv, D]`` (index 0 = K, 1 = V);
block_tables int32 ``[B, max_blocks]``; seq_lens int32 ``[B]``. Outputs ``[B, Hq, D]``, or
NVFP4 over the ``[B, Hq*D]`` view.
"""

from __future__ import annotations

import torch

from ._checks import FP8, check_input_dtype, check_scale, empty_outputs, fail, output_specs


def check_paged_args(op: str, q, kv_cache, block_tables, seq_lens, q_scale, k_scale, v_scale):
    """Validate the shared arguments of ``graphfuse::paged_decode_attention*``.

    Args:
        op: op name for error messages.
        q, kv_cache, block_tables, seq_lens, q_scale, k_scale, v_scale: the op's arguments
            (tensors; the scales may be None).

    Raises:
        RuntimeError: naming the op and the offending values.
    """
    if q.dim() != 3:
        fail(op, f"q must be 3-D [B, Hq, D], got shape {list(q.shape)}")
    if kv_cache.dim() != 5 or kv_cache.shape[1] != 2:
        fail(
            op,
            "kv_cache must be [num_blocks, 2, block_size, Hkv, D], got shape "
            f"{list(kv_cache.shape)}",
        )
    for name, t in (("q", q), ("kv_cache", kv_cache)):
        check_input_dtype(op, name, t)
    if q.dtype == FP8 and q_scale is None:
        fail(op, "q is float8_e4m3fn but q_scale is None")
    if kv_cache.dtype == FP8 and (k_scale is None or v_scale is None):
        fail(op, "kv_cache is float8_e4m3fn but k_scale or v_scale is None")
    for name, s in (("q_scale", q_scale), ("k_scale", k_scale), ("v_scale", v_scale)):
        check_scale(op, name, s)
    b, hq, d = q.shape
    hkv, dk = kv_cache.shape[3], kv_cache.shape[4]
    if dk != d:
        fail(op, f"kv_cache head_dim {dk} != q head_dim {d}")
    if hkv == 0 or hq % hkv != 0:
        fail(op, f"Hq={hq} must be a multiple of Hkv={hkv}")
    if block_tables.dtype != torch.int32 or block_tables.dim() != 2 or block_tables.shape[0] != b:
        fail(
            op,
            f"block_tables must be int32 [B={b}, max_blocks], got {block_tables.dtype} "
            f"{list(block_tables.shape)}",
        )
    if seq_lens.dtype != torch.int32 or tuple(seq_lens.shape) != (b,):
        fail(op, f"seq_lens must be int32 [B={b}], got {seq_lens.dtype} {list(seq_lens.shape)}")
    devices = {t.device for t in (q, kv_cache, block_tables, seq_lens)}
    if len(devices) > 1:
        fail(
            op,
            f"q, kv_cache, block_tables and seq_lens must be on one device, got "
            f"{sorted(map(str, devices))}",
        )


def paged_outputs(op: str, args: tuple, out_kind: int) -> list:
    """The checked output specs (``output_specs``) of paged op ``op`` called with ``args``
    (as its schema), output kind 0 / 1 / 2 (NVFP4 over the ``[B, Hq*D]`` view)."""
    *inputs, last = args
    q, kv_cache, block_tables, seq_lens, q_scale, k_scale, v_scale, _scale = inputs
    check_paged_args(op, q, kv_cache, block_tables, seq_lens, q_scale, k_scale, v_scale)
    b, hq, d = q.shape
    return output_specs(op, out_kind, last, list(q.shape), (b, hq * d), d)


def _register(op: str, out_kind: int) -> None:
    @torch.library.register_fake(f"graphfuse::{op}")
    def fake(*args):
        return empty_outputs(args[0], paged_outputs(op, args, out_kind))


for _kind, _op in enumerate(
    ("paged_decode_attention", "paged_decode_attention_fp8", "paged_decode_attention_nvfp4")
):
    _register(_op, _kind)
