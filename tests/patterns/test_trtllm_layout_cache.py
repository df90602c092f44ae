"""The output-layout simulation of the ``trtllm`` checks is cached by what it reads (the
start's shape, B / H / S / D, each chain op's target and dims or output shape): a repeated
block hits, different metadata misses, and a hit returns what the simulation returns."""

from __future__ import annotations

import torch
from torch import fx
from torch._subclasses.fake_tensor import FakeTensorMode

from graphfuse.patterns.trtllm import _layout

aten = torch.ops.aten


def _block(b: int, h: int, s: int, d: int, dims: tuple[int, int] = (1, 2)) -> tuple:
    """attention output [B, H, S, D] -> transpose(dims) -> reshape to [B, S, H*D]."""
    with FakeTensorMode():
        out = torch.empty(b, h, s, d)
        moved = out.transpose(*dims)
        flat = torch.empty(b, s, h * d)
    g = fx.Graph()
    start = g.placeholder("attn")
    start.meta["val"] = out
    tr = g.call_function(aten.transpose.int, (start, *dims))
    tr.meta["val"] = moved
    rs = g.call_function(aten.reshape.default, (tr, [b, s, h * d]))
    rs.meta["val"] = flat
    return start, (rs, tr), {"B": b, "H": h, "S": s, "D": d}  # chain outermost first


def _run(block: tuple) -> tuple[str | None, dict]:
    before = dict(_layout.STATS)
    got = _layout.output_layout(*block)
    return got, {k: _layout.STATS[k] - before[k] for k in before}


def test_repeated_block_hits_and_agrees_with_the_simulation() -> None:
    _layout._CACHE.clear()
    first, d1 = _run(_block(2, 4, 8, 16))
    again, d2 = _run(_block(2, 4, 8, 16))  # new nodes, same metadata
    assert first == again == "bs(hd)" == _layout._simulate(*_block(2, 4, 8, 16))
    assert d1 == {"hits": 0, "misses": 1}
    assert d2 == {"hits": 1, "misses": 0}


def test_different_metadata_misses() -> None:
    _layout._CACHE.clear()
    _run(_block(2, 4, 8, 16))
    other_sizes, d1 = _run(_block(2, 4, 8, 32))
    assert d1 == {"hits": 0, "misses": 1} and other_sizes == "bs(hd)"
    # transposing other dims reads differently: a miss, and not the cached answer
    other_dims, d2 = _run(_block(2, 4, 8, 16, dims=(2, 3)))
    assert d2 == {"hits": 0, "misses": 1}
    assert other_dims == _layout._simulate(*_block(2, 4, 8, 16, dims=(2, 3))) != "bs(hd)"
