"""Triton paged decode attention against the reference: FP8 / bf16 KV cache, split-KV on and
off, all output formats, poisoned outputs, CUDA-graph capture, opcheck."""

from __future__ import annotations

import random

import pytest
import torch

import graphfuse  # noqa: F401
import graphfuse.triton  # noqa: F401  (CUDA impls; until graphfuse/__init__ imports it)
from graphfuse.ops.paged_ref import paged_decode_fp32
from graphfuse.ops.quant_ref import fp8_static_quant_ref, nvfp4_quant_ref
from graphfuse.testing.numerics import assert_fp8_close, assert_nvfp4_close
from graphfuse.triton.decode.config import CLASSES, KNOBS

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA"),
]

FP8 = torch.float8_e4m3fn
DEV = "cuda"  # make_paged / run_case; tests/triton_kernels/_decode_cases.py runs them on "cpu"


def make_paged(b, hq, hkv, d, block, max_blocks, kv_dtype, gen, q_dtype=torch.bfloat16):
    """Random q, KV cache (extra unused blocks), shuffled block tables and lengths (0, full
    and random)."""
    nblocks = b * max_blocks + 3
    q = torch.randn((b, hq, d), generator=gen).to(q_dtype).to(DEV)
    cache = torch.randn((nblocks, 2, block, hkv, d), generator=gen)
    ks = vs = None
    if kv_dtype == FP8:
        cache = (cache * 64).to(FP8)
        ks = torch.tensor([1 / 64.0], device=DEV)
        vs = torch.tensor([1 / 48.0], device=DEV)
    else:
        cache = cache.to(kv_dtype)
    perm = torch.randperm(nblocks, generator=gen)[: b * max_blocks]
    tables = perm.view(b, max_blocks).to(torch.int32)
    lens = torch.randint(1, max_blocks * block + 1, (b,), generator=gen).to(torch.int32)
    lens[0] = max_blocks * block
    if b > 2:
        lens[1] = 0
    tables[lens == 0] = -1  # never dereferenced
    return q, cache.to(DEV), tables.to(DEV), lens.to(DEV), ks, vs


def _cases(n: int, seed: int):
    rng = random.Random(seed)
    print(f"seed={seed}")
    for _ in range(n):
        hq, hkv = rng.choice([(32, 8), (8, 8), (40, 8), (4, 1)])
        yield dict(
            b=rng.choice([1, 3, 5]),
            hq=hq,
            hkv=hkv,
            d=rng.choice([64, 128]),
            block=rng.choice([16, 16, 32]),
            max_blocks=rng.choice([1, 7, 40]),
            kv=rng.choice([FP8, FP8, torch.bfloat16]),
            splits=rng.choice([None, 1, 3, 20]),
            prefetch=rng.choice([None, False, True]),
            seed=rng.randrange(1 << 30),
        )


