"""The ``trtllm`` rules: check (every condition, one sentence each) and rewrite."""

from __future__ import annotations

from numbers import Number
from typing import Any

import torch

from graphfuse import Builder, Match, Rule
from graphfuse import dsl as P

from .._quant import (
    FP8,
    aten,
    check_scale,
    check_static_fp8_quant,
    eager_fp8_quant,
    gf,
    nvfp4_quant,
    quant_output,
    scale_operand,
    static_fp8_quant,
)
from ._layout import bhsd_layout
from ._spellings import OUTPUT_CHAIN, attention

# the fused ops
_ATTENTION_FP8 = gf.attention_fp8.default
_ATTENTION_NVFP4 = gf.attention_nvfp4.default
_ATTENTION = gf.attention.default
_INPUT_DTYPES = (torch.float32, torch.bfloat16, torch.float16, FP8)
_WIDE = (torch.float32, torch.float64)
_CAST_TARGETS = (aten.to.dtype, aten._to_copy.default, torch.ops.prims.convert_element_type.default)


def _dtype_of(node: Any) -> Any:
    val = node.meta.get("val") if isinstance(node, torch.fx.Node) else None
    return val.dtype if isinstance(val, torch.Tensor) else None


_CAST_CHAINS = tuple((n, f"{n}_cast", f"{n}_inner_cast") for n in "qkv")


def _check_input_casts(m: Match) -> Any:
    """Casts seen through in front of q / k / v must be exact (same dtype or to fp32/fp64):
    the fused op reads the tensor before the cast."""
    chains = m.chains
    for name, outer, inner in _CAST_CHAINS:
        for node in chains.get(outer, ()) + chains.get(inner, ()):
            src, dst = _dtype_of(node.args[0]), _dtype_of(node)
            if dst != src and dst not in _WIDE:
                return m.fail(
                    "{n} is cast from {a} to {b} before attention, which rounds; the fused op "
                    "would read the unrounded {a} tensor",
                    node,
                    n=name,
                    a=src,
                    b=dst,
                )
    return None


def _check_output_casts(m: Match) -> Any:
    """Casts between attention and the quant must stay floating point with >= 16 bits."""
    for node in m.chain("layout"):
        if node.target in _CAST_TARGETS:
            dst = _dtype_of(node)
            if dst is None or not dst.is_floating_point or dst.itemsize < 2:
                return m.fail(
                    "the attention output is cast to {d} before the quant; the fused op "
                    "quantizes the 16/32-bit output",
                    node,
                    d=dst,
                )
    return None


def _number(m: Match, name: str) -> Any:
    v = m.get(name)
    return v if v is None or isinstance(v, Number) else m.fail("{n} is a tensor", n=name)


_SCALE_FACTORS = ("q_prescale", "k_prescale", "post_scale")


def _softmax_scale(m: Match) -> Any:
    """The softmax scale the match spells (None: SDPA's default 1/sqrt(D)), or a Failure."""
    if m.tag("source") != "math":
        scale = m.get("scale")
        if scale is None or isinstance(scale, Number):
            return scale
        return m.fail("the softmax scale is a tensor ({s}); the fused op needs a constant", s=scale)
    scale = 1.0
    for name in _SCALE_FACTORS:
        if name not in m:
            continue
        v = m[name]
        if not isinstance(v, Number):
            return m.fail("the softmax scale {n} is not a constant", n=name)
        scale = scale / v if name == "post_scale" and m.tag(name) == "div" else scale * v
    return float(scale)


def _check_heads(m: Match, name: str, hq: int, hkv: int, tag: str | None) -> Any:
    """``hkv``: the heads of ``name``'s value; ``tag``: the ``{name}_repeat`` branch."""
    if tag == "interleave":
        reps = m[f"{name}_rep"]
        if not isinstance(reps, int) or reps * hkv != hq:
            return m.fail("{n} is repeated {r} times to {h} heads", n=name, r=reps, h=hq)
    elif tag == "expand":
        sizes = m[f"{name}_exp"]
        if not (isinstance(sizes, (list, tuple)) and len(sizes) == 5 and sizes[1] == hkv):
            return m.fail("{n} is expanded to {s}, not [B, Hkv, n_rep, S, D]", n=name, s=sizes)
    if hq % hkv != 0:
        return m.fail("Hq = {hq} is not a multiple of Hkv = {hkv}", name, hq=hq, hkv=hkv)
    return None


