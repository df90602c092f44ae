"""Rewritten exported programs stay programs: the signature keeps every kind of spec, a
.pt2 of one saves and loads in a fresh process and computes what the original computes,
and a rewritten pre-dispatch or decomposed program can be decomposed further."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

import graphfuse
from graphfuse import dsl as P
from tests._models import Silu, aten, check_rewrite, dims, export, gftest, randn, rules

X = P.tensor("x")
SILU = P.op(aten.mul, X, P.op(aten.sigmoid, X), commutative=True)
TESTS = Path(__file__).resolve().parents[1]


class _Block(torch.nn.Module):
    """A parameter, a buffer and two outputs: the signature has every kind of spec."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(8, 8)
        self.register_buffer("shift", torch.randn(8))

    def forward(self, x):
        h = self.lin(x) + self.shift
        return h * torch.sigmoid(h), torch.sigmoid(x) * x


@pytest.fixture(scope="module")
def fused(tmp_path_factory):
    out = tmp_path_factory.mktemp("pt2")
    made = {}
    for name, rewrite in (
        ("aten", lambda m, b: b.call(aten.silu.default, m["x"])),
        ("custom", lambda m, b: b.call(gftest.silu.default, m["x"])),
    ):
        ep = torch.export.export(
            _Block(), (torch.randn(5, 8),), dynamic_shapes={"x": {0: dims("B")[0]}}
        )
        res = check_rewrite(
            ep,
            rules(graphfuse.Rule("silu", SILU, rewrite)),
            lambda s: (randn(7, 8, seed=s),),
            {"silu": 2},
        )
        path = out / f"{name}.pt2"
        graphfuse.save_program(res.program, path)
        made[name] = (ep, res.program, path)
    return out, made


def test_signature_after_rewrite(fused):
    _, made = fused
    for ep, new, _ in made.values():
        assert [s.kind for s in new.graph_signature.input_specs] == [
            s.kind for s in ep.graph_signature.input_specs
        ]
        assert new.state_dict.keys() == ep.state_dict.keys()
        assert len(new.graph_signature.output_specs) == 2


def test_pt2_round_trip_in_a_fresh_process(fused):
    out, made = fused
    x = randn(6, 8, seed=7)
    torch.save(x, out / "x.pt")
    for name, (ep, _, _) in made.items():
        torch.save(ep.module()(x), out / f"{name}.expected.pt")
    script = textwrap.dedent(
        f"""
        import sys
        import torch
        import graphfuse  # registers graphfuse:: ops
        sys.path.insert(0, {str(TESTS)!r})
        import _models  # registers the test-only gftest:: ops
        x = torch.load({str(out / "x.pt")!r})
        for name, target in (("aten", "aten.silu.default"), ("custom", "gftest.silu.default")):
            path = {str(out)!r} + "/" + name + ".pt2"
            for ep in (torch.export.load(path), graphfuse.load_program(path)):
                found = [str(n.target) for n in ep.graph.nodes if n.op == "call_function"]
                assert found.count(target) == 2, found
                got = ep.module()(x)
                want = torch.load({str(out)!r} + "/" + name + ".expected.pt")
                torch.testing.assert_close(got, want)
        print("ok")
        """
    )
    proc = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.strip() == "ok"


def test_decomposed_program_rewrites_and_runs():
    ep = export(Silu(), (torch.randn(3, 8),), decompose=True)
    rs = rules(graphfuse.Rule("silu", SILU, lambda m, b: b.call(gftest.silu.default, m["x"])))
    res = check_rewrite(ep, rs, lambda s: (randn(3, 8, seed=s),), {"silu": 1})
    # the rewritten program can be decomposed further and still agrees
    again = res.program.run_decompositions()
    x = randn(3, 8, seed=3)
    torch.testing.assert_close(again.module()(x), ep.module()(x))
