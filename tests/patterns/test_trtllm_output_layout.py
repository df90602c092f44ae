"""The output layout the ``trtllm`` checks read from the chain between attention and the
quant: each chain spells its layout, ``bhsd_layout`` is ``output_layout`` with sizes
B, H, S, D, and asking again (new nodes, same or different metadata) gives the same
answer as the first time."""

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


def test_each_chain_spells_its_layout() -> None:
    start, (rs, tr), sizes = _block(2, 4, 8, 16)
    dims = tuple(sizes.values())
    for chain, want in (((), "bhsd"), ((tr,), "bshd"), ((rs, tr), "bs(hd)")):
        for _ in range(2):  # asked again: the same answer
            assert _layout.output_layout(start, chain, sizes) == want
            assert _layout.bhsd_layout(start, chain, dims) == want


def test_repeated_block_gives_the_same_layout() -> None:
    first = _layout.output_layout(*_block(2, 4, 8, 16))
    again = _layout.output_layout(*_block(2, 4, 8, 16))  # new nodes, same metadata
    assert first == again == "bs(hd)"


def test_different_metadata_gets_its_own_answer() -> None:
    assert _layout.output_layout(*_block(2, 4, 8, 16)) == "bs(hd)"
    assert _layout.output_layout(*_block(2, 4, 8, 32)) == "bs(hd)"
    # transposing S and D instead: [B, H, D, S] does not regroup into [B, S, H*D]
    assert _layout.output_layout(*_block(2, 4, 8, 16, dims=(2, 3))) is None