def run_case(c: dict, config: dict | None = None) -> None:
    """One case in all three output formats (poisoned outputs); ``config`` overrides the
    decode launch's knobs (``c``'s ``splits`` / ``prefetch`` when not None come first)."""
    from graphfuse.triton.decode.paged import paged_into

    gen = torch.Generator().manual_seed(c["seed"])
    q, cache, tables, lens, ks, vs = make_paged(
        c["b"], c["hq"], c["hkv"], c["d"], c["block"], c["max_blocks"], c["kv"], gen
    )
    args = (q, cache, tables, lens, None, ks, vs, None)
    wide = paged_decode_fp32(*args)
    amax = max(wide.abs().max().item(), 1e-6)
    ov = {k: c[k] for k in ("splits", "prefetch") if c.get(k) is not None}
    ov = {"config": {**ov, **(config or {})} or None}
    o16 = torch.full(q.shape, float("nan"), dtype=torch.bfloat16, device=DEV)
    paged_into(*args, o16, 0, **ov)
    err = ((o16.float() - wide).norm() / wide.norm().clamp_min(1e-30)).item()
    assert not torch.isnan(o16).any() and err < 2e-2, (c, err)
    s_o = torch.tensor([amax / 448.0], device=DEV)
    o8 = torch.full(q.shape, 0xFF, dtype=torch.uint8, device=DEV).view(FP8)
    paged_into(*args, o8, 1, s_o, **ov)
    assert_fp8_close(o8, fp8_static_quant_ref(wide, s_o), wide, s_o, min_equal=0.9)
    b, hq, d = q.shape
    g = torch.tensor([448 * 6 / amax], device=DEV)
    pk = torch.full((b, hq * d // 2), 0xA5, dtype=torch.uint8, device=DEV)
    sf = torch.full(
        ((b + 127) // 128 * 128, (hq * d // 16 + 3) // 4 * 4),
        0xFF,
        dtype=torch.uint8,
        device=DEV,
    ).view(FP8)
    paged_into(*args, pk, 2, g, sf, **ov)
    w2 = wide.reshape(b, hq * d)
    rp, rs = nvfp4_quant_ref(w2, g, swizzle=True)
    assert_nvfp4_close(pk, sf, rp, rs, w2, g, min_equal=0.9)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_paged_decode_matches_reference(seed: int) -> None:
    for c in _cases(5, seed):
        run_case(c)


# sequences long enough for the merge's 4-warp launch (16 splits or more): 20 splits of a
# 1280-token table and 64 of a 4096-token one, 64-token tiles
MANY_SPLITS = [
    dict(b=2, hq=32, hkv=8, d=128, block=32, max_blocks=40, kv=FP8, splits=20, seed=11),
    dict(b=1, hq=40, hkv=8, d=128, block=32, max_blocks=128, kv=FP8, splits=64, seed=12),
    dict(b=3, hq=8, hkv=8, d=64, block=16, max_blocks=80, kv=torch.bfloat16, splits=20, seed=13),
]


@pytest.mark.parametrize("case", range(len(MANY_SPLITS)))
def test_paged_decode_many_splits(case: int) -> None:
    run_case(dict(MANY_SPLITS[case], prefetch=None), {"block_n": 64})


def _class_configs(paged: bool) -> list[dict]:
    return [dict(zip(KNOBS, knobs)) for p, _, _, _, knobs in CLASSES if p == paged]


@pytest.mark.parametrize("row", range(len(_class_configs(True))))
def test_paged_decode_each_shape_class(row: int) -> None:
    """Every paged row of the decode configuration table on small shapes (the table picks
    it for large ones)."""
    cfg = _class_configs(True)[row]
    for c in _cases(3, 100 + row):
        c["prefetch"] = None
        run_case(c, cfg if cfg["splits"] else dict(cfg, splits=c["splits"]))


def test_dense_decode_each_shape_class() -> None:
    """Every dense row of the table (the attention ops with Sq == 1) against the reference."""
    from graphfuse.ops.attention_ref import attention_fp32
    from graphfuse.triton.decode.launch import decode_into

    gen = torch.Generator().manual_seed(6)
    b, hq, hkv, skv, d = 3, 8, 2, 333, 128
    q = torch.randn((b, hq, 1, d), generator=gen).to(torch.bfloat16).cuda()
    k, v = ((torch.randn((b, hkv, skv, d), generator=gen) * 64).to(FP8).cuda() for _ in "kv")
    s = torch.tensor([1 / 64.0], device="cuda")
    wide = attention_fp32(q, k, v, None, s, s, None, "none", None, "bhsd", "default")
    for cfg in _class_configs(False):
        for splits in (1, 3):
            o = torch.full((b, hq, 1, d), float("nan"), dtype=torch.bfloat16, device="cuda")
            decode_into(
                q[:, :, 0], k, v, None, s, s, None, o, 0, (hq * d, d),
                config=dict(cfg, splits=splits),
            )  # fmt: skip
            err = ((o.float() - wide).norm() / wide.norm()).item()
            assert err < 2e-2, (cfg, splits, err)


def test_decode_refuses_unknown_knobs() -> None:
    """A removed decode switch is refused by name, not silently ignored."""
    c = dict(b=1, hq=4, hkv=1, d=64, block=16, max_blocks=3, kv=FP8, splits=None, seed=0)
    with pytest.raises(ValueError, match="unknown decode config keys"):
        run_case(c, dict(trans=True))


def test_paged_decode_nvfp4_scale_padding() -> None:
    """Padding rows of a second 128-row scale tile (zeroed in the kernel) and padding
    columns (Hq*D/16 not a multiple of 4: the memset path), with one split and several."""
    for b, hq, hkv, d in ((130, 2, 1, 32), (3, 3, 1, 16)):
        for splits in (None, 1):
            c = dict(b=b, hq=hq, hkv=hkv, d=d, block=16, max_blocks=3, kv=FP8, splits=splits)
            run_case(dict(c, seed=b))


def test_paged_decode_ops_match_cpu_kernel() -> None:
    """The CUDA op and the C++ CPU op agree on the same inputs (FP8 out, within one step)."""
    gen = torch.Generator().manual_seed(3)
    q, cache, tables, lens, ks, vs = make_paged(3, 8, 2, 64, 16, 5, FP8, gen)
    s_o = torch.tensor([0.002], device="cuda")
    ops = torch.ops.graphfuse
    args = (q, cache, tables, lens, None, ks, vs, None)
    gpu = ops.paged_decode_attention_fp8(*args, s_o)
    cpu = ops.paged_decode_attention_fp8(
        *[a.cpu() if isinstance(a, torch.Tensor) else a for a in args], s_o.cpu()
    )
    wide = paged_decode_fp32(*args)
    assert_fp8_close(gpu, cpu, wide, s_o, min_equal=0.9)


def test_paged_decode_cuda_graph() -> None:
    gen = torch.Generator().manual_seed(9)
    q, cache, tables, lens, ks, vs = make_paged(4, 32, 8, 128, 16, 64, FP8, gen)
    s_o = torch.tensor([0.002], device="cuda")
    ops = torch.ops.graphfuse
    args = (q, cache, tables, lens, None, ks, vs, None)
    ops.paged_decode_attention_fp8(*args, s_o)
    ops.paged_decode_attention_nvfp4(*args, s_o * 1e5)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        o8 = ops.paged_decode_attention_fp8(*args, s_o)
        p4, _ = ops.paged_decode_attention_nvfp4(*args, s_o * 1e5)
    q2, c2, t2, l2, *_ = make_paged(4, 32, 8, 128, 16, 64, FP8, gen)
    q.copy_(q2), cache.copy_(c2), tables.copy_(t2), lens.copy_(l2)
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(
        o8.view(torch.uint8), ops.paged_decode_attention_fp8(*args, s_o).view(torch.uint8)
    )
    assert torch.equal(p4, ops.paged_decode_attention_nvfp4(*args, s_o * 1e5)[0])


def test_paged_decode_opcheck_cuda() -> None:
    gen = torch.Generator().manual_seed(4)
    q, cache, tables, lens, ks, vs = make_paged(2, 8, 2, 64, 16, 3, torch.bfloat16, gen)
    s = torch.tensor([0.01], device="cuda")
    args = (q, cache, tables, lens, None, ks, vs, None)
    ops = torch.ops.graphfuse
    utils = ("test_schema", "test_autograd_registration", "test_faketensor")
    torch.library.opcheck(
        ops.paged_decode_attention.default, (*args, torch.bfloat16), test_utils=utils
    )
    torch.library.opcheck(ops.paged_decode_attention_fp8.default, (*args, s), test_utils=utils)
    torch.library.opcheck(
        ops.paged_decode_attention_nvfp4.default, (*args, s * 1e4), test_utils=utils
    )


def test_paged_decode_dependent_launch_chain() -> None:
    """With ``pdl`` the decode kernel launches while the kernel before it (here the previous
    call's merge, which lets it) is still running, and must wait before reading: a call whose
    q is the previous call's output, eagerly and replayed from a CUDA graph with that output
    poisoned first, gives the bytes of the same calls without dependent launches."""
    from graphfuse.triton.decode.paged import paged_into

    gen = torch.Generator().manual_seed(23)
    q, cache, tables, lens, ks, vs = make_paged(8, 32, 8, 128, 16, 64, FP8, gen)
    s_o = torch.tensor([0.002], device=DEV)
    o1 = torch.empty_like(q)
    o2 = torch.empty(q.shape, dtype=FP8, device=DEV)

    def chain(pdl: bool) -> None:
        o1.fill_(float("nan"))
        for splits in (5, 1):
            cfg = {"splits": splits, "pdl": pdl}
            paged_into(q, cache, tables, lens, None, ks, vs, None, o1, 0, config=cfg)
            paged_into(o1, cache, tables, lens, None, ks, vs, None, o2, 1, s_o, config=cfg)

    chain(False)
    ref = o2.view(torch.uint8).clone()
    assert not torch.isnan(o1).any()
    chain(True)
    assert torch.equal(o2.view(torch.uint8), ref)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        chain(True)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(3):
            chain(True)
    o2.view(torch.uint8).fill_(0xFF)
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(o2.view(torch.uint8), ref)
