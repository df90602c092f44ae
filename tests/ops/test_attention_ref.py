"""The pure-PyTorch attention reference against torch SDPA on upcast inputs: masks (incl.
fully masked rows), GQA vs repeat_kv, causal semantics, layouts, and the quantized refs."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from graphfuse.ops.attention_ref import (
    attention_fp8_ref,
    attention_fp32,
    attention_nvfp4_ref,
    attention_ref,
)
from graphfuse.ops.quant_ref import fp8_static_quant_ref, nvfp4_quant_ref


def _qkv(b=2, hq=8, hkv=2, sq=11, skv=19, d=32, seed=0):
    gen = torch.Generator().manual_seed(seed)
    q = torch.randn(b, hq, sq, d, generator=gen)
    k = torch.randn(b, hkv, skv, d, generator=gen)
    v = torch.randn(b, hkv, skv, d, generator=gen)
    return q, k, v


def _sdpa(q, k, v, **kw):
    rep = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(rep, 1), v.repeat_interleave(rep, 1)  # repeat_kv
    m = kw.get("attn_mask")
    if m is not None and m.dtype.is_floating_point:
        kw["attn_mask"] = m.double()
    return F.scaled_dot_product_attention(q.double(), k.double(), v.double(), **kw).float()


def _ref(q, k, v, **kw):
    base = dict(
        q_scale=None,
        k_scale=None,
        v_scale=None,
        attn_mask=None,
        causal="none",
        scale=None,
        layout="bhsd",
        precision="default",
    )
    return attention_fp32(q, k, v, **{**base, **kw})


@pytest.mark.parametrize("hkv", [1, 2, 8])
def test_gqa_matches_repeat_kv_sdpa(hkv):
    q, k, v = _qkv(hkv=hkv)
    torch.testing.assert_close(_ref(q, k, v), _sdpa(q, k, v), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(
        _ref(q, k, v, scale=0.3), _sdpa(q, k, v, scale=0.3), rtol=1e-5, atol=1e-5
    )


@pytest.mark.parametrize("sq,skv", [(11, 19), (19, 11), (7, 7), (1, 33)])
def test_top_left_is_sdpa_is_causal(sq, skv):
    q, k, v = _qkv(sq=sq, skv=skv)
    ref = _ref(q, k, v, causal="top_left")
    # SDPA's is_causal is top-left; with Sq > Skv no row is fully masked there.
    torch.testing.assert_close(ref, _sdpa(q, k, v, is_causal=True), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("sq,skv", [(11, 19), (19, 11), (1, 33), (5, 5)])
def test_bottom_right_is_hand_built_mask(sq, skv):
    q, k, v = _qkv(sq=sq, skv=skv)
    i = torch.arange(sq).unsqueeze(1)
    j = torch.arange(skv).unsqueeze(0)
    keep = j <= i + (skv - sq)  # query i aligned to the end of the keys
    ref = _ref(q, k, v, causal="bottom_right")
    torch.testing.assert_close(ref, _sdpa(q, k, v, attn_mask=keep), rtol=1e-5, atol=1e-5)
    if sq > skv:  # the first sq - skv queries see no key: zeros, never NaN
        assert (ref[:, :, : sq - skv] == 0).all()
    assert torch.isfinite(ref).all()


def test_bool_and_additive_masks_with_fully_masked_rows():
    q, k, v = _qkv()
    gen = torch.Generator().manual_seed(1)
    keep = torch.rand(2, 1, 11, 19, generator=gen) > 0.4
    keep[:, :, 3] = False
    ref = _ref(q, k, v, attn_mask=keep)
    torch.testing.assert_close(ref, _sdpa(q, k, v, attn_mask=keep), rtol=1e-5, atol=1e-5)
    assert (ref[:, :, 3] == 0).all() and torch.isfinite(ref).all()
    add = torch.randn(1, 8, 11, 19, generator=gen)
    add[:, :, 5] = float("-inf")
    ref = _ref(q, k, v, attn_mask=add)
    torch.testing.assert_close(ref, _sdpa(q, k, v, attn_mask=add), rtol=1e-5, atol=1e-5)
    assert (ref[:, :, 5] == 0).all() and torch.isfinite(ref).all()


def test_fp8_inputs_dequantize_with_their_scales():
    q, k, v = _qkv()
    qs, ks, vs = torch.tensor(0.02), torch.tensor([0.01]), torch.tensor([[0.03]])
    q8, k8, v8 = ((t / s).to(torch.float8_e4m3fn) for t, s in ((q, qs), (k, ks), (v, vs)))
    ref = _ref(q8, k8, v8, q_scale=qs, k_scale=ks, v_scale=vs)
    up = [t.float() * s for t, s in ((q8, qs), (k8, ks), (v8, vs))]
    torch.testing.assert_close(ref, _sdpa(*up), rtol=1e-5, atol=1e-5)
    with pytest.raises(RuntimeError, match="graphfuse::attention: k is float8_e4m3fn"):
        _ref(q, k8, v)


def test_layouts():
    q, k, v = _qkv()
    o = _ref(q, k, v)
    b, h, s, d = o.shape
    t = o.transpose(1, 2)
    assert torch.equal(_ref(q, k, v, layout="bshd"), t.contiguous())
    assert torch.equal(_ref(q, k, v, layout="bs(hd)"), t.reshape(b, s, h * d))
    assert torch.equal(_ref(q, k, v, layout="(bs)(hd)"), t.reshape(b * s, h * d))


def test_quantized_refs_are_quant_of_wide():
    q, k, v = _qkv(d=64)
    args = (q, k, v, None, None, None, None, "top_left", None, "bs(hd)", "default")
    wide = attention_fp32(*args)
    s_o = torch.tensor(0.002)
    assert torch.equal(
        attention_fp8_ref(*args, s_o).view(torch.uint8),
        fp8_static_quant_ref(wide, s_o).view(torch.uint8),
    )
    g = torch.tensor(3000.0)
    p, sf = attention_nvfp4_ref(*args, g)
    rp, rsf = nvfp4_quant_ref(wide, g)
    assert torch.equal(p, rp) and torch.equal(sf.view(torch.uint8), rsf.view(torch.uint8))
    assert attention_ref(*args, torch.bfloat16).dtype == torch.bfloat16


def test_float64_compute_agrees():
    q, k, v = _qkv()
    a = _ref(q, k, v, causal="bottom_right")
    b = attention_fp32(q, k, v, causal="bottom_right", compute_dtype=torch.float64)
    torch.testing.assert_close(a.double(), b, rtol=1e-5, atol=1e-6)
