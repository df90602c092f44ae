"""A module calling the four quantization ops exports, round-trips through .pt2, and gives
the same bytes in a fresh Python process."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

import graphfuse  # noqa: F401
from graphfuse.ops import native_available

pytestmark = pytest.mark.skipif(not native_available(), reason="graphfuse._C not built")


class QuantModule(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("s", torch.tensor([0.05]))
        self.register_buffer("g", torch.tensor(120.0))

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        ops = torch.ops.graphfuse
        q = ops.fp8_static_quant(x, self.s)
        y = ops.fp8_dequant(q, self.s, torch.bfloat16)
        packed, sf = ops.nvfp4_quant(y, self.g)
        packed_l, sf_l = ops.nvfp4_quant(x, self.g, False)
        z = ops.nvfp4_dequant(packed, sf, self.g, torch.float32)
        return q.view(torch.uint8), y, packed, sf.view(torch.uint8), sf_l.view(torch.uint8), z


def _as_bytes(outs: tuple[torch.Tensor, ...]) -> list[bytes]:
    return [o.contiguous().reshape(-1).view(torch.uint8).numpy().tobytes() for o in outs]


def test_export_save_load_fresh_process(tmp_path: Path) -> None:
    gen = torch.Generator().manual_seed(7)
    x = torch.randn(3, 50, 64, generator=gen) * 4
    m = QuantModule()
    dims = {"x": {1: torch.export.Dim("s", min=2, max=4096)}}
    ep = torch.export.export(m, (x,), dynamic_shapes=dims)
    targets = {str(n.target) for n in ep.graph.nodes if n.op == "call_function"}
    for op in ("fp8_static_quant", "fp8_dequant", "nvfp4_quant", "nvfp4_dequant"):
        assert f"graphfuse.{op}.default" in targets
    eager = _as_bytes(m(x))
    assert _as_bytes(ep.module()(x)) == eager
    path = tmp_path / "quant.pt2"
    torch.export.save(ep, path)
    loaded = torch.export.load(path)
    assert _as_bytes(loaded.module()(x)) == eager
    x2 = torch.randn(3, 131, 64, generator=gen)  # another M: symbolic shapes in the fakes
    assert _as_bytes(loaded.module()(x2)) == _as_bytes(m(x2))
    torch.save(x, tmp_path / "x.pt")
    code = textwrap.dedent(f"""
        import torch, graphfuse
        ep = torch.export.load({str(path)!r})
        x = torch.load({str(tmp_path / "x.pt")!r})
        outs = ep.module()(x)
        with open({str(tmp_path / "out.bin")!r}, "wb") as f:
            for o in outs:
                f.write(o.contiguous().reshape(-1).view(torch.uint8).numpy().tobytes())
    """)
    subprocess.run([sys.executable, "-c", code], check=True, capture_output=True)
    assert (tmp_path / "out.bin").read_bytes() == b"".join(eager)
