"""graphfuse::paged_decode_attention{,_fp8,_nvfp4} on CPU: the C++ kernel against the
pure-PyTorch reference (fresh random inputs, sampled cases), fake impls, opcheck, errors."""

from __future__ import annotations

import random

import pytest
import torch

import graphfuse  # noqa: F401
from graphfuse.ops import native_available
from graphfuse.ops.paged_ref import (
    paged_decode_attention_fp8_ref,
    paged_decode_attention_nvfp4_ref,
    paged_decode_attention_ref,
    paged_decode_fp32,
)
from graphfuse.testing.numerics import assert_fp8_close, assert_nvfp4_close

FP8 = torch.float8_e4m3fn
ops = torch.ops.graphfuse
needs_native = pytest.mark.skipif(not native_available(), reason="graphfuse._C not built")


def make_paged(b, hq, hkv, d, block, max_blocks, kv_dtype, q_dtype, gen):
    """Random q, cache (spare blocks), shuffled tables, lengths 0 / full / random."""
    nblocks = b * max_blocks + 2
    q = torch.randn((b, hq, d), generator=gen)
    qs = None
    if q_dtype == FP8:
        q, qs = (q * 64).to(FP8), torch.tensor([1 / 64.0])
    else:
        q = q.to(q_dtype)
    cache = torch.randn((nblocks, 2, block, hkv, d), generator=gen)
    ks = vs = None
    if kv_dtype == FP8:
        cache = (cache * 64).to(FP8)
        ks, vs = torch.tensor([1 / 64.0]), torch.tensor([1 / 32.0])
    else:
        cache = cache.to(kv_dtype)
    tables = torch.randperm(nblocks, generator=gen)[: b * max_blocks].view(b, max_blocks)
    tables = tables.to(torch.int32)
    lens = torch.randint(1, max_blocks * block + 1, (b,), generator=gen).to(torch.int32)
    lens[0] = max_blocks * block
    if b > 2:
        lens[1] = 0
        tables[1] = -1  # a sequence of length 0 never dereferences its table
    return q, cache, tables, lens, qs, ks, vs


def _cases(n: int, seed: int):
    rng = random.Random(seed)
    print(f"seed={seed}")
    for _ in range(n):
        hq, hkv = rng.choice([(8, 2), (4, 4), (6, 1)])
        yield dict(
            b=rng.choice([1, 3, 4]),
            hq=hq,
            hkv=hkv,
            d=rng.choice([16, 64, 96]),
            block=rng.choice([1, 16, 5]),
            max_blocks=rng.choice([1, 4, 9]),
            kv=rng.choice([FP8, torch.bfloat16, torch.float16, torch.float32]),
            q=rng.choice([torch.bfloat16, torch.float32, FP8]),
            seed=rng.randrange(1 << 30),
        )


@needs_native
@pytest.mark.parametrize("seed", [0, 1])
def test_cpu_kernel_matches_reference(seed: int) -> None:
    for c in _cases(6, seed):
        gen = torch.Generator().manual_seed(c["seed"])
        q, cache, tables, lens, qs, ks, vs = make_paged(
            c["b"], c["hq"], c["hkv"], c["d"], c["block"], c["max_blocks"], c["kv"], c["q"], gen
        )
        args = (q, cache, tables, lens, qs, ks, vs, None)
        wide = paged_decode_fp32(*args)
        out = ops.paged_decode_attention(*args, torch.float32)
        err = ((out - wide).norm() / wide.norm().clamp_min(1e-30)).item()
        assert err < 1e-5, (c, err)
        assert torch.equal(out[lens == 0], torch.zeros_like(out[lens == 0]))
        bf = ops.paged_decode_attention(*args, torch.bfloat16)
        assert torch.equal(bf, paged_decode_attention_ref(*args, torch.bfloat16)) or (
            (bf.float() - wide).abs().max() <= wide.abs().max() * 2**-7
        )
        s_o = torch.tensor([max(wide.abs().max().item(), 1e-6) / 448])
        o8 = ops.paged_decode_attention_fp8(*args, s_o)
        assert_fp8_close(o8, paged_decode_attention_fp8_ref(*args, s_o), wide, s_o)
        if c["d"] % 16 == 0:
            g = 1 / s_o * 6
            pk, sf = ops.paged_decode_attention_nvfp4(*args, g)
            rp, rs = paged_decode_attention_nvfp4_ref(*args, g)
            assert_nvfp4_close(pk, sf, rp, rs, wide, g)


