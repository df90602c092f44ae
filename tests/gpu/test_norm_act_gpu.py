"""Triton norm / activation + quant kernels on CUDA against graphfuse/ops/norm_act_ref.py.

The seeded cases of ``tests/triton_kernels/_norm_act_cases.py`` run through the ``*_into`` launchers
with poisoned outputs, within docs/numerics.md's GPU acceptance (the RMSNorm kernels' sum of
squares is a tree, the activations use the hardware ``exp``), the residual bit-equal.
Then every op through the dispatcher (3-D inputs, merged gate / up halves), opcheck,
CUDA-graph capture + replay, and a chain of dependent launches.
"""

from __future__ import annotations

import pytest
import torch
import triton
import triton.language as tl

import graphfuse  # noqa: F401  (registers the ops and their lazy CUDA impls)
from graphfuse.ops import norm_act_ref as R
from graphfuse.ops import quant_ref
from graphfuse.triton.formats import e2m1_byte_of_products

from ..triton_kernels._norm_act_cases import failures, fp8_stats, nvfp4_stats, run_all, same_float

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA"),
]
OPS = torch.ops.graphfuse
UTILS = ("test_schema", "test_autograd_registration", "test_faketensor")


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_launchers_against_reference(seed: int) -> None:
    records = run_all(seed, 16, "cuda")
    for r in records:
        print(r)
    bad = [r for r in records if r["error"]]
    assert not bad, bad


def _inputs(t: int = 37, hidden: int = 512, inter: int = 1024, dtype=torch.bfloat16):
    gen = torch.Generator().manual_seed(t)
    x = (torch.randn(1, t, hidden, generator=gen) * 2).to(dtype).cuda()
    res = torch.randn(1, t, hidden, generator=gen).to(dtype).cuda()
    w = (torch.rand(hidden, generator=gen) + 0.5).to(dtype).cuda()
    merged = (torch.randn(1, t, 2 * inter, generator=gen) * 3).to(dtype).cuda()
    return x, res, w, merged


def _calls(x, res, w, merged, s, g):
    gate, up = merged.chunk(2, dim=-1)
    return {
        "rms_norm_quant_fp8": (OPS.rms_norm_quant_fp8, (x, w, 1e-6, s)),
        "add_rms_norm_quant_fp8": (OPS.add_rms_norm_quant_fp8, (x, res, w, 1e-6, s)),
        "rms_norm_quant_nvfp4": (OPS.rms_norm_quant_nvfp4, (x, w, 1e-6, g)),
        "add_rms_norm_quant_nvfp4": (OPS.add_rms_norm_quant_nvfp4, (x, res, w, 1e-6, g)),
        "act_and_mul_quant_fp8": (OPS.act_and_mul_quant_fp8, (gate, up, s)),
        "act_and_mul_quant_nvfp4": (OPS.act_and_mul_quant_nvfp4, (gate, up, g, "gelu_tanh")),
    }


_REFS = {
    "rms_norm_quant_fp8": R.rms_norm_quant_fp8_ref,
    "add_rms_norm_quant_fp8": R.add_rms_norm_quant_fp8_ref,
    "rms_norm_quant_nvfp4": R.rms_norm_quant_nvfp4_ref,
    "add_rms_norm_quant_nvfp4": R.add_rms_norm_quant_nvfp4_ref,
    "act_and_mul_quant_fp8": R.act_and_mul_quant_fp8_ref,
    "act_and_mul_quant_nvfp4": R.act_and_mul_quant_nvfp4_ref,
}


def _bytes(t: torch.Tensor) -> torch.Tensor:
    return t.view(torch.uint8) if t.dtype == torch.float8_e4m3fn else t


