"""Fake (meta) impls of the paged decode-attention ops, and their shared argument checks.

Conventions (schemas in ``graphfuse/ops/_library.py``, semantics in ``docs/gpu.md``):
q ``[B, Hq, D]``; kv_cache ``[num_blocks, 2, block_size, Hkv, D]`` (index 0 = K, 1 = V);
block_tables int32 ``[B, max_blocks]``; seq_lens int32 ``[B]``. Outputs ``[B, Hq, D]``, or
NVFP4 over the ``[B, Hq*D]`` view.
"""

from __future__ import annotations

import torch

_FP8 = torch.float8_e4m3fn
_IN_DTYPES = (torch.float32, torch.bfloat16, torch.float16, _FP8)
WIDE_OUT_DTYPES = (torch.float32, torch.bfloat16, torch.float16)


def _fail(op: str, msg: str) -> None:
    raise RuntimeError(f"graphfuse::{op}: {msg}")


def _check_scale(op: str, name: str, s: torch.Tensor | None) -> None:
    if s is None:
        return
    if s.numel() != 1 or s.dim() > 2 or not s.dtype.is_floating_point:
        _fail(
            op,
            f"{name} must be a floating tensor of one element (shape [], [1] or [1, 1]), "
            f"got shape {list(s.shape)} dtype {s.dtype}",
        )


def check_paged_args(
    op: str,
    q: torch.Tensor,
    kv_cache: torch.Tensor,
    block_tables: torch.Tensor,
    seq_lens: torch.Tensor,
    q_scale: torch.Tensor | None,
    k_scale: torch.Tensor | None,
    v_scale: torch.Tensor | None,
) -> None:
    """Validate the shared arguments of ``graphfuse::paged_decode_attention*``.

    Args:
        op: op name for error messages.
        q, kv_cache, block_tables, seq_lens, q_scale, k_scale, v_scale: the op's arguments.

    Raises:
        RuntimeError: naming the op and the offending values.
    """
    if q.dim() != 3:
        _fail(op, f"q must be 3-D [B, Hq, D], got shape {list(q.shape)}")
    if kv_cache.dim() != 5 or kv_cache.shape[1] != 2:
        _fail(
            op,
            "kv_cache must be [num_blocks, 2, block_size, Hkv, D], got shape "
            f"{list(kv_cache.shape)}",
        )
    for name, t in (("q", q), ("kv_cache", kv_cache)):
        if t.dtype not in _IN_DTYPES:
            _fail(
                op,
                f"unsupported {name} dtype {t.dtype} (float32, bfloat16, float16, float8_e4m3fn)",
            )
    if q.dtype == _FP8 and q_scale is None:
        _fail(op, "q is float8_e4m3fn but q_scale is None")
    if kv_cache.dtype == _FP8 and (k_scale is None or v_scale is None):
        _fail(op, "kv_cache is float8_e4m3fn but k_scale or v_scale is None")
    for name, s in (("q_scale", q_scale), ("k_scale", k_scale), ("v_scale", v_scale)):
        _check_scale(op, name, s)
    b, hq, d = q.shape
    hkv, dk = kv_cache.shape[3], kv_cache.shape[4]
    if dk != d:
        _fail(op, f"kv_cache head_dim {dk} != q head_dim {d}")
    if hkv == 0 or hq % hkv != 0:
        _fail(op, f"Hq={hq} must be a multiple of Hkv={hkv}")
    if block_tables.dtype != torch.int32 or block_tables.dim() != 2 or block_tables.shape[0] != b:
        _fail(
            op,
            f"block_tables must be int32 [B={b}, max_blocks], got {block_tables.dtype} "
            f"{list(block_tables.shape)}",
        )
    if seq_lens.dtype != torch.int32 or tuple(seq_lens.shape) != (b,):
        _fail(op, f"seq_lens must be int32 [B={b}], got {seq_lens.dtype} {list(seq_lens.shape)}")
    devices = {t.device for t in (q, kv_cache, block_tables, seq_lens)}
    if len(devices) > 1:
        _fail(
            op,
            f"q, kv_cache, block_tables and seq_lens must be on one device, got "
            f"{sorted(map(str, devices))}",
        )


def nvfp4_out_shapes(b, hq, d) -> tuple[list, list]:
    """(packed, block-scale) shapes of the NVFP4 output over the ``[B, Hq*D]`` view."""
    k = hq * d
    return [b, k // 2], [(b + 127) // 128 * 128, (k // 16 + 3) // 4 * 4]


@torch.library.register_fake("graphfuse::paged_decode_attention")
def _paged_fake(q, kv_cache, block_tables, seq_lens, q_scale, k_scale, v_scale, scale, out_dtype):
    op = "paged_decode_attention"
    check_paged_args(op, q, kv_cache, block_tables, seq_lens, q_scale, k_scale, v_scale)
    if out_dtype not in WIDE_OUT_DTYPES:
        _fail(
            op,
            f"unsupported out_dtype {out_dtype} (float32, bfloat16, float16; use the _fp8 "
            "/ _nvfp4 variants for quantized output)",
        )
    return q.new_empty(q.shape, dtype=out_dtype)


@torch.library.register_fake("graphfuse::paged_decode_attention_fp8")
def _paged_fp8_fake(
    q, kv_cache, block_tables, seq_lens, q_scale, k_scale, v_scale, scale, out_scale
):
    op = "paged_decode_attention_fp8"
    check_paged_args(op, q, kv_cache, block_tables, seq_lens, q_scale, k_scale, v_scale)
    _check_scale(op, "out_scale", out_scale)
    return q.new_empty(q.shape, dtype=_FP8)


@torch.library.register_fake("graphfuse::paged_decode_attention_nvfp4")
def _paged_nvfp4_fake(
    q, kv_cache, block_tables, seq_lens, q_scale, k_scale, v_scale, scale, out_global_scale
):
    op = "paged_decode_attention_nvfp4"
    check_paged_args(op, q, kv_cache, block_tables, seq_lens, q_scale, k_scale, v_scale)
    _check_scale(op, "out_global_scale", out_global_scale)
    if q.shape[2] % 16 != 0:
        _fail(op, f"NVFP4 output needs head_dim D % 16 == 0, got D={q.shape[2]}")
    pshape, sshape = nvfp4_out_shapes(*q.shape)
    return q.new_empty(pshape, dtype=torch.uint8), q.new_empty(sshape, dtype=_FP8)
