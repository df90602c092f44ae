"""The spellings real exporters produce, as reusable pattern values.

Each value here is one *meaning* (a dequantised FP8 input, a GQA repeat, an attention)
whose spellings are tagged alternatives, so rules read
``static_fp8_quant(layout(attention))`` and ``check`` / ``rewrite`` read the tags. The
quant sub-patterns, shared with other rule sets, are in ``patterns/_quant.py``.
"""

from __future__ import annotations

import torch

from graphfuse import dsl as P

from .._quant import CASTS, FP8, aten, cast, gf, maybe_cast

INF = float("inf")

VIEWS = [aten.view.default, aten.reshape.default, aten._unsafe_view.default]
# What may stand between a matmul operand and the tensor it multiplies (decomposed matmul).
OPERAND = VIEWS + [aten.expand.default, aten.clone.default]
LAYOUT = VIEWS + [
    aten.transpose.int,
    aten.permute.default,
    aten.clone.default,
    aten.contiguous.default,
    aten.flatten.using_ints,
    aten.unsqueeze.default,
    aten.squeeze.dim,
    aten.alias.default,
]
# Between attention and the quant: layout ops and casts (``attn.to(float32)``; after
# run_decompositions() the bf16 -> fp32 -> bf16 round trip of SDPA's math form).
OUTPUT_CHAIN = LAYOUT + CASTS


# --------------------------------------------------------------------------- inputs


def exact_cast(node: torch.fx.Node) -> bool:
    """A cast that loses nothing: to the same dtype, or to fp32 / fp64."""
    src, dst = node.args[0].meta.get("val"), node.meta.get("val")
    if not (isinstance(src, torch.Tensor) and isinstance(dst, torch.Tensor)):
        return False
    return dst.dtype == src.dtype or (dst.dtype in _WIDE and src.dtype != FP8)


_WIDE = (torch.float32, torch.float64)


def widened(x: P.Pattern, name: str) -> P.Pattern:
    """``x`` seen through exact casts (chain ``{name}_cast``): run_decompositions() computes
    SDPA's math form of 16-bit inputs in fp32 (``_to_copy(q, float32)``). A rounding cast
    (or an FP8 -> wide cast without its scale) ends the chain, so ``x`` binds the cast."""
    return P.maybe(CASTS, x, name=f"{name}_cast", where=exact_cast)


def dequant(name: str) -> P.Pattern:
    """An attention input, possibly the dequantisation of an FP8 tensor ``name`` with scale
    ``name_scale`` (``x8.to(dt) * s``, ``x8.float() * s``, ``graphfuse::fp8_dequant``)."""
    x8 = P.tensor(name, dtype=FP8)
    scale = P.tensor(f"{name}_scale")
    return P.alt(
        f"{name}_fp8",
        op=P.op(gf.fp8_dequant.default, x8, scale),
        mul=P.op(aten.mul.Tensor, cast(x8), scale, commutative=True),
        # a plain input is 16/32-bit: an FP8 tensor only enters attention dequantised
        plain=P.tensor(name, rank=4, dtype=(torch.float32, torch.bfloat16, torch.float16)),
    )


def kv_heads(name: str) -> P.Pattern:
    """A K or V input, possibly repeated to the query heads (GQA): ``repeat_kv``'s
    ``unsqueeze -> expand -> reshape``, or ``repeat_interleave`` on dim 1."""
    x = widened(dequant(name), f"{name}_inner")
    expanded = P.op(aten.expand.default, P.op(aten.unsqueeze.default, x, 2), P.any(f"{name}_exp"))
    return P.alt(
        f"{name}_repeat",
        expand=P.op(VIEWS, P.maybe([aten.clone.default], expanded), P._),
        interleave=P.op(aten.repeat_interleave.self_int, x, P.scalar(f"{name}_rep"), 1),
        none=x,
    )


# --------------------------------------------------------------------------- attention


def _matmul(a: P.Pattern, b: P.Pattern, name: str | None = None) -> P.Pattern:
    """``a @ b`` as ``matmul`` or as ``view(bmm(view(expand(a)), view(expand(b))))``."""
    mm = [aten.matmul.default, aten.bmm.default]
    return P.maybe(VIEWS, P.op(mm, P.maybe(OPERAND, a), P.maybe(OPERAND, b), name=name))


def _prescaled(x: P.Pattern, name: str) -> P.Pattern:
    return P.alt(
        f"{name}_prescale",
        mul=P.op([aten.mul.Scalar, aten.mul.Tensor], x, P.scalar(f"{name}_prescale")),
        none=x,
    )