@needs_native
def test_softmax_scale_and_scales_fold() -> None:
    gen = torch.Generator().manual_seed(3)
    q, cache, tables, lens, qs, ks, vs = make_paged(2, 4, 2, 32, 16, 3, FP8, FP8, gen)
    for scale in (None, 0.05, 1.3):
        args = (q, cache, tables, lens, qs, ks, vs, scale)
        out = ops.paged_decode_attention(*args, torch.float32)
        wide = paged_decode_fp32(*args)
        assert torch.allclose(out, wide, rtol=1e-5, atol=1e-6), scale


def test_fake_impl_shapes() -> None:
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode():
        q = torch.empty(5, 32, 128, dtype=torch.bfloat16)
        cache = torch.empty(40, 2, 16, 8, 128, dtype=FP8)
        tables = torch.empty(5, 8, dtype=torch.int32)
        lens = torch.empty(5, dtype=torch.int32)
        s = torch.empty(1)
        args = (q, cache, tables, lens, None, s, s, None)
        assert ops.paged_decode_attention(*args, torch.float16).shape == (5, 32, 128)
        assert ops.paged_decode_attention_fp8(*args, s).dtype == FP8
        pk, sf = ops.paged_decode_attention_nvfp4(*args, s)
        assert pk.shape == (5, 32 * 128 // 2) and sf.shape == (128, 256)


@needs_native
def test_opcheck_cpu() -> None:
    gen = torch.Generator().manual_seed(4)
    q, cache, tables, lens, qs, ks, vs = make_paged(
        2, 4, 2, 32, 16, 2, torch.bfloat16, torch.bfloat16, gen
    )
    s = torch.tensor([0.01])
    args = (q, cache, tables, lens, qs, ks, vs, None)
    torch.library.opcheck(ops.paged_decode_attention.default, (*args, torch.float32))
    torch.library.opcheck(ops.paged_decode_attention_fp8.default, (*args, s))
    torch.library.opcheck(ops.paged_decode_attention_nvfp4.default, (*args, s * 1e4))


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda a: {**a, "q": a["q"][0]}, "q must be 3-D"),
        (lambda a: {**a, "tables": a["tables"].long()}, "block_tables must be int32"),
        (lambda a: {**a, "lens": a["lens"][:1]}, "seq_lens must be int32"),
        (lambda a: {**a, "ks": None}, "k_scale or v_scale is None"),
        (lambda a: {**a, "q": a["q"][:, :3]}, "multiple of Hkv"),
    ],
)
def test_errors_name_the_op(mutate, message) -> None:
    gen = torch.Generator().manual_seed(5)
    q, cache, tables, lens, qs, ks, vs = make_paged(2, 4, 2, 32, 16, 2, FP8, torch.bfloat16, gen)
    a = mutate(dict(q=q, cache=cache, tables=tables, lens=lens, ks=ks, vs=vs))
    with pytest.raises(RuntimeError, match=f"graphfuse::paged_decode_attention.*{message}"):
        paged_decode_fp32(a["q"], a["cache"], a["tables"], a["lens"], None, a["ks"], a["vs"])
    if native_available():
        with pytest.raises(RuntimeError, match=message):
            ops.paged_decode_attention_fp8(
                a["q"],
                a["cache"],
                a["tables"],
                a["lens"],
                None,
                a["ks"],
                a["vs"],
                None,
                torch.tensor([1.0]),
            )
