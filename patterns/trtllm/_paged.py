"""Paged decode attention (``graphfuse::paged_decode_attention``, the form serving engines
produce) followed by a static FP8 or NVFP4 quant, fused into the op's quantized variants.

The paged op writes ``[B, Hq, D]``; between it and the quant only reshapes and exact casts
may stand (they keep the memory order), so the fused FP8 output is the same bytes, viewed
to the quant's shape. NVFP4 quantizes the ``[B, Hq*D]`` rows, as the fused op does.
"""

from __future__ import annotations

from typing import Any

import torch

from graphfuse import Builder, Match, Rule
from graphfuse import dsl as P

from .._quant import (
    CASTS,
    aten,
    check_scale,
    check_static_fp8_quant,
    gf,
    nvfp4_quant,
    quant_output,
    scale_operand,
    static_fp8_quant,
)
from ._spellings import VIEWS, exact_cast

_RESHAPES = VIEWS + [aten.flatten.using_ints, aten.clone.default, aten.contiguous.default]


def _through(node: torch.fx.Node) -> bool:
    return node.target not in CASTS or exact_cast(node)


_PAGED = P.op(
    gf.paged_decode_attention.default,
    P.tensor("q"),
    P.tensor("kv_cache"),
    P.tensor("block_tables"),
    P.tensor("seq_lens"),
    P.any("q_scale"),
    P.any("k_scale"),
    P.any("v_scale"),
    P.any("scale"),
    name="attn",
)
_OUT = P.maybe(_RESHAPES + CASTS, _PAGED, name="layout", where=_through)


def _args(m: Match) -> tuple:
    names = ("q", "kv_cache", "block_tables", "seq_lens", "q_scale", "k_scale", "v_scale")
    return tuple(m[n] for n in names) + (m["scale"],)


def _shaping(m: Match) -> list[torch.fx.Node]:
    """The shape-changing ops of the chain, outermost first."""
    return [n for n in m.chain("layout") if n.target in VIEWS or n.target in _FLATTEN]


_FLATTEN = (aten.flatten.using_ints,)


def _check_paged_fp8(m: Match) -> Any:
    shaping = _shaping(m)
    if shaping and shaping[0].target in _FLATTEN and len(shaping) > 1:
        return m.fail("a flatten after other reshapes; write the final shape with a view")
    return check_static_fp8_quant(m)


def _rewrite_paged_fp8(m: Match, b: Builder) -> Any:
    """Paged decode attention -> static FP8 quant, as paged_decode_attention_fp8."""
    fused = b.call(gf.paged_decode_attention_fp8.default, *_args(m), scale_operand(m, b))
    shaping = _shaping(m)
    if shaping:
        last = shaping[0]  # the outermost reshape gives the quant's shape (the graph's sizes)
        if last.target in _FLATTEN:
            fused = b.call(last.target, fused, *last.args[1:])
        else:
            fused = b.call(aten.reshape.default, fused, last.args[1])
    return quant_output(m, b, fused)


def _check_paged_nvfp4(m: Match) -> Any:
    f = check_scale(m, "out_global_scale")
    if f:
        return f
    if m["swizzle"] is not True:
        return m.fail("the NVFP4 quant asks for linear block scales; the fused op writes swizzled")
    q, x = m.val("q"), m["attn"]
    chain = m.chain("layout")
    quant_in = (chain[0] if chain else x).meta["val"]
    row = q.shape[1] * q.shape[2]
    if quant_in.shape[-1] != row or quant_in.numel() != q.shape[0] * row:
        return m.fail(
            "the quant reads rows of {k} values; the fused op quantizes [B, Hq*D] rows ({r})",
            k=quant_in.shape[-1],
            r=row,
        )
    return None


def _rewrite_paged_nvfp4(m: Match, b: Builder) -> Any:
    """Paged decode attention -> NVFP4 quant of [B, Hq*D], as paged_decode_attention_nvfp4."""
    scale = scale_operand(m, b, "out_global_scale")
    return b.call(gf.paged_decode_attention_nvfp4.default, *_args(m), scale)


def paged_rules() -> list[Rule]:
    """The paged-decode rules, with the quant spellings registered now."""
    return [
        Rule(
            "paged_decode_fp8_out",
            static_fp8_quant(_OUT),
            _rewrite_paged_fp8,
            _check_paged_fp8,
            priority=15,
        ),
        Rule(
            "paged_decode_nvfp4_out",
            nvfp4_quant(_OUT),
            _rewrite_paged_nvfp4,
            _check_paged_nvfp4,
            priority=15,
        ),
    ]
