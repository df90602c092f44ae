"""The paged decode-attention launch (``graphfuse::paged_decode_attention*``, semantics in
docs/gpu.md): the KV cache's K and V views into ``decode_into``."""

from __future__ import annotations

from .launch import decode_into


def paged_into(
    q, kv_cache, block_tables, seq_lens, q_scale, k_scale, v_scale, scale, out, out_kind,
    out_scale=None, sf=None, config: dict | None = None,
) -> None:  # fmt: skip
    """Launches paged decode attention into ``out`` (``[B, Hq, D]``, or NVFP4 packed
    ``[B, Hq*D/2]`` with ``sf``); ``config`` overrides ``decode_config``'s knobs."""
    hq, d = q.shape[1], q.shape[2]
    decode_into(
        q, kv_cache[:, 0], kv_cache[:, 1], q_scale, k_scale, v_scale, scale, out, out_kind,
        (hq * d, d), out_scale, sf, block_tables, seq_lens, config,
    )  # fmt: skip