def _check(name: str, got, args) -> None:
    """``got`` (an op's outputs on CUDA) against the reference on the CPU copies of ``args``."""
    cpu = tuple(a.cpu() if isinstance(a, torch.Tensor) else a for a in args)
    want = _REFS[name](*cpu)
    got = got if isinstance(got, tuple) else (got,)
    want = want if isinstance(want, tuple) else (want,)
    act, add = name.startswith("act"), name.startswith("add")
    if want[0].dtype == torch.float8_e4m3fn:
        st = fp8_stats(got[0], want[0])
    else:
        if act:
            gate, up, g, activation = cpu
            wide = R.act_and_mul_ref(gate, up, activation)
        else:
            x, res, w, eps, g = cpu if add else (cpu[0], None, *cpu[1:])
            wide, _ = R.rms_norm_ref(x, w, eps, res)
        st = nvfp4_stats(got[:2], want[:2], wide, g, True)
    if add:
        st["residual_equal"] = same_float(got[-1], want[-1])
    assert not failures(st), (name, st)


def test_ops_through_the_dispatcher() -> None:
    s, g = torch.tensor([0.03], device="cuda"), torch.tensor([400.0], device="cuda")
    for name, (op, args) in _calls(*_inputs(), s, g).items():
        _check(name, op(*args), args)


def test_nvfp4_infinite_global_scale() -> None:
    """g = inf: the encode multiplier is infinite, so every nonzero value encodes to +-6 and
    +-0 stays +-0 (a zero block gets a NaN scale), as in the reference: bytes equal."""
    x, res, w, merged = _inputs(t=5, hidden=256, inter=256)
    x[0, 0, :16] = 0.0
    x[0, 1, 16:32] = -0.0
    merged[0, 2, :32] = 0.0  # gate and up both zero in two blocks
    s, g = torch.tensor([0.03], device="cuda"), torch.tensor([float("inf")], device="cuda")
    for name, (op, args) in _calls(x, res, w, merged, s, g).items():
        if name.endswith("nvfp4"):
            got = op(*args)
            want = _REFS[name](*(a.cpu() if isinstance(a, torch.Tensor) else a for a in args))
            nan_got, nan_want = torch.isnan(got[1].float().cpu()), torch.isnan(want[1].float())
            assert torch.equal(got[0].cpu(), want[0]), name
            assert torch.equal(nan_got, nan_want), name
            assert torch.equal(got[1].float().cpu()[~nan_got], want[1].float()[~nan_want]), name


def test_opcheck_cuda() -> None:
    s, g = torch.tensor([0.03], device="cuda"), torch.tensor([400.0], device="cuda")
    for _name, (op, args) in _calls(*_inputs(t=5, hidden=64, inter=64), s, g).items():
        torch.library.opcheck(op.default, args, test_utils=UTILS)


def test_cuda_graph_capture_and_replay() -> None:
    x, res, w, merged = _inputs()
    s, g = torch.tensor([0.03], device="cuda"), torch.tensor([400.0], device="cuda")
    calls = _calls(x, res, w, merged, s, g)
    for op, args in calls.values():  # compile the kernels outside the capture
        op(*args)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        outs = {name: op(*args) for name, (op, args) in calls.items()}
    fresh = _inputs(t=37, hidden=512, inter=1024)
    for dst, src in zip((x, res, w, merged), fresh):
        dst.copy_(src * 1.5)
    s.fill_(0.05)
    g.fill_(300.0)
    graph.replay()
    torch.cuda.synchronize()
    for name, (op, args) in calls.items():
        _check(name, outs[name], args)
        eager = op(*args)
        eager = eager if isinstance(eager, tuple) else (eager,)
        replay = outs[name] if isinstance(outs[name], tuple) else (outs[name],)
        for a, b in zip(replay, eager):
            assert torch.equal(_bytes(a), _bytes(b)), name


