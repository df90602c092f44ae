"""The fused attention ops follow the custom-op contract: opcheck-clean on CPU, fake impls
with symbolic shapes, and a module calling them exports and round-trips through .pt2 in a
fresh process."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest
import torch

import graphfuse

pytestmark = pytest.mark.skipif(
    not graphfuse.ops.native_available(), reason="graphfuse._C not built"
)
OPS = torch.ops.graphfuse


def _inputs(fp8: bool):
    gen = torch.Generator().manual_seed(0)
    q = torch.randn(2, 4, 5, 32, generator=gen).bfloat16()
    k = torch.randn(2, 2, 9, 32, generator=gen)
    v = torch.randn(2, 2, 9, 32, generator=gen)
    if fp8:
        s = torch.tensor([0.01])
        return q, (k / s).to(torch.float8_e4m3fn), (v / s).to(torch.float8_e4m3fn), s
    return q, k.bfloat16(), v.bfloat16(), None


@pytest.mark.parametrize("fp8", [False, True])
@pytest.mark.parametrize("layout", ["bhsd", "bs(hd)"])
def test_opcheck(fp8, layout):
    q, k, v, s = _inputs(fp8)
    mask = torch.rand(5, 9, generator=torch.Generator().manual_seed(1)) > 0.3
    common = (q, k, v, None, s, s, mask, "bottom_right", 0.2, layout, "default")
    cases = [
        (OPS.attention, (*common, torch.float32)),
        (OPS.attention_fp8, (*common, torch.tensor(0.01))),
        (OPS.attention_nvfp4, (*common, torch.tensor(500.0))),
    ]
    for op, args in cases:
        if not fp8:
            torch.library.opcheck(op, args)
            continue
        # torch's SchemaCheckMode compares inputs with a multiply float8 lacks
        # ("mul_cpu_reduced_float" not implemented): run the other checks, and check here that
        # no input is mutated and no output aliases an input.
        tensors = [a for a in args if isinstance(a, torch.Tensor)]
        before = [t.reshape(-1).view(torch.uint8).clone() for t in tensors]
        outs = op(*args)
        outs = outs if isinstance(outs, tuple) else (outs,)
        for t, b in zip(tensors, before, strict=True):
            assert torch.equal(t.reshape(-1).view(torch.uint8), b)
        ptrs = {t.untyped_storage().data_ptr() for t in tensors}
        assert all(o.untyped_storage().data_ptr() not in ptrs for o in outs)
        utils = ("test_autograd_registration", "test_faketensor", "test_aot_dispatch_dynamic")
        torch.library.opcheck(op, args, test_utils=utils)


class Fused(torch.nn.Module):
    def forward(self, q, k8, v8, ks, vs, s_o, g):
        o8 = OPS.attention_fp8(
            q, k8, v8, None, ks, vs, None, "top_left", None, "bs(hd)", "default", s_o
        )
        packed, sf = OPS.attention_nvfp4(
            q, k8, v8, None, ks, vs, None, "top_left", None, "(bs)(hd)", "default", g
        )
        wide = OPS.attention(
            q, k8, v8, None, ks, vs, None, "none", None, "bshd", "default", torch.bfloat16
        )
        return o8, packed, sf, wide


def _export_args():
    q, k8, v8, s = _inputs(True)
    return (q, k8, v8, s, s, torch.tensor(0.01), torch.tensor(500.0))


def test_export_dynamic_seq_shapes_are_symbolic():
    seq = torch.export.Dim("seq", min=2, max=4096)
    ep = torch.export.export(
        Fused(), _export_args(), dynamic_shapes=({2: seq}, None, None, None, None, None, None)
    )
    outs = [n for n in ep.graph.nodes if n.op == "call_function" and "graphfuse" in str(n.target)]
    assert len(outs) == 3
    o8_val = outs[0].meta["val"]
    assert o8_val.dtype == torch.float8_e4m3fn and not isinstance(o8_val.shape[1], int)


def test_pt2_round_trip_in_fresh_process(tmp_path):
    args = _export_args()
    ep = torch.export.export(Fused(), args)
    path = tmp_path / "attn.pt2"
    torch.export.save(ep, str(path))
    expected = ep.module()(*args)
    torch.save({"args": args, "expected": expected}, str(tmp_path / "io.pt"))
    code = textwrap.dedent(
        f"""
        import torch, graphfuse
        ep = torch.export.load({str(path)!r})
        io = torch.load({str(tmp_path / "io.pt")!r})
        got = ep.module()(*io["args"])
        for g, e in zip(got, io["expected"]):
            assert g.dtype == e.dtype and g.shape == e.shape, (g.dtype, e.dtype)
            assert torch.equal(g.view(torch.uint8), e.view(torch.uint8))
        print("ok")
        """
    )
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert res.returncode == 0 and "ok" in res.stdout, res.stderr[-2000:]