def _transposed(x: P.Pattern) -> P.Pattern:
    """``x.transpose(-2, -1)`` / ``x.transpose(-1, -2)`` / ``permute(0, 1, 3, 2)``."""
    return (
        P.op(aten.transpose.int, x, 2, 3)
        | P.op(aten.transpose.int, x, 3, 2)
        | P.op(aten.permute.default, x, [0, 1, 3, 2])
    )


_SDPA_ARGS = dict(dropout_p=P.any("dropout"), is_causal=P.any("is_causal"), scale=P.any("scale"))


def _sdpa_sources(q: P.Pattern, k: P.Pattern, v: P.Pattern) -> dict[str, P.Pattern]:
    fused = {
        "flash_cpu": (aten._scaled_dot_product_flash_attention_for_cpu, "attn_mask"),
        "efficient": (aten._scaled_dot_product_efficient_attention, "attn_bias"),
        "cudnn": (aten._scaled_dot_product_cudnn_attention, "attn_bias"),
    }
    out = {
        "sdpa": P.op(
            aten.scaled_dot_product_attention.default,
            q,
            k,
            v,
            attn_mask=P.any("mask"),
            enable_gqa=P.any("enable_gqa"),
            name="attn",
            **_SDPA_ARGS,
        )
    }
    for tag, (op, mask_arg) in fused.items():
        if hasattr(op, "default"):
            call = P.op(op.default, q, k, v, **{mask_arg: P.any("mask")}, **_SDPA_ARGS)
            out[tag] = P.getitem(call, 0, name="attn")
    flash = getattr(aten, "_scaled_dot_product_flash_attention", None)
    if flash is not None:
        out["flash"] = P.getitem(P.op(flash.default, q, k, v, **_SDPA_ARGS), 0, name="attn")
    return out


def _math_source(q: P.Pattern, k: P.Pattern, v: P.Pattern) -> P.Pattern:
    """softmax(q kᵀ * scale + mask) v, spelled by hand or by SDPA's decomposition (scale
    split as √scale onto q and kᵀ, mask as ``where(mask, 0, -inf)``, fully masked rows
    guarded)."""
    kt = _transposed(_prescaled(k, "k")) | _prescaled(_transposed(k), "k")
    logits = _matmul(_prescaled(q, "q"), kt)
    scaled = P.alt(
        "post_scale",
        mul=P.op([aten.mul.Tensor, aten.mul.Scalar], logits, P.scalar("post_scale")),
        div=P.op([aten.div.Tensor, aten.div.Scalar], logits, P.scalar("post_scale")),
        none=logits,
    )
    keep = P.alt(
        "mask_kind",
        inverted=P.op([aten.bitwise_not.default, aten.logical_not.default], P.tensor("mask")),
        negated=P.tensor("mask_dropped"),
    )
    neg_inf = P.op(aten.scalar_tensor.default, -INF) | P.lit(-INF)
    masked = P.alt(
        "masking",
        bool_where=P.op(
            aten.add.Tensor,
            scaled,
            P.op(aten.where.self, P.tensor("mask"), P.op(aten.scalar_tensor.default, 0.0), neg_inf),
            name="logits",
        ),
        additive=P.op(aten.add.Tensor, scaled, P.tensor("mask_add"), name="logits"),
        masked_fill=P.op(aten.masked_fill.Scalar, scaled, keep, -INF, name="logits"),
        where_fill=P.op(aten.where.self, keep, neg_inf, scaled, name="logits"),
        none=scaled,
    )
    probs = maybe_cast(
        P.op([aten._softmax.default, aten.softmax.int], maybe_cast(masked), -1, name="probs")
    )
    unmasked_row = P.op(
        aten.logical_not.default,
        P.op(
            aten.any.dim,
            P.op(aten.logical_not.default, P.op(aten.eq.Scalar, P.any("logits"), -INF)),
            -1,
            True,
        ),
    )
    guarded = P.alt(
        "guard",
        where=P.op(
            aten.where.self, unmasked_row, P.op(aten.full_like.default, probs, 0), P.any("probs")
        ),
        none=probs,
    )
    dropped = P.alt(
        "dropout_op",
        dropout=P.op(aten.dropout.default, guarded, P.any("dropout"), P._),
        none=guarded,
    )
    return _matmul(maybe_cast(dropped), v, name="attn")


def attention() -> P.Pattern:
    """Attention over q [B, Hq, S, D] and k, v [B, Hkv, S, D] (possibly FP8-dequantised,
    widened by casts and repeated to Hq heads), in every source form the rule set knows,
    tagged ``source``."""
    q = widened(dequant("q"), "q")
    k, v = widened(kv_heads("k"), "k"), widened(kv_heads("v"), "v")
    return P.alt("source", **_sdpa_sources(q, k, v), math=_math_source(q, k, v))