def test_dependent_launch_chain(monkeypatch: pytest.MonkeyPatch) -> None:
    """From sm_90 a launch of few programs (``launch._launch``; here every launch) is a
    programmatic dependent launch that may start while the kernel before it runs and must
    wait before reading: a chain of calls, each reading the one before's output (the new
    residual, its halves as gate / up), eagerly and replayed from a CUDA graph with the
    outputs poisoned first, gives the bytes of the same calls as plain launches."""
    from graphfuse.triton.norm_act import launch

    x, res, w, _ = _inputs(t=100, hidden=4096)
    s, g = torch.tensor([0.03], device="cuda"), torch.tensor([400.0], device="cuda")
    assert launch._launch(x.device, 256)["PDL"] == launch.has_pdl(x.device)  # the largest grid

    def chain() -> list[torch.Tensor]:
        _, h1 = OPS.add_rms_norm_quant_fp8(x, res, w, 1e-6, s)
        q2, sf2, h2 = OPS.add_rms_norm_quant_nvfp4(h1, res, w, 1e-6, g)
        q3, sf3 = OPS.rms_norm_quant_nvfp4(h2, w, 1e-6, g)
        gate, up = h2.chunk(2, dim=-1)
        q4 = OPS.act_and_mul_quant_fp8(gate, up, s)
        q5, sf5 = OPS.act_and_mul_quant_nvfp4(gate, up, g)
        return [h1, q2, sf2, h2, q3, sf3, q4, q5, sf5]

    with monkeypatch.context() as plain:
        plain.setattr(launch, "has_pdl", lambda device: False)
        ref = [_bytes(t).clone() for t in chain()]
    assert all(torch.equal(_bytes(a), b) for a, b in zip(chain(), ref))
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        chain()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(2):
            outs = chain()
    for t in outs:
        t.view(torch.uint8).fill_(0xFF)
    graph.replay()
    torch.cuda.synchronize()
    assert all(torch.equal(_bytes(a), b) for a, b in zip(outs, ref))


@triton.jit
def _products_kernel(X, K, BYTE, N, BLOCK: tl.constexpr):
    pairs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = pairs < N // 2
    lo = tl.load(X + 2 * pairs, mask=m)
    hi = tl.load(X + 2 * pairs + 1, mask=m)
    k = tl.load(K + pairs, mask=m)
    tl.store(BYTE + pairs, e2m1_byte_of_products(lo, hi, k).to(tl.uint8), mask=m)


def test_e2m1_byte_of_products_rounds_the_exact_product() -> None:
    """``e2m1_byte_of_products`` (the NVFP4 norm / act encode) gives the codes of the exact
    products ``x * k``, rounded once: values placed within a few ulp of each e2m1 tie for
    random multipliers (where rounding the fp32 product first can land on the tie), random
    magnitudes, zeros, and products beyond 6."""
    gen = torch.Generator().manual_seed(3)
    n = 1 << 18
    k = torch.exp2(torch.rand(n // 2, generator=gen) * 60 - 30)
    ties = torch.tensor([0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0])
    near = ties[torch.randint(0, 7, (n // 2,), generator=gen)] / k
    near = near.view(torch.int32) + torch.randint(-3, 4, near.shape, generator=gen).int()
    x = torch.stack([near.view(torch.float32), torch.randn(n // 2, generator=gen) * 4 / k], 1)
    x = x.flatten()
    x[:64] = torch.tensor([0.0, -0.0, 1e-40, -1e-40] * 16)
    x[64:128] = 7.5 / k[32:64].repeat_interleave(2)
    x = torch.where(torch.rand(n, generator=gen) < 0.5, -x, x)
    packed = torch.full((n // 2,), 0xA5, dtype=torch.uint8, device="cuda")
    _products_kernel[(triton.cdiv(n // 2, 1024),)](x.cuda(), k.cuda(), packed, n, BLOCK=1024)
    # the reference codes of the exact products (fp32 operands: their float64 product is exact)
    codes = quant_ref.e2m1_codes(x.double() * k.repeat_interleave(2).double())
    want = codes[0::2] | (codes[1::2] << 4)
    assert torch.equal(packed.cpu(), want)