_MASKS = ("mask", "mask_add", "mask_dropped")


def _mask(m: Match) -> Any:
    """The capture name of the mask the match binds (None: no mask)."""
    for name in _MASKS:
        if isinstance(m.get(name), torch.fx.Node):
            return name
    return None


_QKV = (("q", "q_scale"), ("k", "k_scale"), ("v", "v_scale"))


def check_attention(m: Match) -> Any:
    """The conditions every fused attention needs (inputs, GQA, mask, dropout, scale).

    On success it leaves in ``m.memo``: ``"sizes"`` (B, H, S, D) and ``"attention"`` (the
    mask's capture name, the causal mode and the softmax scale), read again by rewrite."""
    if any(m.chains.values()) and (f := _check_input_casts(m)) is not None:
        return f
    shapes = []
    for name, scale_name in _QKV:
        val = m.val(name)
        shape = val.shape
        if len(shape) != 4:
            return m.fail(
                "{n} has rank {r}; the fused op takes [B, H, S, D]", name, n=name, r=val.dim()
            )
        dtype = val.dtype
        if dtype not in _INPUT_DTYPES:
            return m.fail(
                "{n} has dtype {d}; the fused op takes fp32/bf16/fp16/fp8",
                name,
                n=name,
                d=dtype,
            )
        if scale_name in m and (f := check_scale(m, scale_name)):
            return f
        shapes.append(shape)
    qs, ks, vs = shapes
    if (f := _check_heads(m, "k", qs[1], ks[1], m.tag("k_repeat"))) is not None:
        return f
    if (f := _check_heads(m, "v", qs[1], vs[1], m.tag("v_repeat"))) is not None:
        return f
    dropout = m.get("dropout")
    if dropout not in (None, 0, 0.0):
        return m.fail("dropout_p is {p}; the fused op has no dropout", p=dropout)
    causal = m.get("is_causal", False)
    if not isinstance(causal, bool):
        return m.fail("is_causal is {c}; the fused op needs a constant", c=causal)
    mask = _mask(m)
    if mask is not None:
        shape = m.val(mask).shape
        full = (qs[0], qs[1], qs[2], ks[2])
        if len(shape) > 4 or any(
            not (s == 1 or s == f) for s, f in zip(reversed(shape), reversed(full))
        ):
            return m.fail(
                "the mask has shape {s}; it must broadcast to {f}",
                mask,
                s=list(shape),
                f=list(full),
            )
    if ks != vs:
        return m.fail(
            "k has shape {ks} and v {vs}; the fused op needs equal shapes",
            ks=list(ks),
            vs=list(vs),
        )
    if vs[3] != qs[3]:
        return m.fail("v's head_dim {dv} differs from q's {dq}", dv=vs[3], dq=qs[3])
    scale = _softmax_scale(m)
    if not (scale is None or isinstance(scale, float | int)):
        return scale
    memo = m.memo
    memo["sizes"] = (qs[0], qs[1], qs[2], vs[3])
    memo["attention"] = (mask, "top_left" if causal is True else "none", scale)
    return None


def _layout(m: Match) -> str | None:
    memo = m.memo
    if "layout" not in memo:  # computed by check, read again by rewrite
        sizes = memo.get("sizes")  # B, H, S, D (left by check_attention)
        if sizes is None:
            q = m.val("q")
            sizes = (q.shape[0], q.shape[1], q.shape[2], m.val("v").shape[3])
        memo["layout"] = bhsd_layout(m["attn"], m.chain("layout"), sizes)
    return memo["layout"]


def _check_layout(m: Match) -> Any:
    if m.chains.get("layout") and (f := _check_output_casts(m)) is not None:
        return f
    if _layout(m) is None:
        ops = " -> ".join(n.name for n in reversed(m.chain("layout")))
        return m.fail("the layout ops {ops} give a layout the fused op does not write", ops=ops)
    return None


