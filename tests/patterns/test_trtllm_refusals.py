"""What the ``trtllm`` rule set must refuse, each with the sentence that says why; the
dynamic-shape export of the Llama model; the fused program's ``.pt2`` round trip."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import warnings
from pathlib import Path

import pytest
import torch
from torch.export import Dim

import graphfuse

from . import _models as M
from .conftest import B, S, exported, fused, hidden, padding_mask, qkv

FUSING_RULES = ("attention_fp8_out", "attention_nvfp4_out", "attention_fp8_inputs")


def _export(mod: torch.nn.Module, args: tuple, **kw: object) -> torch.export.ExportedProgram:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        return torch.export.export(mod.eval(), args, **kw)


def _llama(**cfg: object) -> tuple[torch.nn.Module, tuple]:
    mod = M.LlamaLayer(M.Config(dtype=torch.float32, **cfg))
    return mod, (hidden(B, S, torch.float32), padding_mask(B, S))


def _nvfp4(**cfg: object) -> tuple[torch.nn.Module, tuple]:
    c = M.Config(dtype=torch.float32, **cfg)
    q, k, v = qkv(torch.float32, d=c.head_dim)
    return M.NVFP4OutAttention(c), (q, k, v, M.causal_bool_mask(padding_mask(B, S)))


NEGATIVE = {
    # attention output also feeding a residual add: an intermediate escapes the match
    "residual": (lambda: _llama(residual_from_attn=True), "attention_fp8_out", "is also used by"),
    "per_channel_scale": (
        lambda: _llama(per_channel_scale=True),
        "attention_fp8_out",
        "has shape [256]; the rule needs a single element",
    ),
    "nvfp4_head_dim_72": (
        lambda: _nvfp4(head_dim=72),
        "attention_nvfp4_out",
        "head_dim is 72; NVFP4 output needs a multiple of 16",
    ),
    "dropout": (
        lambda: _nvfp4(dropout=0.1),
        "attention_nvfp4_out",
        "dropout_p is 0.1; the fused op has no dropout",
    ),
}


@pytest.mark.parametrize("case", sorted(NEGATIVE))
def test_refused_with_a_reason(case: str) -> None:
    build, rule, sentence = NEGATIVE[case]
    mod, args = build()
    ep = _export(mod, args)
    result = graphfuse.apply(ep, "trtllm")
    fired = {r: n for r, n in result.report.counts.items() if n and r in FUSING_RULES}
    assert not fired, f"{case}: fused anyway: {fired}"
    reasons = [nm.reason for nm in result.report.near_misses if nm.rule == rule]
    assert any(sentence in r for r in reasons), f"{case}: reasons were {reasons}"
    # explain() reports the same sentence without changing anything
    assert any(sentence in nm.reason for nm in graphfuse.explain(ep).near_misses)


def test_dynamic_batch_and_sequence(kind: str) -> None:
    """Exported with torch.export.Dim for batch and sequence; the fused program runs at two
    sizes and matches the original there."""
    mod, args = _llama()
    batch, seq = Dim("batch", min=1, max=8), Dim("seq", min=2, max=128)
    shapes = {"hidden_states": {0: batch, 1: seq}, "attention_mask": {0: batch, 1: seq}}
    ep = _export(mod, args, dynamic_shapes=shapes)
    if kind == "core":
        ep = ep.run_decompositions()
    result = graphfuse.apply(ep, "trtllm")
    assert result.report.counts["attention_fp8_out"] == 1, result.report.near_misses
    for b, s in ((1, 24), (3, 40)):
        inputs = (hidden(b, s, torch.float32, seed=b + s), padding_mask(b, s, pad=3))
        with torch.no_grad():
            _, want = ep.module()(*inputs)
            _, got = result.program.module()(*inputs)
        equal = (got[0].view(torch.uint8) == want[0].view(torch.uint8)).float().mean().item()
        assert got[0].shape == (b, s, 256) and equal >= 0.99, (b, s, equal)


_LOAD = """
import sys, torch, graphfuse
ep = torch.export.load(sys.argv[1])
saved = torch.load(sys.argv[2])
with torch.no_grad():
    _, got = ep.module()(*saved["inputs"])
names = [n.target.name() for n in ep.graph.nodes if n.op == "call_function"
         and hasattr(n.target, "name")]
assert "graphfuse::attention_fp8" in names, names
for g, w in zip(got, saved["want"]):
    assert torch.equal(g.view(torch.uint8), w.view(torch.uint8))
print("ok")
"""


def test_pt2_round_trip_in_a_fresh_process(tmp_path: Path) -> None:
    result = fused("llama", "pre")
    args = (hidden(B, S, torch.float32), padding_mask(B, S))
    with torch.no_grad():
        _, want = result.program.module()(*args)
    torch.export.save(result.program, tmp_path / "fused.pt2")
    torch.save({"inputs": args, "want": want}, tmp_path / "io.pt")
    script = tmp_path / "load.py"
    script.write_text(textwrap.dedent(_LOAD))
    proc = subprocess.run(
        [sys.executable, str(script), str(tmp_path / "fused.pt2"), str(tmp_path / "io.pt")],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stderr[-2000:]
    assert exported("llama", "pre")[1] is not result.program