def _op_args(m: Match, b: Builder) -> tuple:
    memo = m.memo
    got = memo.get("attention")  # left by check_attention
    if got is None:
        mask = _mask(m)
        causal = "top_left" if m.get("is_causal", False) is True else "none"
        scale = _softmax_scale(m)
    else:
        mask, causal, scale = got
    get = m.get
    mask_node = get(mask) if mask else None
    if mask == "mask_dropped":
        mask_node = b.call(aten.logical_not.default, mask_node)
    return (
        m["q"],
        m["k"],
        m["v"],
        scale_operand(m, b, "q_scale"),
        scale_operand(m, b, "k_scale"),
        scale_operand(m, b, "v_scale"),
        mask_node,
        causal,
        None if scale is None else float(scale),
        _layout(m) or "bhsd",
        "default",
    )


def _check_fp8_out(m: Match) -> Any:
    return check_attention(m) or check_static_fp8_quant(m) or _check_layout(m)


def _rewrite_fp8_out(m: Match, b: Builder) -> Any:
    """Attention -> static FP8 output quant, fused into graphfuse::attention_fp8."""
    return quant_output(m, b, b.call(_ATTENTION_FP8, *_op_args(m, b), scale_operand(m, b)))


def _check_nvfp4_out(m: Match) -> Any:
    f = check_attention(m) or check_scale(m, "out_global_scale") or _check_layout(m)
    if f:
        return f
    if m["swizzle"] is not True:
        return m.fail("the NVFP4 quant asks for linear block scales; the fused op writes swizzled")
    d = m.val("q").shape[3]
    if d % 16:
        return m.fail("head_dim is {d}; NVFP4 output needs a multiple of 16", d=d)
    return None


def _rewrite_nvfp4_out(m: Match, b: Builder) -> Any:
    """Attention -> NVFP4 output quant, fused into graphfuse::attention_nvfp4."""
    return b.call(_ATTENTION_NVFP4, *_op_args(m, b), scale_operand(m, b, "out_global_scale"))


def _check_fp8_inputs(m: Match) -> Any:
    if all(m.tag(f"{n}_fp8") == "plain" for n in "qkv"):
        return m.fail("no input of this attention is FP8")
    f = check_attention(m)
    if f:
        return f
    q, out = m.val("q"), m.root.meta["val"]
    want = (q.shape[0], q.shape[1], q.shape[2], m.val("v").shape[3])
    if out.dim() != 4 or tuple(out.shape) != want:
        return m.fail("the attention output here has shape {s}", s=list(out.shape))
    return None


def _rewrite_fp8_inputs(m: Match, b: Builder) -> Any:
    """Attention over dequantised FP8 q/k/v, fused into graphfuse::attention (16-bit out)."""
    return b.call(_ATTENTION, *_op_args(m, b), m.root.meta["val"].dtype)


def _rewrite_quant(m: Match, b: Builder) -> Any:
    """A static FP8 quant spelled with eager ops, as graphfuse::fp8_static_quant."""
    return quant_output(m, b, b.call(gf.fp8_static_quant.default, m["x"], scale_operand(m, b)))


def _check_quant(m: Match) -> Any:
    if m.val("x").dtype not in (torch.float32, torch.bfloat16, torch.float16):
        return m.fail("x has dtype {d}", d=m.val("x").dtype)
    return check_static_fp8_quant(m)


def rules() -> list[Rule]:
    """The rules, with the quant spellings registered now (``static_fp8_quant``)."""
    attn_out = P.maybe(OUTPUT_CHAIN, attention(), name="layout")
    return [
        Rule(
            "attention_fp8_out",
            static_fp8_quant(attn_out),
            _rewrite_fp8_out,
            _check_fp8_out,
            priority=20,
        ),
        Rule(
            "attention_nvfp4_out",
            nvfp4_quant(attn_out),
            _rewrite_nvfp4_out,
            _check_nvfp4_out,
            priority=20,
        ),
        Rule(
            "attention_fp8_inputs",
            attention(),
            _rewrite_fp8_inputs,
            _check_fp8_inputs,
            priority=10,
        ),
        Rule(
            "fp8_static_quant",
            eager_fp8_quant(P.tensor("x")),
            _rewrite_quant,
            _check_quant,
            priority=0,
        ),
    ]
